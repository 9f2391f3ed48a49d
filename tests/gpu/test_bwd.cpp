// Backward kernels against the float64 reference, over the coverage list of the backward issue:
// dtypes, head dims, causal / window / softcap, seqlen_q != seqlen_k, ragged lengths, GQA/MQA,
// variable length with empty sequences, non-contiguous strides, deterministic mode. The forward
// inputs (out, lse) come from our own forward kernel, as in training. Gradients are poisoned
// before each run and must meet the shared accuracy rule (2x the error of a baseline in the input
// dtype: the naive backward in either of its two forms of D, ref::LowpDelta, or this algorithm's
// own roundings, ref::backward_flash); dK and dV are always
// reproducible bit for bit, dQ too in deterministic mode (checked over 10 runs).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/gpu_harness.hpp"
#include "common/random_cases.hpp"
#include "hopattn_ref/accuracy.hpp"
#include "hopattn_ref/reference.hpp"

namespace hopattn::testing {
namespace {

using BwdCase = AttnCase;

class BwdTest : public ::testing::TestWithParam<BwdCase> {};

struct Tensors {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv;
};

TEST_P(BwdTest, MatchesFloat64Reference) {
  HT_REQUIRE_HOPPER();
  const BwdCase c = GetParam();
  const ref::Problem prob = make_problem(c);
  const int tq = prob.total_q(), tk = prob.total_k();
  const uint64_t seed = std::hash<std::string>{}(c.name());
  const auto q = random_input(prob.q_size(), seed + 1, c.dtype);
  const auto k = random_input(prob.k_size(), seed + 2, c.dtype);
  const auto v = random_input(prob.v_size(), seed + 3, c.dtype);
  const auto dout = random_input(prob.out_size(), seed + 4, c.dtype);

  const int64_t B = c.varlen() ? tq : c.batch, Sq = c.varlen() ? 0 : c.seqlen_q;
  const int64_t Bk = c.varlen() ? tk : c.batch, Sk = c.varlen() ? 0 : c.seqlen_k;
  Tensors t{make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim),
            make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim),
            make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim),
            make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim),
            c.varlen() ? DeviceTensor::contiguous(DType::kFloat32, {c.nheads, tq})
                       : DeviceTensor::contiguous(DType::kFloat32, {c.batch, c.nheads, c.seqlen_q}),
            make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim),
            make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim),
            make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim),
            make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim)};
  t.q.upload(q);
  t.k.upload(k);
  t.v.upload(v);
  t.dout.upload(dout);

  DeviceBuffer cu_q, cu_k;
  FwdParams f;
  f.q = t.q.view;
  f.k = t.k.view;
  f.v = t.v.view;
  f.out = t.out.view;
  f.lse = t.lse.view;
  f.softmax_scale = c.softmax_scale;
  f.mask = {c.causal, c.window_left, c.window_right};
  f.softcap = c.softcap;
  if (c.varlen()) {
    cu_q = upload_ints(prob.cu_seqlens_q);
    cu_k = upload_ints(prob.cu_seqlens_k);
    f.cu_seqlens_q = static_cast<const int32_t*>(cu_q.get());
    f.cu_seqlens_k = static_cast<const int32_t*>(cu_k.get());
    f.batch_varlen = prob.batch;
    f.max_seqlen_q = prob.max_seqlen_q();
    f.max_seqlen_k = prob.max_seqlen_k();
  }
  BwdParams p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.lse = f.lse;
  p.dout = t.dout.view;
  p.dq = t.dq.view;
  p.dk = t.dk.view;
  p.dv = t.dv.view;
  p.cu_seqlens_q = f.cu_seqlens_q;
  p.cu_seqlens_k = f.cu_seqlens_k;
  p.batch_varlen = f.batch_varlen;
  p.max_seqlen_q = f.max_seqlen_q;
  p.max_seqlen_k = f.max_seqlen_k;
  p.softmax_scale = c.softmax_scale;
  p.mask = f.mask;
  p.softcap = c.softcap;
  p.deterministic = c.deterministic;
  p.tuning.lag_dq_min_steps = c.lag_dq_min_steps;
  p.tuning.l2_section_pairs = c.l2_section_pairs;
  p.tuning.dq_convert_sms = c.dq_convert_sms;
  p.tuning.split_tail_tiles = c.split_tail_tiles;
  p.tuning.dq_from_stored_ds = c.dq_from_stored_ds;

  Plan fplan, bplan;
  try {
    fplan = plan_fwd(f, query_device());
    bplan = plan_bwd(p, query_device());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotSupported) GTEST_SKIP() << "not in this build: " << e.what();
    FAIL() << e.what();
  }
  DeviceBuffer fws(fplan.workspace_bytes), bws(bplan.workspace_bytes);
  run_fwd(fplan, f, fws.get(), fws.bytes(), nullptr);
  HT_CUDA_CHECK(cudaDeviceSynchronize());
  // The forward's O and LSE feed the backward and the third baseline below (ref::backward_flash):
  // checked here by the forward's rule, so that a wrong O or LSE cannot pass unseen as the
  // baseline's error; the backward must leave them, and q, as they are.
  const std::vector<double> out_fwd = t.out.download();
  const std::vector<double> lse_fwd = c.varlen() ? t.lse.download() : ref::lse_dense_to_packed(prob, t.lse.download());
  const auto inputs_before = t.q.raw(), out_before = t.out.raw(), lse_before = t.lse.raw();
  {
    const ref::FwdResult fwant = ref::forward(prob, q, k, v);
    const auto cmp = ref::compare(out_fwd, fwant.out, ref::forward_lowp(prob, q, k, v, c.dtype).out);
    ASSERT_TRUE(cmp.ok) << "forward out: " << cmp.describe();
    const auto cmp_lse = ref::compare_lse(lse_fwd, fwant.lse,
                                          ref::lse_abs_tol(c.softcap, c.head_dim, ref::max_score_l1(prob, q, k)));
    ASSERT_TRUE(cmp_lse.ok) << "forward lse: " << cmp_lse.describe();
  }
  const auto run = [&] {
    t.dq.buf.poison();
    t.dk.buf.poison();
    t.dv.buf.poison();
    bws.poison();  // the backward must not rely on the workspace's contents
    run_bwd(bplan, p, bws.get(), bws.bytes(), nullptr);
    HT_CUDA_CHECK(cudaDeviceSynchronize());
  };
  run();
  const ref::BwdResult want = ref::backward(prob, q, k, v, dout);
  // Within 2x of the error of a baseline in the input dtype: the PyTorch expression; the same
  // with D = rowsum(dO * O) taken from the stored O as this backward's preprocess does (they
  // differ where dP - D cancels: ref::LowpDelta); or this algorithm's own roundings from the O
  // and LSE our forward stored (ref::backward_flash), the one that also judges rows where dP - D
  // cancels over a few keys and gradients at a rounding midpoint of the dtype exactly (the
  // random sweep's rare failures of sessions 32-33).
  const ref::BwdResult lowp = ref::backward_lowp(prob, q, k, v, dout, c.dtype);
  const ref::BwdResult lowp_fa = ref::backward_lowp(prob, q, k, v, dout, c.dtype, ref::LowpDelta::kFromOutput);
  const ref::BwdResult flash = ref::backward_flash(prob, q, k, v, dout, out_fwd, lse_fwd, c.dtype);
  const auto check = [](const char* name, const std::vector<double>& got, const std::vector<double>& exact,
                        const std::vector<double>& torch_form, const std::vector<double>& fa_form,
                        const std::vector<double>& flash_form) {
    const auto a = ref::compare(got, exact, torch_form), b = ref::compare(got, exact, fa_form),
               e = ref::compare(got, exact, flash_form);
    EXPECT_TRUE(a.ok || b.ok || e.ok) << name << ": " << a.describe() << "; with D from O: " << b.describe()
                                      << "; this algorithm's roundings: " << e.describe();
  };
  check("dq", t.dq.download(), want.dq, lowp.dq, lowp_fa.dq, flash.dq);
  check("dk", t.dk.download(), want.dk, lowp.dk, lowp_fa.dk, flash.dk);
  check("dv", t.dv.download(), want.dv, lowp.dv, lowp_fa.dv, flash.dv);

  // dK and dV have no atomics: always reproducible. dQ in deterministic mode: 10 runs.
  const auto dq0 = t.dq.raw(), dk0 = t.dk.raw(), dv0 = t.dv.raw();
  const int runs = c.deterministic ? 10 : 2;
  for (int r = 1; r < runs; ++r) {
    run();
    EXPECT_TRUE(t.dk.raw() == dk0) << "dk differs in run " << r;
    EXPECT_TRUE(t.dv.raw() == dv0) << "dv differs in run " << r;
    if (c.deterministic) EXPECT_TRUE(t.dq.raw() == dq0) << "dq differs in run " << r;
  }
  EXPECT_TRUE(t.q.raw() == inputs_before) << "q was modified";
  EXPECT_TRUE(t.out.raw() == out_before) << "out was modified";
  EXPECT_TRUE(t.lse.raw() == lse_before) << "lse was modified";
}

