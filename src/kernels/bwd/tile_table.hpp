// Backward tile shapes per head dim (the one place they are chosen).
// * d <= 128: 128 keys per tile, two consumer warpgroups of 64 keys each, dK and dV of its
//   keys in each warpgroup's registers (traits.hpp, consumer.hpp); 64 query rows per step, 128 at
//   d = 64, where S^T and dP^T of 64 x 128 per warpgroup still fit next to dK and dV (8 bytes of
//   the step's registers spill) and halve the per-step costs: +3..8% from 2k (perf-log, session 10;
//   session 2 measured it slower, when the kernel still spilled hundreds of bytes).
// * d = 192, 256: 64 x d FP32 dK and dV no longer fit per warpgroup; 64 keys per tile shared by
//   both warpgroups, which split the head dim instead (traits_wide.hpp, consumer_wide.hpp).
//   Measured on an H200 (docs/perf-log.md, sessions 9 and 22) and an H100 (session 31), as
//   (Q stages, dO stages, dQ chunks, P/dS buffers, dQ pieces, dQ buffers):
//   d = 256 (2, 1, 2, 2, 2, 2): K, V, dO 32 KB each, Q 2 x 32 KB, two 8 KB P^T and dS^T buffers,
//   dQ in two 32 KB chunks: 224 KB. The second Q stage lets the next step's S^T run under the dQ
//   hand-off while dO lands (dP^T is issued at the step's start): +1.8..6.8% against one stage
//   of each (session 22). A second stage of both fits with one P/dS buffer and 16 KB of dQ
//   buffer: four 16 KB chunks measured 10-18% slower (session 9), two chunks in 8 KB pieces
//   0.87-0.94 (session 31, below). Each chunk is handed off in two
//   16 KB pieces through a ring of two half buffers (dq_writer.hpp): +1.7..2.4% at 512-1k keys,
//   +0.8..2.1% from 2k (H100, session 31); at d64 and d128 (one 32 KB op per step) two pieces
//   measured 0.83-0.97 (traits.hpp). One P/dS buffer measured 0.997-1.001 (session 31); the
//   16 KB it frees paid for no second dO stage: that needs the dQ ring cut to 2 x 8 KB, and a
//   ring under 32 KB stalls the hand-off (0.87-0.94 with the dO stage, 0.88-0.95 without).
//   d = 192 (2, 2, 1, 2, 1, 1): 24 KB per Q/dO/K/V tile, dQ in one 48 KB chunk: 224 KB of the 227
//   (in two pieces: 1.022 at 512, 0.974 at 2k, 1.009 causal 2k, H100, session 31: not adopted);
//   with one stage the next step's S^T cannot be issued under the dQ hand-off (its Q is not
//   loaded yet): 2-10% slower, but 10% faster at seqlen 1024 (not understood).
#pragma once

#include <type_traits>

#include "kernels/bwd/traits.hpp"
#include "kernels/bwd/traits_wide.hpp"

namespace hopattn::kernels::bwd {

// Experiments may override the wide shapes as six digits, Q stages / dO stages / dQ chunks /
// P-dS buffers / dQ pieces / dQ buffers: -DHOPATTN_BWD256_SHAPE=112211 (nvcc splits -D values
// at commas).
#ifndef HOPATTN_BWD256_SHAPE
#define HOPATTN_BWD256_SHAPE 212222
#endif
#ifndef HOPATTN_BWD192_SHAPE
#define HOPATTN_BWD192_SHAPE 221211
#endif
// Query rows per step of the d64 kernel (experiments: -DHOPATTN_BWD64_BLOCK_M=64).
#ifndef HOPATTN_BWD64_BLOCK_M
#define HOPATTN_BWD64_BLOCK_M 128
#endif
// Query rows per step of the d128 kernel (experiments: -DHOPATTN_BWD128_BLOCK_M=80, FlashAttention-3's
// unmasked shape: 0.91-0.99 of 64 rows at 1k-16k on an H100, perf-log session 33).
#ifndef HOPATTN_BWD128_BLOCK_M
#define HOPATTN_BWD128_BLOCK_M 64
#endif
template <class Element, int kHeadDim, int kShape>
using WideBwdTraits = BwdWideTraits<Element, kHeadDim, kShape / 100000, kShape / 10000 % 10, kShape / 1000 % 10,
                                    kShape / 100 % 10, kShape / 10 % 10, kShape % 10>;

template <class Element, int kHeadDim>
using DefaultBwdTraits =
    std::conditional_t<(kHeadDim > 128),
                       std::conditional_t<kHeadDim == 256, WideBwdTraits<Element, 256, HOPATTN_BWD256_SHAPE>,
                                          WideBwdTraits<Element, kHeadDim, HOPATTN_BWD192_SHAPE>>,
                       BwdTraits<Element, kHeadDim, /*kBlockM=*/kHeadDim == 64    ? HOPATTN_BWD64_BLOCK_M
                                            : kHeadDim == 128 ? HOPATTN_BWD128_BLOCK_M
                                                              : 64,
                                 /*kBlockN=*/128, /*kStages=*/2>>;

// The kernel for dense problems (is_dense_bwd_problem: no mask, no softcap, fixed lengths, whole
// key tiles): the same shape with the mask and softcap code compiled out of the element-wise step
// (score_grads.hpp). Those paths, never taken there, cost the general d128 kernel 2-4% on dense
// problems at 1k-16k (H100, perf-log session 46): registers, and branches around the exps.
template <class Base>
struct DenseBwdTraits : Base {
  static constexpr bool kDense = true;
};

// The main kernel of the stored-dS backward (stored_ds.hpp, launch.hpp): the consumers store
// each step's dS to global memory with a TMA store and compute no dQ; a second kernel then sums
// dS K per query block. Wide kernels with two P/dS buffers only (the store reads one buffer while
// the next step fills the other).
template <class Base>
struct StoredDsBwdTraits : Base {
  static constexpr bool kStoreDs = true;
  static_assert(Base::kSplitHeadDim && Base::kPdsBuffers == 2, "the stored dS needs the wide kernel's two P/dS buffers");
  // The next step's S^T (and dP^T, which then has as many stages) is issued before this step's
  // stages are freed: with one stage it would wait for itself.
  static_assert(Base::kQStages >= 2, "the stored dS needs two Q stages");
};

template <class Element, int kHeadDim, bool kDense>
using BwdTraitsFor = std::conditional_t<kDense, DenseBwdTraits<DefaultBwdTraits<Element, kHeadDim>>,
                                        DefaultBwdTraits<Element, kHeadDim>>;

}  // namespace hopattn::kernels::bwd
