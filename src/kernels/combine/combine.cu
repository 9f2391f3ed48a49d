// The split-KV combine: for each query row and head, the splits' log-sum-exps give
//   lse = log sum_i exp(lse_i),   out = sum_i exp(lse_i - lse) * out_i
// (each out_i is already normalised by its own split's sum). One warp per (row, head): the lanes
// take the splits for the two reductions (max, then sum of exps, in FP32 with expf / logf), then
// the head dim in passes of 256 columns (8 per lane, the lanes on consecutive columns), each lane
// adding every split's values of its columns.
// A split that saw no key of the row (lse_i = -inf) gets weight 0 and is skipped, so whatever its
// out_i holds is never read; a row no split saw gets out = 0 and lse = -inf, as the forward
// writes such rows. Memory-bound: each partial value is read once.
// The common case (rows of contiguous 16-byte-aligned columns, fewer than 2^31 (row, head) pairs)
// has a kernel of its own, combine_vec_kernel: per chunk of 32 splits, lane i computes split i's
// weight once and the column pass takes it by shuffle; columns move as float4s (128 per pass);
// the loads of four splits are in flight together; the indices are 32-bit. It sums in the same
// order as the general kernel, so both give the same bits (H100, perf-log session 34: 1.1-2.7
// TB/s against the general kernel's 0.7-2.2).
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

// Four columns of Out in one store (16 bytes of float, 8 of a 16-bit type).
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
template <class Out>
__device__ __forceinline__ void store4(Out* p, float4 v) {
  Out x[4] = {Out(v.x), Out(v.y), Out(v.z), Out(v.w)};  // round to nearest even
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(x);
}

template <class Out>
__global__ void __launch_bounds__(kWarps * 32) combine_vec_kernel(const CombineArgs a) {
  const int lane = threadIdx.x % 32;
  const uint32_t pair = blockIdx.x * kWarps + threadIdx.x / 32;  // (row, head)
  if (pair >= uint32_t(a.batch) * uint32_t(a.seqlen) * uint32_t(a.nheads)) return;
  const uint32_t h = pair % uint32_t(a.nheads), row = pair / uint32_t(a.nheads);
  const uint32_t b = row / uint32_t(a.seqlen), s = row % uint32_t(a.seqlen);
  const float* lse_in = a.lse_partial + b * a.lp_stride[1] + h * a.lp_stride[2] + s * a.lp_stride[3];
  auto lse_of = [&](int i) { return lse_in[i * a.lp_stride[0]]; };
  // The LSE as combine_kernel forms it (the same operations in the same order: the same bits),
  // with the first chunk's split LSEs read once and kept (lane i: split i).
  const bool first_split = lane < a.num_splits;
  const float lse_first = first_split ? lse_of(lane) : -INFINITY;
  float m = fmaxf(-INFINITY, lse_first);
  for (int i = lane + 32; i < a.num_splits; i += 32) m = fmaxf(m, lse_of(i));
  m = warp_max(m);
  float lse = -INFINITY;
  if (m != -INFINITY) {
    float sum = 0.f;
    if (first_split) sum += expf(lse_first - m);
    for (int i = lane + 32; i < a.num_splits; i += 32) sum += expf(lse_of(i) - m);
    lse = m + logf(warp_sum(sum));
  }
  const float w_first = first_split && lse != -INFINITY ? expf(lse_first - lse) : 0.f;
  if (a.lse != nullptr && lane == 0) a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + s * a.lse_stride[2]] = lse;

  const float* in_row = a.out_partial + row * a.op_stride[1] + h * a.op_stride[2];
  Out* out_row = static_cast<Out*>(a.out) + b * a.out_stride[0] + s * a.out_stride[1] + h * a.out_stride[2];
  for (int d0 = 0; d0 < a.head_dim; d0 += 128) {  // every lane takes every pass: the shuffles need all
    const int d = d0 + 4 * lane;
    const bool has_cols = d < a.head_dim;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int c0 = 0; c0 < a.num_splits; c0 += 32) {  // splits in chunks of 32, lane i: split c0 + i
      const bool lane_split = c0 + lane < a.num_splits && lse != -INFINITY;
      float w = w_first;  // 0: no keys, or no split
      if (c0 > 0) w = lane_split ? expf(lse_of(c0 + lane) - lse) : 0.f;
      const int chunk = min(32, a.num_splits - c0);
      for (int i0 = 0; i0 < chunk; i0 += 4) {
        float wj[4];
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          wj[j] = __shfl_sync(0xffffffffu, w, i0 + j);  // i0 + j < 32; 0 past the chunk's splits
          const bool read = has_cols && wj[j] != 0.f;        // out_i of an empty split is never read
          v[j] = read ? *reinterpret_cast<const float4*>(in_row + (c0 + i0 + j) * a.op_stride[0] + d)
                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (wj[j] == 0.f) continue;  // as combine_kernel: not even 0 * NaN
          acc.x += wj[j] * v[j].x;
          acc.y += wj[j] * v[j].y;
          acc.z += wj[j] * v[j].z;
          acc.w += wj[j] * v[j].w;
        }
      }
    }
    if (has_cols) store4(out_row + d, acc);
  }
}

// Whether a launch may take combine_vec_kernel (see the top of the file).
bool fits_vec_kernel(const CombineArgs& a) {
  const auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  const int out_bytes = a.out_dtype == DType::kFloat32 ? 4 : 2;
  bool ok = a.head_dim % 4 == 0 && a.op_stride[3] == 1 && a.out_stride[3] == 1 &&
            int64_t(a.batch) * a.seqlen * a.nheads <= INT32_MAX && aligned(a.out_partial, 16) &&
            aligned(a.out, 4 * out_bytes);
  for (int i = 0; i < 3; ++i) ok = ok && a.op_stride[i] % 4 == 0 && a.out_stride[i] % 4 == 0;
  return ok;
}

template <class Out>
void launch_typed(const CombineArgs& a, cudaStream_t stream) {
  const int64_t pairs = int64_t(a.batch) * a.seqlen * a.nheads;
  const int64_t blocks = (pairs + kWarps - 1) / kWarps;
  if (fits_vec_kernel(a)) combine_vec_kernel<Out><<<dim3(unsigned(blocks)), kWarps * 32, 0, stream>>>(a);
  else combine_kernel<Out><<<dim3(unsigned(blocks)), kWarps * 32, 0, stream>>>(a);
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
