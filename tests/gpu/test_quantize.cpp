// e4m3 quantization kernels against a float64 reference that applies the rotation as an explicit
// Sylvester-Hadamard matrix product (independent of the kernel's in-register transform).
// Checks: descale per block, every element within e4m3 rounding of the exact value, codes equal
// to the reference's rounding almost everywhere (float vs double rotation can flip exact ties),
// outputs poisoned first; and the invariance that makes incoherent processing exact:
// rotate(q) . rotate(k) == q . k.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "common/gpu_harness.hpp"
#include "hopattn/quantize.hpp"
#include "hopattn_ref/numeric.hpp"

namespace hopattn::testing {
namespace {

struct QuantCase {
  DType dtype;
  int batch, seqlen, nheads, head_dim, block_rows;
  bool hadamard;
  int row_pad;
  std::string name() const {
    std::ostringstream os;
    os << dtype_name(dtype) << "_b" << batch << "_s" << seqlen << "_h" << nheads << "_d" << head_dim << "_blk"
       << block_rows << (hadamard ? "_hadamard" : "") << (row_pad ? "_strided" : "");
    return os.str();
  }
};
void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name(); }

// Reference rotation of one row: y = (x * signs) H / sqrt(d).
std::vector<double> rotate_row(const double* x, int d, uint64_t seed) {
  std::vector<double> y(d, 0.0);
  for (int j = 0; j < d; ++j)
    for (int i = 0; i < d; ++i) {
      const double h = (__builtin_popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0;
      y[j] += x[i] * incoherence_sign(seed, i) * h;
    }
  for (double& v : y) v /= std::sqrt(double(d));
  return y;
}

class QuantizeTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantizeTest, MatchesFloat64Reference) {
  HT_REQUIRE_HOPPER();
  const QuantCase c = GetParam();
  const int B = c.batch, S = c.seqlen, H = c.nheads, D = c.head_dim;
  const uint64_t seed = 1234567;
  std::vector<double> x(size_t(B) * S * H * D);
  ref::fill_random(x, 77);
  for (size_t i = 0; i < x.size(); i += 997) x[i] *= 40.0;  // outliers, as in the paper's study
  for (double& v : x) v = ref::round_to(c.dtype, v);

  const int64_t row = H * D + c.row_pad;
  DeviceTensor in = DeviceTensor::make(c.dtype, {B, S, H, D}, {S * row, row, D, 1});
  DeviceTensor out = DeviceTensor::contiguous(DType::kFloat8E4M3, {B, S, H, D});
  const int64_t nb = quantize_num_blocks(S, c.block_rows);
  DeviceTensor descale = DeviceTensor::contiguous(DType::kFloat32, {B, H, nb});
  in.upload(x);
  out.buf.poison();
  descale.buf.poison();

  QuantizeParams p;
  p.in = in.view;
  p.out = out.view;
  p.descale = descale.view;
  p.block_rows = c.block_rows;
  p.hadamard = c.hadamard;
  p.seed = seed;
  const Plan plan = plan_quantize(p, query_device());
  DeviceBuffer ws(plan.workspace_bytes);
  run_quantize(plan, p, ws.get(), ws.bytes(), nullptr);
  HT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<double> q = out.download();  // dequantized codes (without descale)
  const std::vector<double> ds = descale.download();

  // Reference: rotated rows, block amax, descale, codes.
  std::vector<double> y(x.size());
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h) {
        const size_t off = ((size_t(b) * S + s) * H + h) * D;
        if (c.hadamard) {
          const auto r = rotate_row(&x[off], D, seed);
          std::copy(r.begin(), r.end(), y.begin() + off);
        } else {
          std::copy(x.begin() + off, x.begin() + off + D, y.begin() + off);
        }
      }
  const int rows_per_block = c.block_rows > 0 ? c.block_rows : S;
  size_t code_mismatch = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int64_t k = 0; k < nb; ++k) {
        double amax = 0;
        for (int s = int(k) * rows_per_block; s < std::min<int64_t>(S, (k + 1) * rows_per_block); ++s)
          for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(y[((size_t(b) * S + s) * H + h) * D + d]));
        const double want = amax > 0 ? amax / 448.0 : 1.0;
        const double got = ds[(size_t(b) * H + h) * nb + k];
        ASSERT_NEAR(got, want, 1e-5 * want) << "descale of block " << k << " (b " << b << ", h " << h << ")";
        for (int s = int(k) * rows_per_block; s < std::min<int64_t>(S, (k + 1) * rows_per_block); ++s)
          for (int d = 0; d < D; ++d) {
            const size_t i = ((size_t(b) * S + s) * H + h) * D + d;
            ASSERT_TRUE(std::isfinite(q[i])) << "element " << i << " not written";
            const double exact = y[i] / got;
            // e4m3: 3 mantissa bits (half an ulp is 2^-4 relative), subnormal step 2^-9.
            ASSERT_LE(std::fabs(q[i] - exact), std::fabs(exact) * 0.0625 + std::ldexp(1.0, -10) + 1e-6)
                << "element " << i << ": code " << q[i] << " for " << exact;
            if (q[i] != ref::round_to(DType::kFloat8E4M3, exact)) ++code_mismatch;
          }
      }
  EXPECT_LE(code_mismatch, x.size() / 1000) << "codes differing from float64 rounding";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QuantizeTest,
    ::testing::Values(QuantCase{DType::kBFloat16, 2, 300, 3, 128, 64, true, 0},
                      QuantCase{DType::kFloat16, 1, 257, 2, 64, 0, false, 0},
                      QuantCase{DType::kBFloat16, 2, 130, 2, 256, 0, true, 0},
                      QuantCase{DType::kBFloat16, 1, 200, 2, 96, 128, false, 0},
                      QuantCase{DType::kFloat16, 2, 65, 4, 64, 1, true, 16}),
    [](const ::testing::TestParamInfo<QuantCase>& info) { return info.param.name(); });

TEST(QuantizeRotation, PreservesDotProducts) {
  // The reason incoherent processing is exact: the rotation is orthogonal, so Q K^T is unchanged.
  for (int d : {64, 128, 256}) {
    std::vector<double> a(d), b(d);
    ref::fill_random(a, d);
    ref::fill_random(b, d + 1);
    const auto ra = rotate_row(a.data(), d, 99), rb = rotate_row(b.data(), d, 99);
    double dot = 0, rdot = 0;
    for (int i = 0; i < d; ++i) {
      dot += a[i] * b[i];
      rdot += ra[i] * rb[i];
    }
    EXPECT_NEAR(rdot, dot, 1e-9 * d) << "d = " << d;
  }
}

}  // namespace
}  // namespace hopattn::testing
