// The element-wise part of a backward step, shared by both consumers (consumer.hpp,
// consumer_wide.hpp): S^T -> P^T (softcap, mask, exp2 with the row's LSE) and dP^T -> dS^T.
// Both work on WGMMA accumulators of S^T, whose rows are keys and columns are queries, with the
// tile-local (key, query) coordinates of each value alongside.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/softmax.hpp"

namespace hopattn::kernels::bwd {

// Timing experiment (session 47): the softcap paths compiled out of every kernel, the mask kept,
// to see what the never-taken softcap code costs a masked problem. Wrong under softcap.
#ifdef HOPATTN_EXP_BWD_NO_SOFTCAP
#pragma message("HOPATTN_EXP_BWD_NO_SOFTCAP: no softcap code in the backward; wrong under softcap")
inline constexpr bool kNoSoftcapExperiment = true;
#else
inline constexpr bool kNoSoftcapExperiment = false;
#endif

// Scores -> probabilities in place: tanh softcap, mask, exp2 with the query's lse_log2. A dense
// kernel (T::kDense) has neither: its problems have no mask, no softcap and no key past seqlen_k.
template <class T, class TS, class TC>
__device__ __forceinline__ void scores_to_probs(const BwdKernelParams<T>& p, TS& tSrS, const TC& tScS,
                                                const TileWork<T>& w, int m, const float* lse_log2) {
  using namespace cute;
  Tensor s_rc = make_tensor(tSrS.data(), acc_as_rowcol(tSrS.layout()));  // (keys, queries)
  Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
  if constexpr (!T::kDense) {
    if (!kNoSoftcapExperiment && p.use_softcap) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) = fwd::fast_tanh(tSrS(i) * p.softcap_prescale);
    }
    if (w.mask.block_needs_mask(m, w.n_block)) w.mask.apply(s_rc, c_rc, m, w.n_block);
  }
  CUTE_UNROLL
  for (int j = 0; j < size<1>(s_rc); ++j) {
    const float lse = lse_log2[get<1>(c_rc(0, j))];
    CUTE_UNROLL
    for (int i = 0; i < size<0>(s_rc); ++i) s_rc(i, j) = fwd::fast_exp2(s_rc(i, j) * p.scale_log2 - lse);
  }
}

// dP^T -> dS^T = P^T (dP^T - dsum) in place (P^T may be FP32 or 16-bit). With softcap, tanh is
// recovered from P itself (P = exp2(t * scale_log2 - lse)) rather than kept in 32 more
// registers; where P = 0, dS is 0 anyway.
template <bool kSoftcap, class T, class TP, class TDP, class TC>
__device__ __forceinline__ void probs_to_dscores(const BwdKernelParams<T>& p, const TP& tSrP, TDP& tSrdP,
                                                 const TC& tScS, const float* dsum, const float* lse_log2) {
  using namespace cute;
  Tensor p_rc = make_tensor(tSrP.data(), acc_as_rowcol(tSrP.layout()));
  Tensor dp_rc = make_tensor(tSrdP.data(), acc_as_rowcol(tSrdP.layout()));
  Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
  CUTE_UNROLL
  for (int j = 0; j < size<1>(dp_rc); ++j) {
    const int q = get<1>(c_rc(0, j));
    const float d = dsum[q];
    CUTE_UNROLL
    for (int i = 0; i < size<0>(dp_rc); ++i) {
      const float prob = float(p_rc(i, j));
      float ds = prob * (dp_rc(i, j) - d);
      if constexpr (kSoftcap) {
        const float t = __fdividef(__log2f(prob) + lse_log2[q], p.scale_log2);
        ds = prob > 0.f ? ds * (1.f - t * t) : 0.f;
      }
      dp_rc(i, j) = ds;
    }
  }
}

// The softcap test is hoisted out of the element loop: inside it, it split the loop into one
// basic block per element.
template <class T, class TP, class TDP, class TC>
__device__ __forceinline__ void probs_to_dscores(const BwdKernelParams<T>& p, const TP& tSrP, TDP& tSrdP,
                                                 const TC& tScS, const float* dsum, const float* lse_log2) {
  if (!T::kDense && !kNoSoftcapExperiment && p.use_softcap) probs_to_dscores<true>(p, tSrP, tSrdP, tScS, dsum, lse_log2);
  else probs_to_dscores<false>(p, tSrP, tSrdP, tScS, dsum, lse_log2);
}

}  // namespace hopattn::kernels::bwd
