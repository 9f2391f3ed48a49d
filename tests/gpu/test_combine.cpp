// The split-KV combine kernel against the float64 reference: the float64 forward of each key split
// (rounded to float32, as a split-KV forward or a ring-attention step would store it) is merged on
// the GPU and compared with the float64 forward over all keys. Empty splits carry NaN outputs,
// which must never be read; outputs are poisoned before each run and two runs must give the same
// bits, as must the general and the vectorized kernel (combine.cu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/gpu_harness.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn_ref/accuracy.hpp"
#include "hopattn_ref/reference.hpp"

namespace hopattn::testing {
namespace {

struct CombineCase {
  int batch = 2, seqlen = 16, nheads = 4, head_dim = 128;
  std::vector<int> split_keys;  // keys per split; 0 makes an empty split (lse -inf, out NaN)
  DType out_dtype = DType::kBFloat16;
  bool with_lse = true;
  int row_pad = 0;  // out's (seqlen) rows padded by this many elements
  std::string name() const {
    std::string s = std::string(dtype_name(out_dtype)) + "_b" + std::to_string(batch) + "_s" + std::to_string(seqlen) +
                    "_h" + std::to_string(nheads) + "_d" + std::to_string(head_dim) + "_splits" +
                    std::to_string(split_keys.size());
    if (split_keys.size() <= 8)
      for (int k : split_keys) s += "_" + std::to_string(k);
    if (!with_lse) s += "_nolse";
    if (row_pad) s += "_strided";
    return s;
  }
};
inline void PrintTo(const CombineCase& c, std::ostream* os) { *os << c.name(); }

// The largest relative rounding of a value stored in dt, with a margin of 2 (float32: the
// merge's own float32 arithmetic, a few ulps of the terms).
double storage_rel_tol(DType dt) {
  switch (dt) {
    case DType::kBFloat16: return 0x1p-8;
    case DType::kFloat16: return 0x1p-10;
    default: return 0x1p-20;
  }
}

class CombineTest : public ::testing::TestWithParam<CombineCase> {};

TEST_P(CombineTest, MatchesTheForwardOverAllKeys) {
  HT_REQUIRE_HOPPER();
  const CombineCase c = GetParam();
  const int B = c.batch, S = c.seqlen, H = c.nheads, D = c.head_dim;
  const int splits = int(c.split_keys.size());
  const uint64_t seed = std::hash<std::string>{}(c.name());
  std::vector<double> q(size_t(B) * S * H * D);
  ref::fill_random(q, seed);

  // Each split's keys and values, its forward, and the concatenation for the forward over all.
  int total = 0;
  for (int n : c.split_keys) total += n;
  std::vector<std::vector<double>> ks(splits), vs(splits);
  std::vector<ref::FwdResult> parts(splits);
  for (int i = 0; i < splits; ++i) {
    const int n = c.split_keys[i];
    ks[i].resize(size_t(B) * n * H * D);
    vs[i].resize(ks[i].size());
    ref::fill_random(ks[i], seed + 2 * i + 1);
    ref::fill_random(vs[i], seed + 2 * i + 2);
    if (n == 0) {
      parts[i].out.assign(q.size(), std::numeric_limits<double>::quiet_NaN());
      parts[i].lse.assign(size_t(H) * B * S, -std::numeric_limits<double>::infinity());
    } else {
      parts[i] = ref::forward(ref::dense_problem(B, S, n, H, H, D), q, ks[i], vs[i]);
    }
  }
  const ref::Problem all = ref::dense_problem(B, S, std::max(total, 1), H, H, D);
  ref::FwdResult want;
  if (total == 0) {  // no split saw a key: out 0, lse -inf
    want.out.assign(q.size(), 0.0);
    want.lse.assign(size_t(H) * B * S, -std::numeric_limits<double>::infinity());
  } else {
    std::vector<double> k_all, v_all;  // (batch, keys, heads, d): each batch's splits in order
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < splits; ++i) {
        const size_t row = size_t(H) * D, n = size_t(c.split_keys[i]);
        k_all.insert(k_all.end(), ks[i].begin() + b * n * row, ks[i].begin() + (b + 1) * n * row);
        v_all.insert(v_all.end(), vs[i].begin() + b * n * row, vs[i].begin() + (b + 1) * n * row);
      }
    want = ref::forward(all, q, k_all, v_all);
  }

