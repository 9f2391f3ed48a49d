// The split-KV combine: for each query row and head, the splits' log-sum-exps give
//   lse = log sum_i exp(lse_i),   out = sum_i exp(lse_i - lse) * out_i
// (each out_i is already normalised by its own split's sum). One warp per (row, head): the lanes
// take the splits for the two reductions (max, then sum of exps, in FP32 with expf / logf), then
// the head dim in passes of 256 columns (8 per lane, the lanes on consecutive columns), each lane
// adding every split's values of its columns.
// A split that saw no key of the row (lse_i = -inf) gets weight 0 and is skipped, so whatever its
// out_i holds is never read; a row no split saw gets out = 0 and lse = -inf, as the forward
// writes such rows. Memory-bound: each partial value is read once.
#include "kernels/combine/combine.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "api/cuda_check.hpp"

namespace hopattn::kernels::combine {

namespace {

constexpr int kWarps = 4;       // warps per block, one (row, head) each
constexpr int kColsPerLane = 8;  // a lane keeps 8 columns: 256 per pass over the splits

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <class Out>
__global__ void __launch_bounds__(kWarps * 32) combine_kernel(const CombineArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;  // (row, head)
  if (pair >= int64_t(a.batch) * a.seqlen * a.nheads) return;
  const int h = int(pair % a.nheads);
  const int64_t row = pair / a.nheads;  // b * seqlen + s
  const int b = int(row / a.seqlen), s = int(row % a.seqlen);
  const float* lse_in = a.lse_partial + b * a.lp_stride[1] + h * a.lp_stride[2] + s * a.lp_stride[3];
  auto lse_of = [&](int i) { return lse_in[i * a.lp_stride[0]]; };

  float m = -INFINITY;
  for (int i = lane; i < a.num_splits; i += 32) m = fmaxf(m, lse_of(i));
  m = warp_max(m);
  float lse = -INFINITY;
  if (m != -INFINITY) {
    float sum = 0.f;
    for (int i = lane; i < a.num_splits; i += 32) sum += expf(lse_of(i) - m);
    lse = m + logf(warp_sum(sum));
  }
  if (a.lse != nullptr && lane == 0) a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + s * a.lse_stride[2]] = lse;

  const float* in_row = a.out_partial + row * a.op_stride[1] + h * a.op_stride[2];
  Out* out_row = static_cast<Out*>(a.out) + b * a.out_stride[0] + s * a.out_stride[1] + h * a.out_stride[2];
  for (int d0 = 0; d0 < a.head_dim; d0 += 32 * kColsPerLane) {
    float acc[kColsPerLane] = {};
    if (lse != -INFINITY) {
      for (int i = 0; i < a.num_splits; ++i) {
        const float w = expf(lse_of(i) - lse);  // the same for every lane
        if (w == 0.f) continue;                 // a split without keys: out_i is never read
        const float* in = in_row + i * a.op_stride[0];
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) {
          const int d = d0 + c * 32 + lane;
          if (d < a.head_dim) acc[c] += w * in[d * a.op_stride[3]];
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) {
      const int d = d0 + c * 32 + lane;
      if (d < a.head_dim) out_row[d * a.out_stride[3]] = Out(acc[c]);  // round to nearest even
    }
  }
}

template <class Out>
void launch_typed(const CombineArgs& a, cudaStream_t stream) {
  const int64_t pairs = int64_t(a.batch) * a.seqlen * a.nheads;
  const int64_t blocks = (pairs + kWarps - 1) / kWarps;
  combine_kernel<Out><<<dim3(unsigned(blocks)), kWarps * 32, 0, stream>>>(a);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch(const CombineArgs& a, cudaStream_t stream) {
  if (int64_t(a.batch) * a.seqlen * a.nheads == 0) return;
  switch (a.out_dtype) {
    case DType::kFloat32: return launch_typed<float>(a, stream);
    case DType::kFloat16: return launch_typed<__half>(a, stream);
    case DType::kBFloat16: return launch_typed<__nv_bfloat16>(a, stream);
    default: break;  // the API validated out's dtype
  }
}

}  // namespace hopattn::kernels::combine
