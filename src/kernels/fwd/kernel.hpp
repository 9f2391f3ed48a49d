// The forward kernel: one CTA per SM (persistent), warpgroup 0 produces, warpgroups 1..
// consume (without warp specialization, the Table 2 ablation: every warpgroup consumes).
// FP16/BF16 and FP8 share it; the FP8 producer also transposes V (traits_fp8.hpp).
// See docs/design/fwd.md (and fwd-fp8.md) for the schedule and the meaning of each barrier.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/consumer.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/producer.hpp"
#include "kernels/fwd/producer_fp8.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

// 2-CTA clusters: no CTA may exit while its peer can still write into its shared memory or arrive
// on its barriers. Every consumer thread, done with its last block, arrives on the peer's
// `peer_done` (count: the consumer threads of a CTA); one thread waits for the peer's. Every half
// multicast here has landed (this CTA's consumers, that thread among them, waited for every
// block), every half sent to the peer too (its consumers have read every block once the wait
// passes), and the peer's producer has sent its last arrive here: each of its arrives is one this
// CTA's producer waited for before a load that these consumers read. The producer role needs no
// part: a cluster barrier after the roles' branches spilled the d256 producer (24 registers).
__device__ __forceinline__ void leave_cluster(uint64_t& peer_done, int consumer_tid) {
  EmptyBarrier::arrive(&peer_done, TileScheduler::cluster_rank() ^ 1, 1u);
  if (consumer_tid == 0) FullBarrier::wait(&peer_done, 0);
}

template <class T>
__global__ void __launch_bounds__(T::kNumThreads, 1)
    attention_fwd_kernel(const __grid_constant__ FwdKernelParams<T> p) {
  extern __shared__ __align__(1024) char smem_bytes[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_bytes);
  const int warp = warp_idx_uniform();
  const int warpgroup = warp / 4;
  const bool clustered = T::kClusterKV && p.cluster_kv;  // 2-CTA clusters (launch.hpp)

  if (warp == 0 && cute::elect_one_sync()) {
    init_barriers<T>(smem);
    // The FP8 transposers (producer warps 1..3) read the tile ring too.
    smem.tiles.init(T::kNumConsumerThreads + T::kNumTransposeThreads);
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    if constexpr (T::kClusterKV) {
      if (clustered) {
        cute::prefetch_tma_descriptor(p.tma_k_mc.get_tma_descriptor());
        cute::prefetch_tma_descriptor(p.tma_v_mc.get_tma_descriptor());
      }
    }
    if (!clustered) {
      cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    }
    if constexpr (T::Output::kStaged) cute::prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
  }
  cutlass::arch::fence_barrier_init();
  // With 2-CTA clusters the peer's producer arrives on this CTA's barriers and its TMA writes
  // here: both CTAs' barriers are initialised before either starts.
  if (clustered) cute::cluster_sync();
  else __syncthreads();

  const TileScheduler sched{p.num_m_blocks,  p.nheads,       p.num_tiles,
                            p.heads_per_l2_section, p.longest_first, p.tile_counter,
                            p.tile_divisors, clustered};
  if constexpr (!T::kWarpSpecialized) {
    // The Table 2 ablation: every warpgroup consumes; the loads come from consumer thread 0
    // (inline_loader.hpp). 256 threads keep up to 255 registers each without setmaxnreg.
    Consumer<T> consumer{p, smem, int(threadIdx.x), {false, warpgroup}};
    consumer.run(sched);
  } else if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if constexpr (T::kFp8) {
      if (warp == 0) {
        if (cute::elect_one_sync()) fp8_loader_loop<T>(p, smem, sched);
      } else {
        fp8_transpose_loop<T>(p, smem, sched, int(threadIdx.x) - 32);
      }
    } else {
      if (warp == 0 && cute::elect_one_sync()) producer_loop<T>(p, smem, sched);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int tid = int(threadIdx.x) - 128;
    // tid / 128 and warpgroup - 1 are the same number, but ptxas proves only the second
    // warp-uniform. The idle-warpgroup branch (consumer.hpp) needs that: around a branch it must
    // treat as divergent, the mainloop spilled 100-120 B. FP8, which has no such branch, measured
    // 2-4% slower with it (perf-log, session 12), so it keeps the first.
    const int consumer_wg = T::kSkipIdleWarpgroups ? warpgroup - 1 : tid / 128;
    Consumer<T> consumer{p, smem, tid, {p.pingpong, consumer_wg}};
    consumer.run(sched);
    if constexpr (T::kClusterKV) {
      if (clustered) leave_cluster(smem.peer_done, tid);
    }
  }
}

}  // namespace hopattn::kernels::fwd