std::vector<BwdCase> coverage() {
  std::vector<BwdCase> cases;
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    for (int d : {64, 96, 128, 192, 256}) {
      BwdCase c;
      c.dtype = dt;
      c.head_dim = d;
      cases.push_back(c);
      BwdCase cc = c; cc.causal = true; cases.push_back(cc);
      if (dt == DType::kBFloat16) {
        BwdCase r = c; r.batch = 1; r.seqlen_q = 300; r.seqlen_k = 517; r.causal = true; cases.push_back(r);
        BwdCase r2 = c; r2.batch = 2; r2.seqlen_q = 517; r2.seqlen_k = 129; r2.causal = true; cases.push_back(r2);
        BwdCase g = c; g.nheads = 8; g.nheads_k = 2; g.seqlen_q = 200; g.seqlen_k = 333; cases.push_back(g);
      }
    }
  }
  BwdCase base;
  auto add = [&](auto&& edit) { BwdCase c = base; edit(c); cases.push_back(c); };
  add([](BwdCase& c) { c.seqlen_q = 1; c.seqlen_k = 1; });
  // Dense problems (whole 128-key tiles, no mask: the dense kernels, manifest.cmake) beyond the
  // 256 x 256 cases above: GQA with a partial query block, one query row, deterministic.
  for (int d : {64, 96, 128, 192, 256}) {
    add([&](BwdCase& c) { c.head_dim = d; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 384; });
    add([&](BwdCase& c) { c.head_dim = d; c.seqlen_q = 1; c.seqlen_k = 128; });
    add([&](BwdCase& c) { c.head_dim = d; c.deterministic = true; c.seqlen_q = 200; c.seqlen_k = 512; });
  }
  add([](BwdCase& c) { c.seqlen_q = 77; c.seqlen_k = 13; });
  add([](BwdCase& c) { c.seqlen_q = 1000; c.seqlen_k = 10; c.causal = true; });  // rows with no key
  add([](BwdCase& c) { c.seqlen_q = 10; c.seqlen_k = 1000; c.causal = true; });  // keys no row sees
  add([](BwdCase& c) { c.nheads = 8; c.nheads_k = 1; c.seqlen_q = 190; });    // MQA
  add([](BwdCase& c) { c.window_left = 100; c.window_right = 30; c.seqlen_q = 500; c.seqlen_k = 700; });
  add([](BwdCase& c) { c.window_left = 64; c.causal = true; c.seqlen_q = 600; c.seqlen_k = 600; });
  add([](BwdCase& c) { c.softcap = 30.f; c.seqlen_q = 300; });
  add([](BwdCase& c) { c.softcap = 5.f; c.causal = true; c.head_dim = 64; });
  add([](BwdCase& c) { c.softmax_scale = 0.5f; c.seqlen_q = 130; });
  add([](BwdCase& c) { c.row_pad = 64; c.seqlen_q = 190; c.seqlen_k = 257; });
  add([](BwdCase& c) { c.row_pad = 8; c.causal = true; c.nheads = 6; c.nheads_k = 3; });
  add([](BwdCase& c) { c.varlen_q = {100, 0, 257, 1}; c.varlen_k = {64, 5, 300, 0}; });
  add([](BwdCase& c) { c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; });
  add([](BwdCase& c) { c.varlen_q = {300, 45}; c.varlen_k = {300, 800}; c.nheads = 8; c.nheads_k = 2; c.window_left = 50; c.head_dim = 64; });
  add([](BwdCase& c) { c.deterministic = true; c.seqlen_q = 1024; c.seqlen_k = 1024; c.causal = true; });
  add([](BwdCase& c) { c.deterministic = true; c.seqlen_q = 700; c.seqlen_k = 900; c.nheads = 8; c.nheads_k = 2; });
  add([](BwdCase& c) { c.deterministic = true; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; c.head_dim = 64; });
  // dQ one step behind dS (bwd/consumer.hpp) in every tile (lag 1), or in the longer tiles of a
  // causal problem only (lag 6); most shapes above are shorter than the library's rule (3 steps).
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int d : {64, 96, 128})
      for (bool causal : {false, true})
        add([&](BwdCase& c) { c.dtype = dt; c.head_dim = d; c.causal = causal; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.seqlen_q = 300; c.seqlen_k = 517; c.causal = true; c.head_dim = 64; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.seqlen_q = 1000; c.seqlen_k = 1000; c.causal = true; c.lag_dq_min_steps = 6; });
  add([](BwdCase& c) { c.seqlen_q = 1; c.seqlen_k = 1; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 200; c.seqlen_k = 333; c.head_dim = 64; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.varlen_q = {100, 0, 257, 1}; c.varlen_k = {64, 5, 300, 0}; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.softcap = 5.f; c.window_left = 64; c.causal = true; c.seqlen_q = 600; c.seqlen_k = 600; c.head_dim = 96; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.deterministic = true; c.seqlen_q = 700; c.seqlen_k = 900; c.nheads = 8; c.nheads_k = 2; c.lag_dq_min_steps = 1; });
  add([](BwdCase& c) { c.deterministic = true; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; c.head_dim = 64; c.lag_dq_min_steps = 1; });
  // The split-head-dim kernel of d192/d256 (bwd/consumer_wide.hpp) under every option.
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 1; c.seqlen_k = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.nheads = 8; c.nheads_k = 1; c.seqlen_q = 190; c.causal = true; });
  // L2 sections of 3 (KV head, batch) pairs over 10 pairs: the last section holds 1, which the
  // tile decode divides by separately (fwd::TileDivisors); also in the deterministic order.
  add([](BwdCase& c) { c.l2_section_pairs = 3; c.batch = 5; c.nheads = 4; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 400; c.causal = true; c.head_dim = 64; });
  add([](BwdCase& c) { c.l2_section_pairs = 3; c.batch = 5; c.nheads = 2; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 400; c.deterministic = true; });
  // The same partial last section in deterministic mode under a mask (forced: at these sizes the
  // rule's sections of 4-8 waves of tiles, l2_sections.hpp, hold the whole problem).
  add([](BwdCase& c) { c.l2_section_pairs = 3; c.batch = 5; c.nheads = 2; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 400; c.deterministic = true; c.causal = true; });
  // The same partial last section in the 64-key tiles of d256 with GQA (sections of 2..8 pairs there).
  add([](BwdCase& c) { c.l2_section_pairs = 3; c.batch = 5; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 400; c.causal = true; c.head_dim = 256; });
  add([](BwdCase& c) { c.head_dim = 192; c.window_left = 100; c.window_right = 30; c.seqlen_q = 500; c.seqlen_k = 700; });
  add([](BwdCase& c) { c.head_dim = 256; c.softcap = 5.f; c.causal = true; c.seqlen_q = 300; });
  add([](BwdCase& c) { c.head_dim = 192; c.row_pad = 8; c.seqlen_q = 190; c.seqlen_k = 257; });
  add([](BwdCase& c) { c.head_dim = 256; c.varlen_q = {100, 0, 257, 1}; c.varlen_k = {64, 5, 300, 0}; c.causal = true; });
  add([](BwdCase& c) { c.head_dim = 256; c.deterministic = true; c.seqlen_q = 700; c.seqlen_k = 900; c.nheads = 8; c.nheads_k = 2; });
  // The d256 writer keeps one bulk op in flight (two dQ pieces, dq_writer.hpp): its first stores
  // and ordered adds across sequences of one step, of none, and of many.
  add([](BwdCase& c) { c.head_dim = 256; c.deterministic = true; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; });
  add([](BwdCase& c) { c.head_dim = 256; c.deterministic = true; c.seqlen_q = 200; c.seqlen_k = 1100; c.dq_from_stored_ds = -1; });  // dq_accum cleared
  add([](BwdCase& c) { c.head_dim = 192; c.deterministic = true; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; });
  // dq_accum cleared under a mask (bwd/launch.hpp, clears_dq_accum: the 64-key tiles beyond 1024
  // keys), also in the deterministic order; every other masked or deterministic case above has
  // its first writer of each query block store instead.
  add([](BwdCase& c) { c.head_dim = 256; c.causal = true; c.seqlen_q = 200; c.seqlen_k = 1100; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.head_dim = 192; c.deterministic = true; c.causal = true; c.seqlen_q = 300; c.seqlen_k = 1100; c.dq_from_stored_ds = -1; });
  // dQ converted after the main kernel (-1) where the library's rule converts it during the main
  // kernel (bwd/dq_convert_rule.hpp: every case above up to 2k keys but the deterministic ones),
  // and the concurrent form where the rule would not take it (deterministic mode, 4k keys and
  // more), on one SM (most converting CTAs start only as the main kernel's leave), and on all SMs
  // but one (one main CTA runs every tile while the others wait for its pairs).
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      add([&](BwdCase& c) { c.head_dim = d; c.causal = causal; c.dq_convert_sms = -1; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; c.dq_convert_sms = -1; });
  add([](BwdCase& c) { c.head_dim = 64; c.seqlen_q = 300; c.seqlen_k = 4500; c.causal = true; c.dq_convert_sms = 8; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 200; c.seqlen_k = 4200; c.dq_convert_sms = 8; });  // dq_accum cleared
  add([](BwdCase& c) { c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 200; c.seqlen_k = 333; c.causal = true; c.dq_convert_sms = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.varlen_q = {100, 0, 257, 1}; c.varlen_k = {64, 5, 300, 0}; c.dq_convert_sms = 1; });
  add([](BwdCase& c) { c.deterministic = true; c.seqlen_q = 700; c.seqlen_k = 900; c.nheads = 8; c.nheads_k = 2; c.dq_convert_sms = 1; });
  add([](BwdCase& c) { c.batch = 3; c.seqlen_q = 300; c.seqlen_k = 400; c.causal = true; c.dq_convert_sms = 100000; });
  add([](BwdCase& c) { c.head_dim = 256; c.deterministic = true; c.batch = 3; c.seqlen_q = 300; c.seqlen_k = 400; c.dq_convert_sms = 100000; c.dq_from_stored_ds = -1; });
  // Key tiles handed out as two halves of their query walk (bwd/tail_split.hpp; the rule takes
  // only problems of more than one wave of tiles): every tile (a huge count), and the last few,
  // with dq_accum cleared (d256 beyond 1024 keys) or first stores, under masks, GQA (each half
  // walks its share of every query head's blocks), varlen with empty sequences and one-block
  // walks (one half empty); the rule's own split (160 tiles of 4k keys: on 132 SMs it splits the
  // last 28) and -1 there. Deterministic mode ignores the count.
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      add([&](BwdCase& c) { c.head_dim = d; c.causal = causal; c.split_tail_tiles = 100000; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 300; c.seqlen_k = 1100; c.causal = true; c.split_tail_tiles = 100000; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 500; c.seqlen_k = 333; c.causal = true; c.split_tail_tiles = 3; });
  add([](BwdCase& c) { c.head_dim = 192; c.nheads = 6; c.nheads_k = 1; c.seqlen_q = 300; c.seqlen_k = 200; c.split_tail_tiles = 100000; });
  add([](BwdCase& c) { c.varlen_q = {129, 0, 300, 17}; c.varlen_k = {200, 5, 300, 1}; c.causal = true; c.split_tail_tiles = 100000; });
  add([](BwdCase& c) { c.head_dim = 96; c.window_left = 100; c.window_right = 30; c.seqlen_q = 500; c.seqlen_k = 700; c.split_tail_tiles = 5; });
  add([](BwdCase& c) { c.head_dim = 64; c.seqlen_q = 64; c.seqlen_k = 700; c.softcap = 5.f; c.split_tail_tiles = 100000; });
  add([](BwdCase& c) { c.deterministic = true; c.seqlen_q = 300; c.seqlen_k = 400; c.split_tail_tiles = 100000; });
  add([](BwdCase& c) { c.head_dim = 128; c.batch = 1; c.nheads = 1; c.nheads_k = 1; c.seqlen_q = 100; c.seqlen_k = 300; c.split_tail_tiles = 1; c.dq_convert_sms = 4; });
  add([](BwdCase& c) { c.head_dim = 64; c.batch = 1; c.nheads = 5; c.nheads_k = 5; c.seqlen_q = 64; c.seqlen_k = 4096; });
  add([](BwdCase& c) { c.head_dim = 64; c.batch = 1; c.nheads = 5; c.nheads_k = 5; c.seqlen_q = 64; c.seqlen_k = 4096; c.split_tail_tiles = -1; });
  // dQ from a stored dS (bwd/stored_ds.hpp; the rule takes d192/d256 problems of fixed lengths
  // up to 2048 keys, so most d192/d256 cases above run it; those that test the dQ adds' own forms
  // there force it off): forced on past the rule (2.1k, 4k keys), under
  // every mask and option with ragged lengths, with split tiles, in fp16; forced off (the dQ
  // adds) where the rule would take it; forced on where it does not apply (varlen: ignored).
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 2000; c.seqlen_k = 2100; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.batch = 1; c.seqlen_q = 129; c.seqlen_k = 4096; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 333; c.seqlen_k = 500; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 500; c.seqlen_k = 333; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.window_left = 100; c.window_right = 30; c.seqlen_q = 500; c.seqlen_k = 700; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.softcap = 5.f; c.seqlen_q = 65; c.seqlen_k = 63; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 1; c.seqlen_k = 700; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.row_pad = 8; c.seqlen_q = 190; c.seqlen_k = 257; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 384; c.seqlen_k = 512; c.dq_from_stored_ds = 1; });  // the dense kernel
  add([](BwdCase& c) { c.head_dim = 256; c.dtype = DType::kFloat16; c.seqlen_q = 300; c.seqlen_k = 300; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.deterministic = true; c.seqlen_q = 700; c.seqlen_k = 900; c.causal = true; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 300; c.seqlen_k = 1000; c.causal = true; c.split_tail_tiles = 100000; c.dq_from_stored_ds = 1; });
  add([](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 1000; c.seqlen_k = 10; c.causal = true; c.dq_from_stored_ds = 1; });  // rows with no key
  add([](BwdCase& c) { c.head_dim = 256; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; c.dq_from_stored_ds = 1; });
  for (bool causal : {false, true})
    add([&](BwdCase& c) { c.head_dim = 256; c.seqlen_q = 500; c.seqlen_k = 700; c.causal = causal; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.head_dim = 192; c.nheads = 6; c.nheads_k = 1; c.seqlen_q = 300; c.seqlen_k = 200; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.head_dim = 192; c.seqlen_q = 500; c.seqlen_k = 700; c.causal = true; c.dq_from_stored_ds = -1; });
  add([](BwdCase& c) { c.head_dim = 256; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 300; c.seqlen_k = 400; c.deterministic = true; c.dq_from_stored_ds = -1; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Coverage, BwdTest, ::testing::ValuesIn(coverage()),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return info.param.name(); });
// Combinations of the options above that the list does not name (common/random_cases.hpp).
INSTANTIATE_TEST_SUITE_P(RandomSweep, BwdTest,
                         ::testing::ValuesIn(random_cases(SweepDirection::kBackward, 32, 24)),
                         [](const ::testing::TestParamInfo<BwdCase>& info) { return sweep_case_name(info); });

}  // namespace
}  // namespace hopattn::testing
