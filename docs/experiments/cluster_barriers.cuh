// The standalone cluster experiments' shared-memory and mbarrier helpers (dsmem-pair-sum-bench.cu,
// dsmem-ds-exchange-bench.cu): addresses in a peer CTA, waits and arrivals at cluster scope.
#pragma once

#include <cstdint>

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The shared::cluster address of `local` (a shared-memory address of this CTA) in CTA `rank`.
__device__ __forceinline__ uint32_t peer_addr(uint32_t local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  }
}
// Arrive on the copy of `bar` in CTA `rank` (release at cluster scope).
__device__ __forceinline__ void arrive_remote(uint64_t* bar, uint32_t rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(peer_addr(smem_u32(bar), rank))
               : "memory");
}
__device__ __forceinline__ void arrive_remote_expect(uint64_t* bar, uint32_t rank, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(
                   peer_addr(smem_u32(bar), rank)),
               "r"(bytes)
               : "memory");
}
// One thread: announce `bytes` on CTA rank's copy of `full`, then copy src (this CTA) to dst's
// copy in CTA rank, completing on that barrier.
__device__ __forceinline__ void bulk_copy_to_peer(void* dst, const void* src, uint32_t bytes, uint64_t* full,
                                                  uint32_t rank) {
  arrive_remote_expect(full, rank, bytes);
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          peer_addr(smem_u32(dst), rank)),
      "r"(smem_u32(src)), "r"(bytes), "r"(peer_addr(smem_u32(full), rank))
      : "memory");
}
