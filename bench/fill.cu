// Random normal fill: a 64-bit integer hash of (seed, index) gives two 24-bit uniforms, and the
// Box-Muller transform turns them into one N(0, 1) sample. Stateless, so any grid shape gives
// the same values.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "cuda_util.hpp"
#include "fill.hpp"

namespace hopattn_bench {

namespace {

// The splitmix64 output function: a bijective avalanche mix of 64 bits.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

__device__ __forceinline__ float standard_normal(uint64_t seed, uint64_t index) {
  const uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (index + 1));
  constexpr float kTwoPow24Inv = 1.0f / 16777216.0f;
  const float u1 = (static_cast<float>(h >> 40) + 1.0f) * kTwoPow24Inv;       // (0, 1]
  const float u2 = static_cast<float>(h & 0xffffffull) * kTwoPow24Inv;        // [0, 1)
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
  return __nv_fp8_e4m3(x);  // round to nearest, saturating to the finite range
}

template <typename T>
__global__ void fill_normal_kernel(T* out, int64_t n, uint64_t seed, float stddev) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = from_float<T>(stddev * standard_normal(seed, static_cast<uint64_t>(i)));
}

template <typename T>
void launch_fill(void* data, int64_t n, uint64_t seed, float stddev, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  fill_normal_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<T*>(data), n, seed, stddev);
  BENCH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_random_normal(void* data, hopattn::DType dtype, int64_t n, uint64_t seed,
                        cudaStream_t stream, float stddev) {
  if (n <= 0) return;
  switch (dtype) {
    case hopattn::DType::kFloat16: return launch_fill<__half>(data, n, seed, stddev, stream);
    case hopattn::DType::kBFloat16: return launch_fill<__nv_bfloat16>(data, n, seed, stddev, stream);
    case hopattn::DType::kFloat8E4M3: return launch_fill<__nv_fp8_e4m3>(data, n, seed, stddev, stream);
    case hopattn::DType::kFloat32: return launch_fill<float>(data, n, seed, stddev, stream);
    case hopattn::DType::kInt32: break;
  }
  throw std::invalid_argument("fill_random_normal: no normal fill for dtype " +
                              std::to_string(static_cast<int>(dtype)));
}

}  // namespace hopattn_bench
