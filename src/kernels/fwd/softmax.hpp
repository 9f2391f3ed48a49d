// Online softmax over the rows a consumer thread owns, in FP32 with exp2 and the scale folded
// into one FFMA per element. Row statistics live in registers; the four threads of a quad that
// share a row combine maxima with two shuffles. Row sums stay thread-partial until finalize()
// (addition commutes, so only the end needs the quad reduction).
#pragma once

#include <cfloat>

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
// multipliers compare correctly. row_max is the exp offset of the row: its running maximum, up to
// kMaxLag stale (step), or a little below it after max-free blocks (lift_offsets).
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

  // --- Max-free blocks (FwdTraits::kMaxFreeBlocks; Consumer::scores_to_probs) ---------------
  // Once every row of a warp has seen a key, a block's exps can run against the kept offsets
  // (row_max) without first taking the block's row maxima: p = exp2(s * mult - row_max). The
  // offset stays valid as long as no p exceeds 2^kMaxLag, and a thread's partial row sum bounds
  // each of its p (all >= 0), so the check is one compare per row on sums the softmax forms
  // anyway. When a row fails, lift_offsets() raises its offset by a power of two, which rescales
  // the p already computed exactly; only p = inf (a score above its offset by 128 or more in the
  // exp2 domain) loses information, and the caller then recomputes the scores.
  bool rows_seen = false;  // warp-uniform: every row of the warp has a finite row_max

  __device__ __forceinline__ void note_rows_seen() {
    bool seen = true;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) seen &= row_max[i] != -INFINITY;
    rows_seen = __all_sync(0xffffffff, seen);
  }

  // p = exp2(s * mult - row_max) in place; block_sum = this thread's partial row sums, formed as
  // four chains so that the check waits for three adds after the last exp, not thirty-two.
  template <class TensorS>
  __device__ __forceinline__ void exps_against_offsets(TensorS& s_rc, const float (&mult)[kRows],
                                                       float (&block_sum)[kRows]) const {
    using namespace cute;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      constexpr int kChains = 4;  // 2 and 8 measured 1-2% and 3-4% slower (perf-log, session 14)
      float part[kChains];
      CUTE_UNROLL
      for (int c = 0; c < kChains; ++c) part[c] = 0.f;
      CUTE_UNROLL
      for (int j = 0; j < size<1>(s_rc); ++j) {
        const float p = fast_exp2(__fmaf_rn(s_rc(i, j), mult[i], -row_max[i]));
        s_rc(i, j) = p;
        part[j % kChains] += p;
      }
      CUTE_UNROLL
      for (int w = kChains / 2; w > 0; w /= 2) {
        CUTE_UNROLL
        for (int c = 0; c < w; ++c) part[c] += part[c + w];
      }
      block_sum[i] = part[0];
    }
  }

  // Whether every p of the warp's block is at most 2^kMaxLag (false for inf and NaN sums).
  __device__ __forceinline__ static bool block_within_lag(const float (&block_sum)[kRows]) {
    bool ok = true;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) ok &= block_sum[i] <= kMaxProb;
    return __all_sync(0xffffffff, ok);
  }
  static constexpr float kMaxProb = float(1 << int(kMaxLag));  // 2^kMaxLag

  __device__ __forceinline__ void add_block_sums(const float (&block_sum)[kRows], float (&o_scale)[kRows]) {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      row_sum[i] += block_sum[i];
      o_scale[i] = 1.f;
    }
  }

  // The rare path after exps_against_offsets: per row, the quad's largest partial sum bounds
  // every p of the row; where it exceeds 2^kMaxLag the offset rises by k = floor(log2(bound)) - 7
  // (then every p <= 2^8 again), and the p, the row sum and O (o_scale) are multiplied by 2^-k,
  // which is exact. Returns false when some row's bound is inf or NaN: its scores are lost and
  // the caller recomputes them (nothing has been changed then). Otherwise returns true and sets
  // moved (warp-uniform: O needs o_scale).
  template <class TensorS>
  __device__ __forceinline__ bool lift_offsets(TensorS& s_rc, float (&block_sum)[kRows], float (&o_scale)[kRows],
                                               bool& moved) {
    using namespace cute;
    float bound[kRows];
    bool finite = true;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      bound[i] = quad_max(block_sum[i]);
      finite &= bound[i] <= FLT_MAX;
    }
    if (!__all_sync(0xffffffff, finite)) return false;
    bool any = false;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      float f = 1.f;
      if (bound[i] > kMaxProb) {
        const int k = ((__float_as_int(bound[i]) >> 23) - 127) - 7;  // >= 1
        f = __int_as_float((127 - k) << 23);
        row_max[i] += float(k);
        any = true;
        CUTE_UNROLL
        for (int j = 0; j < size<1>(s_rc); ++j) s_rc(i, j) *= f;
      }
      o_scale[i] = f;
      row_sum[i] = row_sum[i] * f + block_sum[i] * f;
    }
    moved = __any_sync(0xffffffff, any);
    return true;
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
