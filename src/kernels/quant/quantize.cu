// Quantization kernels. One warp owns one row (head_dim = 32 * E elements, E per lane, held in
// registers), so the Walsh-Hadamard transform runs in registers and shuffles without shared
// memory: strides below E are register butterflies, larger strides are lane butterflies
// (shfl.xor). Two passes over the input: (1) per-block amax of the (rotated) rows, reduced with
// atomicMax on the float bits (non-negative floats order like their bits); (2) quantize with
// descale = amax / 448, satfinite. The rotation is recomputed in pass 2 rather than stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "api/cuda_check.hpp"
#include "hopattn/quantize.hpp"
#include "kernels/quant/quantize.hpp"

namespace hopattn::kernels::quant {

namespace {

constexpr int kWarps = 4;          // rows in flight per CTA
constexpr int kRowsPerCta = 64;    // rows of one (batch, head) per CTA
constexpr float kE4M3Max = 448.f;

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Loads row elements [lane*E, lane*E + E) and applies the rotation when asked.
template <int E, class In>
__device__ __forceinline__ void load_rotated_row(const QuantArgs& a, const In* row, int lane, float (&x)[E]) {
  #pragma unroll
  for (int j = 0; j < E; ++j) x[j] = to_float(row[lane * E + j]);
  if (!a.hadamard) return;
  if constexpr ((E & (E - 1)) == 0) {  // the transform exists for power-of-two head dims only
    #pragma unroll
    for (int j = 0; j < E; ++j) x[j] *= incoherence_sign(a.seed, lane * E + j);
    #pragma unroll
    for (int s = 1; s < E; s <<= 1) {  // strides inside a lane's chunk
      #pragma unroll
      for (int j = 0; j < E; ++j) {
        if (j & s) continue;
        const float u = x[j], v = x[j + s];
        x[j] = u + v;
        x[j + s] = u - v;
      }
    }
    #pragma unroll
    for (int sl = 1; sl < 32; sl <<= 1) {  // strides across lanes: E * sl
      #pragma unroll
      for (int j = 0; j < E; ++j) {
        const float other = __shfl_xor_sync(0xffffffff, x[j], sl);
        x[j] = (lane & sl) ? other - x[j] : x[j] + other;
      }
    }
    const float norm = rsqrtf(float(32 * E));
    #pragma unroll
    for (int j = 0; j < E; ++j) x[j] *= norm;
  }
}

template <int E, class In, bool kQuantize>
__global__ void __launch_bounds__(kWarps * 32) quantize_pass(const QuantArgs a, unsigned* amax_bits) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int head = blockIdx.y, batch = blockIdx.z;
  const In* in = static_cast<const In*>(a.in) + batch * a.in_stride_b + head * a.in_stride_h;
  unsigned* amax = amax_bits + (int64_t(batch) * a.nheads + head) * a.num_blocks;
  const int row_end = min(a.seqlen, int(blockIdx.x + 1) * kRowsPerCta);
  for (int r = blockIdx.x * kRowsPerCta + warp; r < row_end; r += kWarps) {
    float x[E];
    load_rotated_row<E>(a, in + r * a.in_stride_s, lane, x);
    const int block = r / a.block_rows;
    if constexpr (!kQuantize) {
      float m = 0.f;
      #pragma unroll
      for (int j = 0; j < E; ++j) m = fmaxf(m, fabsf(x[j]));
      #pragma unroll
      for (int sl = 16; sl > 0; sl >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, sl));
      if (lane == 0) atomicMax(&amax[block], __float_as_uint(m));
    } else {
      const float block_amax = __uint_as_float(amax[block]);
      const float descale = block_amax > 0.f ? block_amax / kE4M3Max : 1.f;
      const float scale = 1.f / descale;
      uint8_t* out = a.out + batch * a.out_stride_b + head * a.out_stride_h + r * a.out_stride_s + lane * E;
      #pragma unroll
      for (int j = 0; j < E; ++j)
        out[j] = __nv_cvt_float_to_fp8(x[j] * scale, __NV_SATFINITE, __NV_E4M3);
      if (lane == 0) a.descale[(int64_t(batch) * a.nheads + head) * a.num_blocks + block] = descale;
    }
  }
}

template <int E, class In>
void launch_typed(const QuantArgs& a, unsigned* amax, cudaStream_t stream) {
  const dim3 grid((a.seqlen + kRowsPerCta - 1) / kRowsPerCta, a.nheads, a.batch);
  quantize_pass<E, In, false><<<grid, kWarps * 32, 0, stream>>>(a, amax);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
  quantize_pass<E, In, true><<<grid, kWarps * 32, 0, stream>>>(a, amax);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

template <class In>
void launch_dim(const QuantArgs& a, unsigned* amax, cudaStream_t stream) {
  switch (a.head_dim / 32) {
    case 2: return launch_typed<2, In>(a, amax, stream);
    case 3: return launch_typed<3, In>(a, amax, stream);
    case 4: return launch_typed<4, In>(a, amax, stream);
    case 6: return launch_typed<6, In>(a, amax, stream);
    case 8: return launch_typed<8, In>(a, amax, stream);
    default: throw Error(ErrorCode::kInternal, "in", "unexpected head dim in quantize dispatch");
  }
}

}  // namespace

size_t workspace_bytes(const QuantArgs& a) {
  const size_t bytes = size_t(a.batch) * a.nheads * a.num_blocks * sizeof(unsigned);
  return (bytes + 255) / 256 * 256;
}

void launch(const QuantArgs& a, void* workspace, cudaStream_t stream) {
  if (a.batch == 0 || a.nheads == 0 || a.seqlen == 0) return;
  auto* amax = static_cast<unsigned*>(workspace);
  HOPATTN_CUDA_CHECK(cudaMemsetAsync(amax, 0, workspace_bytes(a), stream));
  if (a.in_dtype == DType::kFloat16) launch_dim<__half>(a, amax, stream);
  else launch_dim<__nv_bfloat16>(a, amax, stream);
}

}  // namespace hopattn::kernels::quant
