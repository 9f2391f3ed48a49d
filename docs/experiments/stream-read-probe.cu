// Probe (session 39, docs/perf-log.md): read bandwidth of P SMs streaming 128 MB (O + dO at 16k
// tokens x 2048, bf16): (a) 1024 threads per SM, 8 16-byte loads in flight each; (b) one thread per
// SM issuing 1-D bulk copies of 32 KB into a 6-stage shared-memory ring, 128 threads summing each
// stage. On an H100 either reaches 90-118 GB/s per SM, so 24 SMs stream it in 60 us (all 132: 48).
// Not built by CMake; with the headers of tools/setup-deps:
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I .deps/cutlass/include --expt-relaxed-constexpr \
//     docs/experiments/stream-read-probe.cu -o /tmp/p && /tmp/p
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90.hpp>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void __launch_bounds__(1024, 1) stream_threads(const uint4* a, size_t n, float* sink) {
  float acc = 0.f;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = i + k * stride < n ? __ldcs(a + i + k * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc += __uint_as_float(v[k].x ^ v[k].w);
  }
  if (acc == 12345.f) sink[0] = acc;
}
constexpr int kStages = 6, kChunk = 32 * 1024;
__global__ void __launch_bounds__(160, 1) stream_bulk(const char* a, size_t bytes, float* sink) {
  extern __shared__ __align__(128) char buf[];
  __shared__ alignas(8) uint64_t full[kStages], empty[kStages];
  const size_t chunks = bytes / kChunk;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) { cutlass::arch::ClusterTransactionBarrier::init(&full[s], 1); cutlass::arch::ClusterBarrier::init(&empty[s], 128); }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= 128) {  // warp 4: the loader
    if (threadIdx.x == 128) {
      int it = 0;
      for (size_t c = blockIdx.x; c < chunks; c += gridDim.x, ++it) {
        const int s = it % kStages, ph = (it / kStages) & 1;
        cutlass::arch::ClusterBarrier::wait(&empty[s], ph ^ 1);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[s], kChunk);
        cute::SM90_BULK_COPY_G2S::copy(a + c * kChunk, &full[s], buf + s * kChunk, kChunk);
      }
    }
    return;
  }
  float acc = 0.f;
  int it = 0;
  for (size_t c = blockIdx.x; c < chunks; c += gridDim.x, ++it) {
    const int s = it % kStages, ph = (it / kStages) & 1;
    cutlass::arch::ClusterTransactionBarrier::wait(&full[s], ph);
    const uint4* v = reinterpret_cast<const uint4*>(buf + s * kChunk);
    for (int k = threadIdx.x; k < kChunk / 16; k += 128) acc += __uint_as_float(v[k].x ^ v[k].w);
    cutlass::arch::ClusterBarrier::arrive(&empty[s]);
  }
  if (acc == 12345.f) sink[0] = acc;
}
int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t bytes = 128ull << 20;
  char* a; float* sink; CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&sink, 4)); CK(cudaMemset(a, 1, bytes));
  const int smem = kStages * kChunk;
  CK(cudaFuncSetAttribute(stream_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto time = [&](auto f) { for (int i = 0; i < 3; ++i) f(); std::vector<float> t;
    for (int i = 0; i < 15; ++i) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1e3f); }
    std::sort(t.begin(), t.end()); return t[t.size() / 2]; };
  for (int P : {8, 16, 24, 40, 66, sms}) {
    const float ta = time([&] { stream_threads<<<P, 1024>>>((const uint4*)a, bytes / 16, sink); });
    const float tb = time([&] { stream_bulk<<<P, 160, smem>>>(a, bytes, sink); });
    printf("P=%3d: threads %6.1f us (%5.1f GB/s per SM, %.2f TB/s) | bulk %6.1f us (%5.1f GB/s per SM, %.2f TB/s)\n", P,
           ta, bytes / (ta * 1e3) / P, bytes / (ta * 1e6), tb, bytes / (tb * 1e3) / P, bytes / (tb * 1e6));
  }
  CK(cudaGetLastError());
  return 0;
}
