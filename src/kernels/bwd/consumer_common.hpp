// What the two backward consumers (consumer.hpp for d <= 128, consumer_wide.hpp for d = 192,
// 256) share: the named barrier ids, the salted shared-memory views their operand descriptors
// are built from, and the loop over key tiles with the dK and dV accumulators of each.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/epilogue.hpp"
#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/bwd/tail_split.hpp"
#include "kernels/bwd/timeline_events.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/timeline.hpp"

namespace hopattn::kernels::bwd {

// Named barrier ids of the backward consumers (0 is __syncthreads).
constexpr int kDsReadyBarrier = 1;  // both warpgroups' dS (and, d > 128, P^T) of this step are stored
constexpr int kPdsFreeBarrier = 2;  // d > 128 with one P/dS buffer: both warpgroups' GEMMs of the last step are done
constexpr int kStaggerBarrier = 3;  // experiment: warpgroup 1 starts a tile after warpgroup 0's first exp
// 4 + w: warpgroup w's staged dK/dV (kGradBarrierBase, epilogue.hpp).

// A shared-memory tile whose base is offset by `salt`: always 0, but read from the kernel
// parameters, so that ptxas cannot hoist the descriptors built from it out of the step loop
// (operand_views in consumer.hpp says why).
template <class E, class Layout>
__device__ __forceinline__ auto salted_smem(E* ptr, int salt, Layout layout) {
  return cute::make_tensor(cute::make_smem_ptr(ptr + salt), layout);
}

// Every GEMM of this thread's warpgroup that reads K or V has completed: the producer may
// overwrite them (once for each consumer thread per tile; kv_empty counts them all).
template <class Storage>
__device__ __forceinline__ void release_kv(Storage& smem) {
  fwd::release(smem.kv_empty);
}

// The consumers' walk over key tiles: for each tile with keys, fresh dK and dV accumulators;
// once K and V have landed, run_steps(w, steps, dK, dV) runs the tile's steps (every query
// block of every query head in the KV head's group) and frees K and V (release_kv) as soon as
// its last GEMM reading them has completed, before the last dQ hand-off (where there is one: not
// with a stored dS): that hand-off waits for the writer to have read the previous chunk, and the
// producer loads the next tile's K and V meanwhile. Then dK and dV are stored, or, of a split tile's half, added into the tile's FP32
// slot (tail_split.hpp).
// The consumers hold their slot of the tile ring through the whole tile (fwd::wait_tile) and
// free it at the end (fwd::release_tile), so that the tile's work item can be read again there
// rather than held in a register through the steps (one more spilled at d64/d128).
template <class T, class MmaDkv, class RunSteps>
__device__ __forceinline__ void for_each_key_tile(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                  const fwd::TileScheduler& sched, fwd::PackedPipeState<1>& kv_pipe,
                                                  MmaDkv& mma_dkv, int tid, RunSteps&& run_steps) {
  using namespace cute;
  constexpr int kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;
  fwd::TileRingState ring;
  fwd::Timeline tl;
  for (int item = fwd::wait_tile(smem.tiles, ring); item < sched.num_tiles; item = fwd::wait_tile(smem.tiles, ring)) {
    tl.next_tile();
    tl.mark(kBwdTileReceived);
    const TileWork<T> w = tile_work<T>(p, sched, item);
    if (w.n_block * kBlockN >= w.si.seqlen_k) {  // no keys: nothing to write
      fwd::release_tile(smem.tiles, ring);
      continue;
    }
    Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    clear(tdVrdV);
    clear(tdKrdK);
    // Pins the zeros into the accumulators here. Otherwise NVVM materializes them after the
    // first S^T GEMM is issued, copied from the same zero register that fed that GEMM's
    // accumulator; ptxas then sees reads of an in-flight accumulator and serializes every WGMMA.
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    if (!w.empty()) {
      fwd::wait_full(smem.kv_full, kv_pipe.phase());
      tl.mark(kBwdKvLanded);
      run_steps(w, p.head_group * (w.m_end - w.m_begin), tdKrdK, tdVrdV, tl);  // calls release_kv
      kv_pipe.advance();
    }
    if (const int split = split_of_item(p, smem.tiles.slot[ring.stage()]); split < 0)
      store_kv_grads(p, smem, tdKrdK, tdVrdV, mma_dkv, w, tid);
    else
      add_split_tile_grads(p, split, tdKrdK, tdVrdV, mma_dkv, tid);
    fwd::release_tile(smem.tiles, ring);
    tl.mark(kBwdGradsStored);
  }
  if constexpr (T::kStagedGrads) cute::tma_store_wait<0>();  // the last stores have read smem.grad
}

}  // namespace hopattn::kernels::bwd
