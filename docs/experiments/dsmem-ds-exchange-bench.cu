// Can a d256 backward CTA pair swap its dS blocks every step without stalling? (docs/design/bwd.md,
// "Open", session 47.) The lead: two CTAs of a cluster take adjacent 64-key blocks of one head and
// walk the same query blocks; each computes dQ for half of the head dim over all 128 keys, so each
// adds 32 KB of FP32 dQ per step into L2 instead of 64 KB (the reductions bound d256: without them
// it runs 1.13-1.24x faster). The price is an 8 KB exchange per step and direction: my dS^T
// (64 x 64 bf16) must reach the peer before its dQ GEMM, while both run their dV and dK GEMMs.
//
// Each CTA (256 threads, one per SM, every SM busy) loops over steps that stand for the kernel's:
//   A  (S^T, dP^T, the element-wise work)  spin a cycles
//      write my 8 KB into shared memory; send it to the peer (per mode below)
//   B  (dV, dK GEMMs)                       spin b cycles
//      wait until the peer's 8 KB has landed here; read it
//   C  (the dQ GEMM, its hand-off)          spin c cycles; free the receive buffer for the peer
// Modes: 0 no exchange (the same spins and local shared-memory traffic: the baseline); 1 bulk copy
// (one thread, cp.async.bulk.shared::cluster, completing on the peer's mbarrier); 2 remote stores
// (each thread stores its 32 bytes into the peer's buffer and arrives on the peer's barrier); 3
// helper warp (the consumers only write, fence and arrive on local barriers; a 9th warp issues the
// bulk copy and forwards the frees to the peer).
// Receive buffers: a ring of two per CTA, freed by a remote arrival on the sender's barrier.
// Prints ns per step and what the exchange adds to the baseline, for several b.
// Results (H100, session 47, docs/perf-log.md): a consumer thread doing the cluster-scope
// operations adds 840-1,130 ns per step whatever b is (its release arrivals stall the CTA); the
// helper warp adds 850 / 590 / 140 ns at b = 0 / 500 / 1500 cycles (the data lands about 1,500
// cycles after the consumers' arrival).
// Not built by CMake; from the repository root:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a docs/experiments/dsmem-ds-exchange-bench.cu \
//     -o /tmp/ds-exchange && /tmp/ds-exchange
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "check_cuda.cuh"
#include "cluster_barriers.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kPieceBytes = 8 * 1024;  // one 64 x 64 bf16 dS^T block
constexpr int kVecs = kPieceBytes / 16 / kThreads;  // float4 per thread: 2
constexpr int kDepth = 2;
constexpr int kSmemBytes = 200 * 1024;  // one CTA per SM, as the kernel

enum Mode { kNone = 0, kBulk = 1, kRemoteStores = 2, kHelperWarp = 3 };
constexpr int kWarps = kThreads / 32;

struct Shared {
  alignas(128) float4 send[kDepth][kPieceBytes / 16];
  alignas(128) float4 recv[kDepth][kPieceBytes / 16];
  alignas(8) uint64_t full[kDepth];       // here: the peer's piece has landed in recv[b]
  alignas(8) uint64_t peer_free[kDepth];  // here: the peer has read what I sent into its recv[b]
  // kHelperWarp only, local: every consumer warp wrote send[b] / read recv[b]; the helper's copy
  // has read send[b].
  alignas(8) uint64_t sent_ready[kDepth], recv_done[kDepth], send_free[kDepth];
};

__device__ __forceinline__ void arrive_local(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void spin(int cycles, float& x) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) x = x * 0.999f + 1e-3f;
}