  DeviceTensor op = DeviceTensor::contiguous(DType::kFloat32, {splits, int64_t(B) * S, H, D});
  DeviceTensor lp = DeviceTensor::contiguous(DType::kFloat32, {splits, B, H, S});
  std::vector<double> op_host, lp_host;
  for (int i = 0; i < splits; ++i) {
    op_host.insert(op_host.end(), parts[i].out.begin(), parts[i].out.end());
    const auto dense = ref::lse_packed_to_dense(ref::dense_problem(B, S, 1, H, H, D), parts[i].lse);
    lp_host.insert(lp_host.end(), dense.begin(), dense.end());
  }
  op.upload(op_host);
  lp.upload(lp_host);
  const int64_t row = int64_t(H) * D + c.row_pad;
  DeviceTensor out = DeviceTensor::make(c.out_dtype, {B, S, H, D}, {S * row, row, D, 1});
  DeviceTensor lse = DeviceTensor::contiguous(DType::kFloat32, {B, H, S});

  CombineParams p;
  p.out_partial = op.view;
  p.lse_partial = lp.view;
  p.out = out.view;
  if (c.with_lse) p.lse = lse.view;
  const Plan plan = plan_combine(p, query_device());
  auto run = [&] {
    out.buf.poison();
    lse.buf.poison();
    run_combine(plan, p, nullptr);
    HT_CUDA_CHECK(cudaDeviceSynchronize());
  };
  run();
  const auto got = out.download();
  const auto out_raw = out.raw();
  const double rel = storage_rel_tol(c.out_dtype);
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 + rel * std::fabs(want.out[i]);
    const double ratio = std::fabs(got[i] - want.out[i]) / tol;  // NaN compares false below
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; }
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " outputs off; worst at " << worst << ": kernel " << got[worst]
                     << " ref " << want.out[worst];
  if (c.with_lse) {
    const auto cmp = ref::compare_lse(lse.download(), ref::lse_packed_to_dense(all, want.lse));
    EXPECT_TRUE(cmp.ok) << "lse: " << cmp.describe();
  } else {
    for (double x : lse.download()) ASSERT_TRUE(std::isnan(x)) << "lse was written though not asked for";
  }
  run();
  EXPECT_TRUE(out.raw() == out_raw) << "out differs between two runs";

  // Rows whose stride is not a multiple of 4 elements go to the general kernel instead of the
  // vectorized one (combine.cu): the same bits either way.
  const int64_t odd_row = int64_t(H) * D + c.row_pad + 2;
  DeviceTensor out_general = DeviceTensor::make(c.out_dtype, {B, S, H, D}, {S * odd_row, odd_row, D, 1});
  out_general.buf.poison();
  CombineParams pg = p;
  pg.out = out_general.view;
  pg.lse = TensorView{};
  run_combine(plan_combine(pg, query_device()), pg, nullptr);
  HT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(out_general.download() == got) << "the general kernel's result differs from the vectorized one's";
}

std::vector<CombineCase> cases() {
  std::vector<CombineCase> v;
  auto add = [&](auto&& edit) { CombineCase c; edit(c); v.push_back(c); };
  add([](CombineCase& c) { c.split_keys = {40, 100, 7}; });
  add([](CombineCase& c) { c.split_keys = {40, 100, 7}; c.out_dtype = DType::kFloat32; c.with_lse = false; });
  add([](CombineCase& c) { c.split_keys = {1, 0, 300}; c.out_dtype = DType::kFloat16; c.row_pad = 24; });
  add([](CombineCase& c) {  // many splits, every fifth empty
    c.head_dim = 64;
    c.out_dtype = DType::kFloat32;
    for (int i = 0; i < 40; ++i) c.split_keys.push_back(i % 5 == 0 ? 0 : 1 + i);
  });
  add([](CombineCase& c) { c.batch = 3; c.seqlen = 5; c.nheads = 3; c.head_dim = 256; c.split_keys = {500, 13}; });
  add([](CombineCase& c) { c.head_dim = 320; c.split_keys = {3, 9}; c.out_dtype = DType::kFloat32; });  // two column passes
  add([](CombineCase& c) { c.head_dim = 40; c.seqlen = 7; c.split_keys = {5, 6, 7}; });                  // a partial pass
  add([](CombineCase& c) { c.split_keys = {0, 0}; });  // no split saw a key
  add([](CombineCase& c) { c.split_keys = {77}; c.out_dtype = DType::kFloat32; });
  add([](CombineCase& c) { c.batch = 4; c.seqlen = 1; c.nheads = 8; c.split_keys = {1000, 1000, 1000, 24}; });  // decoding
  add([](CombineCase& c) {  // 32 splits: one whole chunk of the vectorized kernel, some empty
    c.head_dim = 96;
    for (int i = 0; i < 32; ++i) c.split_keys.push_back(i % 7 == 3 ? 0 : 2 + i);
  });
  add([](CombineCase& c) { c.head_dim = 42; c.split_keys = {30, 0, 50}; });  // columns not in fours: general kernel
  return v;
}

INSTANTIATE_TEST_SUITE_P(Coverage, CombineTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CombineCase>& info) { return info.param.name(); });

}  // namespace
}  // namespace hopattn::testing
