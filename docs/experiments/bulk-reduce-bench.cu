// How fast an H100 absorbs FP32 bulk reduce-adds from every SM (session 30, docs/perf-log.md:
// without its dQ reduce-adds the d256 backward ran 1.18-1.24x faster). The dQ writer adds one
// 32 KB chunk of shared memory per bulk op (d128: one per step, d256: two) and waits for the op to
// have read it before the next hand-off. This times the same op from one thread per SM, against
// plain bulk stores, into an L2-sized or a DRAM-sized destination, each CTA in a window of its
// own or groups of 8 CTAs sharing one window from rotated starts (the key tiles of a head adding
// into the same query blocks); and from fewer SMs, and as red.global.add.v4.f32 from 128 threads.
// Results (H100, session 31, docs/perf-log.md): every SM at once adds 3.0-3.3 TB/s into L2
// (1.3-1.4 us per op and SM), whether each op waits for its read or four are in flight, and
// thread reds reach the same; stores 3.8-4.1 TB/s; a lone SM 730 ns per op. So the L2's
// reduction throughput bounds the sum (the d256 backward at 8k keys adds about 2.6 TB/s), and
// an op reads its 32 KB about as slowly as it sends them: with one buffer the consumers waited
// that long per hand-off (two buffers at d256 since: dq_writer.hpp). Not built by CMake; from
// the repository root:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a docs/experiments/bulk-reduce-bench.cu \
//     -o /tmp/bulk-reduce && /tmp/bulk-reduce
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "check_cuda.cuh"

constexpr int kChunkBytes = 32 * 1024;  // the writer's chunk at d128 and d256
constexpr int kChunkFloats = kChunkBytes / 4;
constexpr int kSmemBytes = 160 * 1024;  // asked for, so that each SM holds one CTA (32 KB used)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kAdd: cp.reduce.async.bulk .add.f32 (the writer's op), else cp.async.bulk (a plain store).
// kWaitRead: wait for the op to have read shared memory before issuing the next (the writer's
// single buffer); else keep up to 4 in flight.
template <bool kAdd, bool kWaitRead>
__global__ void bulk_ops(float* dst, int window_chunks, int group, int iters) {
  extern __shared__ __align__(128) float buf[];
  for (int i = threadIdx.x; i < kChunkFloats; i += blockDim.x) buf[i] = 1e-3f * float(i % 7);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> bulk reads
  __syncthreads();
  if (threadIdx.x != 0) return;
  // CTAs of one group share a window; each starts at its own offset in it and rotates.
  const int window = blockIdx.x / group, start = blockIdx.x % group;
  float* base = dst + size_t(window) * window_chunks * kChunkFloats;
  const uint32_t src = smem_addr(buf);
  for (int it = 0; it < iters; ++it) {
    float* d = base + size_t((start + it) % window_chunks) * kChunkFloats;
    if constexpr (kAdd) {
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(d), "r"(src),
                   "r"(kChunkBytes)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d), "r"(src), "r"(kChunkBytes)
                   : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if constexpr (kWaitRead) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group.read 3;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// The alternative to the bulk op: every thread of the CTA adds its share of the chunk from
// registers with red.global.add.v4.f32 (the load/store path rather than the bulk-copy engine).
__global__ void thread_reds(float* dst, int window_chunks, int group, int iters) {
  const int window = blockIdx.x / group, start = blockIdx.x % group;
  float* base = dst + size_t(window) * window_chunks * kChunkFloats;
  const float v = 1e-3f * float(threadIdx.x % 7);
  for (int it = 0; it < iters; ++it) {
    float* d = base + size_t((start + it) % window_chunks) * kChunkFloats;
    for (int i = threadIdx.x * 4; i < kChunkFloats; i += blockDim.x * 4)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %1, %1, %1};" ::"l"(d + i), "f"(v) : "memory");
  }
}

using Kernel = void (*)(float*, int, int, int);

// Times `kernel` on `ctas` CTAs (one per SM), each doing `iters` ops of one chunk.
void run(const char* name, Kernel kernel, float* dst, int ctas, int window_chunks, int group, int iters) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  kernel<<<ctas, 128, kSmemBytes>>>(dst, window_chunks, group, iters);  // warm-up
  CK(cudaGetLastError());
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a));
    kernel<<<ctas, 128, kSmemBytes>>>(dst, window_chunks, group, iters);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = ms < best ? ms : best;
  }
  const double bytes = double(ctas) * iters * kChunkBytes;
  printf("%-50s %4d CTAs %8.3f ms  %6.2f TB/s  %5.0f ns per op and SM\n", name, ctas, best, bytes / best / 1e9,
         best * 1e6 / iters);
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount, iters = 2000;
  printf("%s, %d SMs, L2 %d MB; one thread per SM, %d ops of 32 KB each\n", prop.name, sms, prop.l2CacheSize >> 20,
         iters);
  // 128 chunks per CTA, rounded up to whole groups of 8: 545 MB at 132 SMs.
  const size_t max_floats = size_t(sms + 8) * 128 * kChunkFloats;
  float* dst = nullptr;
  CK(cudaMalloc(&dst, max_floats * sizeof(float)));
  CK(cudaMemset(dst, 0, max_floats * sizeof(float)));
  // L2-sized: 2 chunks per CTA (8.4 MB at 132 SMs); DRAM-sized: 128 per CTA.
  for (int chunks_per_cta : {2, 128}) {
    for (int group : {1, 8}) {
      const int window_chunks = chunks_per_cta * group;  // the same bytes in total either way
      char tag[64];
      snprintf(tag, sizeof tag, "%s, %s", chunks_per_cta == 2 ? "L2" : "DRAM", group == 1 ? "own window" : "8 share");
      char name[96];
      snprintf(name, sizeof name, "reduce-add, wait read (%s)", tag);
      run(name, bulk_ops<true, true>, dst, sms, window_chunks, group, iters);
      snprintf(name, sizeof name, "reduce-add, 4 in flight (%s)", tag);
      run(name, bulk_ops<true, false>, dst, sms, window_chunks, group, iters);
      snprintf(name, sizeof name, "store, wait read (%s)", tag);
      run(name, bulk_ops<false, true>, dst, sms, window_chunks, group, iters);
      snprintf(name, sizeof name, "thread red.v4 (%s)", tag);
      run(name, thread_reds, dst, sms, window_chunks, group, iters);
    }
  }
  // Whether one SM's bulk engine or the L2 as a whole limits the reduce-adds: fewer SMs at once.
  for (int ctas : {8, 16, 33, 66, 99}) {
    run("reduce-add, wait read (L2, 8 share)", bulk_ops<true, true>, dst, ctas, 16, 8, iters);
    run("thread red.v4 (L2, 8 share)", thread_reds, dst, ctas, 16, 8, iters);
  }
  CK(cudaFree(dst));
  return 0;
}
