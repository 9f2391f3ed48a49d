// The accuracy rule shared by every GPU test.
//
// A kernel's output passes when, compared with the float64 reference,
//     max |kernel - ref| <= 2 * max |lowp - ref| + atol
// where `lowp` is the naive low-precision computation of the same thing (forward_lowp /
// backward_lowp): a fused kernel must be at most twice as far from the exact answer as the
// unfused PyTorch expression in the same dtype. Also, NaN and +-inf must sit at exactly the same
// positions in kernel and ref (same sign of inf); those positions are left out of the maxima,
// as are positions where lowp is not finite while ref is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hopattn::ref {

struct Comparison {
  double max_err_kernel = 0;  // compare(): max |kernel-ref|; compare_lse(): error at worst entry
  double max_err_lowp = 0;    // compare(): max |lowp-ref|; compare_lse(): unused (0)
  double bound = 0;           // compare(): 2*max_err_lowp + atol; compare_lse(): tol at worst entry
  bool nan_inf_positions_match = true;
  bool ok = false;
  // Diagnostics: the first NaN/inf mismatch if there is one, else the element with the largest
  // error (relative to its allowance); -1 when there is none.
  int64_t worst_index = -1;
  double worst_kernel = 0, worst_ref = 0;
  int64_t num_mismatched_nonfinite = 0;  // positions where kernel/ref disagree on NaN/inf
  bool size_mismatch = false;
  std::string what;  // "compare" or "compare_lse"
  std::string describe() const;
};

// `lowp` may be empty: the bound is then atol alone.
Comparison compare(const std::vector<double>& kernel, const std::vector<double>& ref,
                   const std::vector<double>& lowp, double atol = 1e-5);

// LSE check. Finite entries pass when
//     |kernel - ref| <= ulps * ulp_f32(|ref|) + abs_tol
// ulp_f32(x) being the float32 spacing at x. The ULP term is the storage and final-add rounding
// of a float32 LSE (which matters when |lse| is large). The absolute term covers what a kernel's
// fp32 arithmetic does to LSE = max + log(sum): the QK^T dot products accumulated in fp32
// (error ~ sqrt(d) * 2^-24 * |q||k| * scale, about 1e-6 for unit-variance inputs, d <= 256),
// the approximate exp2/log2 instructions (~2^-22 relative) and the fp32 row sum (relative error
// of the sum turns into absolute error of its log); 1e-4 leaves a margin of 10-100x over those
// while still catching a wrong scale, mask or a dropped block (leaving out keys that hold a share
// p of a row's probability mass moves its LSE by -log(1 - p) > p). LSE is not compared
// against a low-precision baseline: bf16/fp16 attention written in PyTorch does not produce one.
// -inf (rows that see no key) and NaN must match exactly.
Comparison compare_lse(const std::vector<double>& kernel, const std::vector<double>& ref,
                       double abs_tol = 1e-4, double ulps = 8);

// compare_lse's absolute term for a problem with soft-capping `softcap` (0: off). The kernels
// cap scores with tanh.approx.f32 (relative error below 2^-10.9, PTX ISA), so a capped score
// softcap * tanh(.) may be off by up to softcap * 2^-10.9, and LSE, a smooth maximum of the
// scores, by as much: e.g. 1.7e-4 at softcap 30 with scores near 14 (session 32's random sweep).
// The term is softcap * 2^-10: the instruction's bound with room for the fp32 products around
// it. It is a worst case (0.03 at softcap 30), so with softcap the LSE check no longer sees a
// dropped block holding less than that share of a row's mass; the output check still does.
//
// With the head dim and score_l1 (max_score_l1: the largest scale * sum_d |q_d k_d| of a row and
// a key it sees), a third term covers the tensor cores' FP32 accumulation of Q K^T where the
// scores are large: each of the d / 16 k-slices of a 16-bit WGMMA adds into the accumulator,
// which rounds toward zero (up to 2^-23 of the running sum, at most score_l1 in scaled units),
// and counting 2 such roundings per slice and one slice more for the scaling and the max
// subtraction after it gives (d / 16 + 1) * 2^-22 * score_l1. For unit-variance inputs that is
// 2e-5 at d = 128 and 6e-5 at d = 256, below the 1e-4 above; with keys scaled by 64 (LSE near
// 2000, score_l1 2000 and more) it reaches 0.01-0.03, where the kernels measured 1.2e-3 to 1.6e-3
// (session 33's random sweep: 10-13 float32 ulps of the LSE, which the 8-ulp term alone did not
// cover). A worst case again: at such scores the LSE check sees a wrong scale or a dropped key
// block holding the row's maximum, not small shares of its mass; the output check still does.
double lse_abs_tol(double softcap, int head_dim = 0, double score_l1 = 0);

}  // namespace hopattn::ref
