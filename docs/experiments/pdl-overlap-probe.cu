// Probe (session 39, docs/perf-log.md): does a PDL-launched kernel B (one 227 KB CTA per SM, as
// the backward's main kernel) start on the SMs that kernel A (P CTAs of 1024 threads, triggering
// at once, then ~100 us of work) leaves free, or only after A? On an H100 it does, 3.4-6.5 us
// after A starts. Not built by CMake:
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a docs/experiments/pdl-overlap-probe.cu -o /tmp/p && /tmp/p
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void __launch_bounds__(1024, 1) kernel_a(unsigned long long* t, int spin_us, float* sink) {
  asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0) t[2 * blockIdx.x] = now();
  const unsigned long long end = now() + spin_us * 1000ull;
  float x = threadIdx.x;
  while (now() < end) x = x * 1.0001f + 0.5f;
  if (x == 12345.f) sink[0] = x;
  __syncthreads();
  if (threadIdx.x == 0) t[2 * blockIdx.x + 1] = now();
}
__global__ void __launch_bounds__(384, 1) kernel_b(unsigned long long* t) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0) { t[blockIdx.x] = now(); smem[0] = 1; }
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned long long *ta, *tb; float* sink;
  CK(cudaMalloc(&ta, 2 * sms * 8)); CK(cudaMalloc(&tb, sms * 8)); CK(cudaMalloc(&sink, 4));
  const int smem = 227 * 1024;
  CK(cudaFuncSetAttribute(kernel_b, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int P : {24, 40, 66}) for (int rep = 0; rep < 2; ++rep) {
    kernel_a<<<P, 1024>>>(ta, 100, sink);
    cudaLaunchAttribute attr[1]; attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3(sms - 8); cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel_b, tb));
    CK(cudaDeviceSynchronize());
    std::vector<unsigned long long> a(2 * P), b(sms - 8);
    CK(cudaMemcpy(a.data(), ta, a.size() * 8, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), tb, b.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long a0 = ~0ull, a1 = 0; for (int i = 0; i < P; ++i) { a0 = std::min(a0, a[2 * i]); a1 = std::max(a1, a[2 * i + 1]); }
    std::sort(b.begin(), b.end());
    int early = 0; for (auto x : b) early += x < a1;
    printf("P=%d: A runs %.1f us; B CTAs start (us after A's start) first %.1f, median %.1f, last %.1f; %d of %zu before A ended\n",
           P, (a1 - a0) / 1e3, (b.front() - a0) / 1e3, (b[b.size() / 2] - a0) / 1e3, (b.back() - a0) / 1e3, early, b.size());
  }
  return 0;
}
