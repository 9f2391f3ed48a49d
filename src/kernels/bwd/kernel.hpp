// The backward main kernel: one CTA per SM (persistent), one tile = a block of keys of one KV
// head. Warpgroup 0: warp 0 loads, warp 1 writes dQ (idle where the consumers store dS for the
// dQ kernel instead, stored_ds.hpp); warpgroups 1..2 compute, with one of two
// consumer policies: d <= 128, each warpgroup owns half of the tile's keys (consumer.hpp);
// d = 192, 256, both share the keys and split the head dim (consumer_wide.hpp). See
// docs/design/bwd.md for the schedule and the meaning of each barrier.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <type_traits>

#include "kernels/bwd/consumer.hpp"
#include "kernels/bwd/consumer_wide.hpp"
#include "kernels/bwd/dq_writer.hpp"
#include "kernels/bwd/params.hpp"
#include "kernels/bwd/producer.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

template <class T>
__device__ __forceinline__ void init_bwd_barriers(typename T::SharedStorage& smem, int num_consumer_threads) {
  using fwd::EmptyBarrier;
  using fwd::FullBarrier;
  FullBarrier::init(&smem.kv_full, 1);
  EmptyBarrier::init(&smem.kv_empty, num_consumer_threads);
  if constexpr (T::kSplitQdoRings) {
    for (int s = 0; s < T::kQStages; ++s) {
      FullBarrier::init(&smem.q_full[s], 1);
      EmptyBarrier::init(&smem.q_empty[s], num_consumer_threads);
    }
    for (int s = 0; s < T::kDoStages; ++s) {
      FullBarrier::init(&smem.do_full[s], 1);
      EmptyBarrier::init(&smem.do_empty[s], num_consumer_threads);
    }
  } else {
    for (int s = 0; s < T::kStages; ++s) {
      FullBarrier::init(&smem.q_full[s], 1);
      FullBarrier::init(&smem.do_full[s], 1);
      EmptyBarrier::init(&smem.qdo_empty[s], num_consumer_threads);
    }
  }
  for (int b = 0; b < T::kDqBuffers; ++b) {
    EmptyBarrier::init(&smem.dq_full[b], num_consumer_threads);  // every consumer has stored its dQ piece
    EmptyBarrier::init(&smem.dq_empty[b], 1);  // the writer arrives once its copy has read the buffer
  }
  // The consumers and the dQ writer's lane 0; with a stored dS (T::kStoreDs) there is no writer.
  smem.tiles.init(num_consumer_threads + (T::kStoreDs ? 0 : 1));
}

template <class T>
__global__ void __launch_bounds__(T::kNumThreads, 1)
    attention_bwd_kernel(const __grid_constant__ BwdKernelParams<T> p) {
  extern __shared__ __align__(1024) char smem_bytes[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_bytes);
  const int warp = warp_idx_uniform();
  const int warpgroup = warp / 4;

  if (warp == 0 && cute::elect_one_sync()) {
    init_bwd_barriers<T>(smem, T::kNumConsumerThreads);
    smem.tile_counter = p.tile_counter;
    if constexpr (T::kLagDq) {  // the dS barriers of the lagged schedule (consumer.hpp)
      for (int b = 0; b < 2; ++b) {
        // One arrival per consumer warp (consumer.hpp, warp_release).
        fwd::EmptyBarrier::init(&smem.ds_full[b], T::kNumConsumerThreads / 32);  // both warpgroups stored their dS
        fwd::EmptyBarrier::init(&smem.ds_empty[b], T::kNumConsumerThreads / 32);  // both dQ GEMMs read it
      }
    }
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    if constexpr (T::kStoreDs) cute::prefetch_tma_descriptor(p.tma_ds.get_tma_descriptor());
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  // Launched with PDL (launch.hpp): the setup above overlapped the preprocess kernel's tail; its
  // lse_log2, dsum and (where it is cleared) dq_accum are read only after this, as are the tile
  // counter and the query-block states that the memset before the preprocess zeroed. The
  // postprocess (or the stored dS's dQ kernel) may then be launched: its CTAs fit on an SM only
  // once this kernel's CTA has left it, or at once on the SMs this grid leaves free for the
  // concurrent dQ conversion.
  wait_for_prior_grids();
  allow_dependent_launch();

  // The scheduler hands out work items: whole tiles, then halves of the last ones (tail_split.hpp).
  const fwd::TileScheduler sched{p.num_n_blocks, p.nheads_k,     p.num_items,    p.heads_per_l2_section,
                                 false,          p.tile_counter, p.tile_divisors};
  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (warp == 0 && cute::elect_one_sync()) bwd_producer_loop<T>(p, smem, sched);
    else if (!T::kStoreDs && warp == 1 && threadIdx.x % 32 == 0) dq_writer_loop<T>(p, smem, sched);
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int tid = int(threadIdx.x) - 128;
    using Consumer = std::conditional_t<T::kSplitHeadDim, BwdWideConsumer<T>, BwdConsumer<T>>;
    Consumer consumer{p, smem, tid, warpgroup - 1};
    consumer.run(sched);
  }
}

}  // namespace hopattn::kernels::bwd
