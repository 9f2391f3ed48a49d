// A consumer warpgroup's 64-row accumulator tile leaving through shared memory and one TMA store,
// shared by the forward's O epilogue (fwd/epilogue.hpp) and the backward's dK/dV epilogue
// (bwd/epilogue.hpp): stmatrix into the warpgroup's buffer, then thread 0 of the warpgroup issues
// the store, so that the warpgroup moves on as soon as the buffer is written instead of draining
// global stores.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels {

// Whether a warpgroup's rows [row0, row0 + rows) may go out as one TMA box: all of them lie in
// the sequence, or the sequence ends where the tensor does (TMA clips rows only at the tensor's
// end, so a box crossing into the next varlen sequence, or past seqused, would write there).
__host__ __device__ __forceinline__ bool box_fits_sequence(int row0, int rows, int seqlen, bool ends_at_tensor) {
  return row0 + rows <= seqlen || (ends_at_tensor && row0 < seqlen);
}

// acc (a WGMMA accumulator fragment of one warpgroup, of Mma's atom) as Element into buf (this
// warpgroup's buffer), then issue_store() on the warpgroup's thread 0, which issues the TMA copy
// (committed here). Named barrier `barrier` (128 threads) twice: the buffer is free (thread 0's
// previous store has read it: bulk groups are per thread, so only thread 0 has one to wait for),
// then the buffer is written and fenced for the async proxy. The caller waits for the last store
// (tma_store_wait on thread 0) before the CTA exits.
template <class Element, class Mma, class TAcc, class TBuf, class IssueStore>
__device__ __forceinline__ void store_wg_tile_staged(const TAcc& acc, const TBuf& buf, int barrier, int wg_tid,
                                                     IssueStore&& issue_store) {
  using namespace cute;
  tma_store_wait<0>();
  named_barrier_sync(barrier, 128);
  using OneWgMma = decltype(make_tiled_mma(typename Mma::Atom{}));
  auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, OneWgMma{});
  auto thr = stsm.get_thread_slice(wg_tid);
  Tensor out = convert_fragment<Element>(acc);
  copy(stsm, thr.retile_S(out), thr.partition_D(buf));
  tma_store_fence();  // the generic-proxy writes, visible to the TMA (async proxy)
  named_barrier_sync(barrier, 128);
  if (wg_tid == 0) {
    issue_store();
    tma_store_arrive();
  }
}

}  // namespace hopattn::kernels
