// The mbarrier rings between the producer warp and the consumer warpgroups, as named
// operations. Phase convention: a stage's full barrier completes once per fill; a consumer
// waits for parity `phase` and the producer waits on the empty barrier for parity `phase ^ 1`,
// which a freshly initialised barrier already satisfies (so the first lap never blocks).
#pragma once

#include <cutlass/arch/barrier.h>

#include "kernels/common/device_utils.hpp"

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

// The same ring position in one register: count = lap parity * kStages + stage. For loops that
// are short of registers (the backward consumers, where two-field states spilled at d128).
template <int kStages>
struct PackedPipeState {
  uint32_t count = 0;
  __device__ __forceinline__ int stage() const { return int(count % kStages); }
  __device__ __forceinline__ uint32_t phase() const { return count / kStages; }
  __device__ __forceinline__ void advance() { count = (count + 1) % (2 * kStages); }
};

__device__ __forceinline__ void wait_full(uint64_t& bar, uint32_t phase) { FullBarrier::wait(&bar, phase); }
__device__ __forceinline__ void wait_empty(uint64_t& bar, uint32_t phase) { EmptyBarrier::wait(&bar, phase ^ 1); }
__device__ __forceinline__ void release(uint64_t& bar) { EmptyBarrier::arrive(&bar); }
__device__ __forceinline__ void expect_bytes(uint64_t& bar, uint32_t bytes) {
  FullBarrier::arrive_and_expect_tx(&bar, bytes);
}
// The same in two steps, for a producer that writes something the consumers read with the stage
// after issuing its load: the bytes first (no arrive: the phase cannot complete yet), then, once
// the writes are done, publish_stage (arrive, with release semantics; the compiler fence keeps the
// writes above it).
__device__ __forceinline__ void expect_bytes_only(uint64_t& bar, uint32_t bytes) {
  FullBarrier::expect_transaction(&bar, bytes);
}
__device__ __forceinline__ void publish_stage(uint64_t& bar) {
  compiler_memory_fence();
  FullBarrier::arrive(&bar);
}

// 2-CTA clusters (FwdKernelParams::cluster_kv): a K or V stage is written by both CTAs' TMA loads
// (each multicasts half of the block to both), so a producer may load into stage s only when both
// CTAs' consumers have freed it. Each producer, once its own consumers freed the stage (wait_empty),
// tells the peer (a remote arrive on the peer's `peer_free[s]`, count 1) and waits for the peer's
// word on its own: one completion per lap of the ring, waited for with the lap's parity.
__device__ __forceinline__ void exchange_stage_free(uint64_t& peer_free, uint32_t phase, uint32_t peer_rank) {
  EmptyBarrier::arrive(&peer_free, peer_rank, 1u);
  FullBarrier::wait(&peer_free, phase);
}

// Every ring barrier of a forward kernel's shared storage. The FP8 kernel has two V rings: the
// staging ring (TMA -> the 96 transposing producer threads) and the V^T ring (those threads ->
// the consumers); see traits_fp8.hpp.
template <class T>
__device__ __forceinline__ void init_barriers(typename T::SharedStorage& smem) {
  for (int s = 0; s < T::kQStages; ++s) {
    FullBarrier::init(&smem.q_full[s], 1);
    EmptyBarrier::init(&smem.q_empty[s], T::kNumConsumerThreads);
  }
  for (int s = 0; s < T::kStages; ++s) {
    FullBarrier::init(&smem.k_full[s], 1);
    EmptyBarrier::init(&smem.k_empty[s], T::kNumConsumerThreads);
    EmptyBarrier::init(&smem.v_empty[s], T::kNumConsumerThreads);
    if constexpr (T::kFp8) {
      FullBarrier::init(&smem.v_stage_full[s], 1);
      EmptyBarrier::init(&smem.v_stage_empty[s], T::kNumTransposeThreads);
      FullBarrier::init(&smem.v_full[s], T::kNumTransposeThreads);
    } else {
      FullBarrier::init(&smem.v_full[s], 1);
    }
    if constexpr (T::kClusterKV) {
      EmptyBarrier::init(&smem.k_peer_free[s], 1);
      EmptyBarrier::init(&smem.v_peer_free[s], 1);
    }
  }
  if constexpr (T::Output::kInVRing) EmptyBarrier::init(&smem.o_staged, T::kNumConsumerThreads);
  if constexpr (T::kClusterKV) EmptyBarrier::init(&smem.peer_done, T::kNumConsumerThreads);
}

}  // namespace hopattn::kernels::fwd
