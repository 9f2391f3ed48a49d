// Online softmax over the rows a consumer thread owns, in FP32 with exp2 and the scale folded
// into one FFMA per element. Row statistics live in registers; the four threads of a quad that
// share a row combine maxima with two shuffles. Row sums stay thread-partial until finalize()
// (addition commutes, so only the end needs the quad reduction).
#pragma once

#include <cute/tensor.hpp>

namespace hopattn::kernels::fwd {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 1);
  return v + __shfl_xor_sync(0xffffffff, v, 2);
}

// How a thread's raw score accumulators become softmax inputs, per row it owns: 16-bit inputs
// use the same two constants for every row and block; FP8 folds its per-row (q) and per-block
// (k) descales in here, so that scaling costs nothing per element.
template <int kRows>
struct RowScales {
  float softcap_mult[kRows];  // score -> tanh argument (softcap only)
  float log2_mult[kRows];     // (capped) score -> exp2 argument, i.e. scale * log2(e)
};

// Row maxima are kept in the exp2 domain (score * log2_mult), so that blocks with different
// multipliers compare correctly.
template <int kRows>
struct OnlineSoftmax {
  static constexpr int kRowsPerThread = kRows;
  float row_max[kRows];  // exp2 domain
  float row_sum[kRows];

  __device__ __forceinline__ OnlineSoftmax() {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.f;
    }
  }

  // Scores -> unnormalised probabilities in place. Returns whether this warp's output rows
  // must be multiplied by o_scale (warp-uniform). A row's running max moves only when the
  // block's max exceeds it by more than kMaxLag (exp2 domain); otherwise the stale max stays the
  // offset and probabilities reach at most 2^kMaxLag (fits bf16, fp16 and e4m3). When no row of
  // the warp moved, the output rescale (one FMUL per output element and block) is skipped. The
  // result is exact: O and the row sums share the offset, and the LSE uses the max kept.
  // o_scale: exp2 of the max decrease (0 where no key was seen yet, which also turns garbage
  // into 0), 1 where the max was kept. mult > 0, so max(s) * mult = max(s * mult).
  static constexpr float kMaxLag = 8.f;
  template <bool kFirst, class TensorS>
  __device__ __forceinline__ bool step(TensorS& s_rc, const float (&mult)[kRows], float (&o_scale)[kRows]) {
    using namespace cute;
    static_assert(decltype(size<0>(s_rc))::value == kRows);
    bool any_moved = false;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      float m_raw = -INFINITY;
      CUTE_UNROLL
      for (int j = 0; j < size<1>(s_rc); ++j) m_raw = fmaxf(m_raw, s_rc(i, j));
      const float m_block = quad_max(m_raw) * mult[i];
      // -inf + lag = -inf: the first visible key of a row always moves its max.
      const bool moves = m_block > row_max[i] + kMaxLag;
      const float m = moves ? m_block : row_max[i];
      // A row with no visible key so far keeps max -inf; use 0 as its offset so exp2 gives 0
      // instead of NaN.
      const float offset = m == -INFINITY ? 0.f : m;
      o_scale[i] = kFirst || !moves ? 1.f : fast_exp2(row_max[i] - offset);
      any_moved |= moves;
      row_max[i] = m;
      float sum = 0.f;
      CUTE_UNROLL
      for (int j = 0; j < size<1>(s_rc); ++j) {
        const float p = fast_exp2(s_rc(i, j) * mult[i] - offset);
        s_rc(i, j) = p;
        sum += p;
      }
      row_sum[i] = kFirst ? sum : row_sum[i] * o_scale[i] + sum;
    }
    return !kFirst && __any_sync(0xffffffff, any_moved);
  }

  // Final normalisation: out_scale = 1 / rowsum (0 for rows that saw no key) and the
  // natural-log LSE (-inf for those rows).
  __device__ __forceinline__ void finalize(float (&out_scale)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const float sum = quad_sum(row_sum[i]);
      const bool empty = sum == 0.f || sum != sum;
      out_scale[i] = empty ? 0.f : 1.f / sum;
      constexpr float kLn2 = 0.69314718055994530942f;
      lse[i] = empty ? -INFINITY : (row_max[i] + __log2f(sum)) * kLn2;
    }
  }
};

}  // namespace hopattn::kernels::fwd