template <int kMode>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads + 32, 1)
    ds_exchange(int steps, int a, int b, int c, float* sink, long long* phases) {
  extern __shared__ __align__(128) char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const uint32_t peer = cluster.block_rank() ^ 1;
  const int t = threadIdx.x;
  if (t == 0) {
    for (int k = 0; k < kDepth; ++k) {
      const uint32_t full_count = kMode == kRemoteStores ? kThreads : 1;
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&s.full[k])), "r"(full_count));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&s.peer_free[k])), "r"(1));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&s.sent_ready[k])), "r"(kWarps));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&s.recv_done[k])), "r"(kWarps));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&s.send_free[k])), "r"(1));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster.sync();
  float4* peer_recv = cluster.map_shared_rank(&s.recv[0][0], peer);
  if (kMode == kHelperWarp && t >= kThreads) {
    // The helper warp (lane 0) does every cluster-scope operation, off the consumers' path.
    if (t == kThreads) {
      for (int i = 0; i < steps; ++i) {
        const int k = i % kDepth;
        const uint32_t parity = (i / kDepth) & 1;
        wait_parity(&s.sent_ready[k], parity);
        wait_parity(&s.peer_free[k], parity ^ 1);
        bulk_copy_to_peer(&s.recv[k][0], &s.send[k][0], kPieceBytes, &s.full[k], peer);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        arrive_local(&s.send_free[k]);
        wait_parity(&s.recv_done[k], parity);
        arrive_remote(&s.peer_free[k], peer);
      }
    }
    cluster.sync();
    return;
  }
  float x = 1e-3f * t;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  long long send_cycles = 0, wait_cycles = 0, free_cycles = 0;  // thread 0's, per phase
  for (int i = 0; i < steps; ++i) {
    const int k = i % kDepth;
    const uint32_t parity = (i / kDepth) & 1;
    spin(a, x);  // A
    const long long t_send = clock64();
    if (kMode == kBulk) {
      // send[k] was last copied two steps ago: that copy has been read once at most one newer
      // group is pending.
      if (t == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      __syncthreads();
    }
    if (kMode == kHelperWarp) {
      wait_parity(&s.send_free[k], parity ^ 1);  // the copy two steps ago has read send[k]
      for (int v = 0; v < kVecs; ++v) s.send[k][v * kThreads + t] = make_float4(x, v, t, i);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();
      if (t % 32 == 0) arrive_local(&s.sent_ready[k]);
    } else if (kMode == kRemoteStores) {
      wait_parity(&s.peer_free[k], parity ^ 1);  // the peer has read its recv[k] (first lap: free)
      for (int v = 0; v < kVecs; ++v) peer_recv[k * (kPieceBytes / 16) + v * kThreads + t] = make_float4(x, v, t, i);
      arrive_remote(&s.full[k], peer);
    } else {
      for (int v = 0; v < kVecs; ++v) s.send[k][v * kThreads + t] = make_float4(x, v, t, i);
      if (kMode == kBulk) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (t == 0) {
          wait_parity(&s.peer_free[k], parity ^ 1);
          bulk_copy_to_peer(&s.recv[k][0], &s.send[k][0], kPieceBytes, &s.full[k], peer);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
    }
    send_cycles += clock64() - t_send;
    spin(b, x);  // B
    const float4* in = kMode == kNone ? &s.send[k][0] : &s.recv[k][0];
    const long long t_wait = clock64();
    if (kMode != kNone) wait_parity(&s.full[k], parity);
    wait_cycles += clock64() - t_wait;
    for (int v = 0; v < kVecs; ++v) {
      const float4 y = in[v * kThreads + t];
      acc.x += y.x;
      acc.y += y.w;
    }
    spin(c, x);  // C
    const long long t_free = clock64();
    if (kMode == kHelperWarp) {
      __syncwarp();  // the warp has read recv[k]
      if (t % 32 == 0) arrive_local(&s.recv_done[k]);
    } else if (kMode != kNone) {
      __syncthreads();  // every thread has read recv[k]
      if (t == 0) arrive_remote(&s.peer_free[k], peer);
    }
    free_cycles += clock64() - t_free;
  }
  if (t == 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&phases[0]), send_cycles / steps);
    atomicAdd(reinterpret_cast<unsigned long long*>(&phases[1]), wait_cycles / steps);
    atomicAdd(reinterpret_cast<unsigned long long*>(&phases[2]), free_cycles / steps);
  }
  if (kMode == kBulk && t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  cluster.sync();  // no CTA leaves while its peer may still address its shared memory
  if (acc.x + acc.y + x == 12345.f) sink[blockIdx.x] = acc.x;
}

template <int kMode>
double ns_per_step(int ctas, int steps, int a, int b, int c, float* sink, long long* phases, long long* out) {
  auto kernel = ds_exchange<kMode>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int threads = kMode == kHelperWarp ? kThreads + 32 : kThreads;
  kernel<<<ctas, threads, kSmemBytes>>>(steps, a, b, c, sink, phases);  // warm-up
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(e0));
    CK(cudaMemset(phases, 0, 3 * sizeof(long long)));
    kernel<<<ctas, threads, kSmemBytes>>>(steps, a, b, c, sink, phases);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    best = ms < best ? ms : best;
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaMemcpy(out, phases, 3 * sizeof(long long), cudaMemcpyDeviceToHost));
  for (int k = 0; k < 3; ++k) out[k] /= ctas;  // the last run's mean over CTAs, thread 0
  return best * 1e6 / steps;
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = prop.multiProcessorCount / 2 * 2, steps = 4000;
  printf("%s, %d SMs, %d CTAs in pairs, %d steps, 8 KB each way per step, ring of %d\n", prop.name,
         prop.multiProcessorCount, ctas, steps, kDepth);
  float* sink = nullptr;
  long long* phases = nullptr;
  CK(cudaMalloc(&sink, ctas * sizeof(float)));
  CK(cudaMalloc(&phases, 3 * sizeof(long long)));
  printf("ns per step; [send / wait / free] thread 0's cycles per step in the exchange's phases\n");
  printf("%6s %6s %6s | %10s | %10s %8s %20s | %10s %8s %20s | %10s %8s %20s\n", "A", "B", "C", "none ns", "bulk ns", "+ns",
         "[send wait free]", "stores ns", "+ns", "[send wait free]", "helper ns", "+ns", "[send wait free]");
  const int a = 3000, c = 2000;  // about a d256 step (6.35k cycles) with B
  for (int b : {0, 500, 1500}) {
    long long p0[3], p1[3], p2[3], p3[3];
    const double n0 = ns_per_step<kNone>(ctas, steps, a, b, c, sink, phases, p0);
    const double n1 = ns_per_step<kBulk>(ctas, steps, a, b, c, sink, phases, p1);
    const double n2 = ns_per_step<kRemoteStores>(ctas, steps, a, b, c, sink, phases, p2);
    const double n3 = ns_per_step<kHelperWarp>(ctas, steps, a, b, c, sink, phases, p3);
    printf("%6d %6d %6d | %10.0f | %10.0f %8.0f [%5lld %5lld %5lld] | %10.0f %8.0f [%5lld %5lld %5lld] | %10.0f %8.0f [%5lld %5lld "
           "%5lld]   none [%lld %lld %lld]\n",
           a, b, c, n0, n1, n1 - n0, p1[0], p1[1], p1[2], n2, n2 - n0, p2[0], p2[1], p2[2], n3, n3 - n0, p3[0], p3[1], p3[2],
           p0[0], p0[1], p0[2]);
  }
  CK(cudaFree(phases));
  CK(cudaFree(sink));
  return 0;
}
