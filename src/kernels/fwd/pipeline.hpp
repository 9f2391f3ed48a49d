// The mbarrier rings between the producer warp and the consumer warpgroups, as named
// operations. Phase convention: a stage's full barrier completes once per fill; a consumer
// waits for parity `phase` and the producer waits on the empty barrier for parity `phase ^ 1`,
// which a freshly initialised barrier already satisfies (so the first lap never blocks).
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::kernels::fwd {

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;  // producer arrives + TMA bytes
using EmptyBarrier = cutlass::arch::ClusterBarrier;            // every consumer thread arrives

template <int kStages>
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

__device__ __forceinline__ void wait_full(uint64_t& bar, uint32_t phase) { FullBarrier::wait(&bar, phase); }
__device__ __forceinline__ void wait_empty(uint64_t& bar, uint32_t phase) { EmptyBarrier::wait(&bar, phase ^ 1); }
__device__ __forceinline__ void release(uint64_t& bar) { EmptyBarrier::arrive(&bar); }
__device__ __forceinline__ void expect_bytes(uint64_t& bar, uint32_t bytes) {
  FullBarrier::arrive_and_expect_tx(&bar, bytes);
}

template <class Storage, int kStages>
__device__ __forceinline__ void init_barriers(Storage& smem, int num_consumer_threads) {
  for (int s = 0; s < int(sizeof(smem.q_full) / sizeof(smem.q_full[0])); ++s) {
    FullBarrier::init(&smem.q_full[s], 1);
    EmptyBarrier::init(&smem.q_empty[s], num_consumer_threads);
  }
  for (int s = 0; s < kStages; ++s) {
    FullBarrier::init(&smem.k_full[s], 1);
    FullBarrier::init(&smem.v_full[s], 1);
    EmptyBarrier::init(&smem.k_empty[s], num_consumer_threads);
    EmptyBarrier::init(&smem.v_empty[s], num_consumer_threads);
  }
}

}  // namespace hopattn::kernels::fwd
