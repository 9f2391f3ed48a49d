// Backward postprocessing, one CTA of kNumConsumerThreads per (query block, head, batch entry):
// dQ = softmax_scale * dq_accum, converted to the input dtype; zero for a block that no key
// block wrote, unless the preprocess cleared dq_accum (dq_writer.hpp). dq_accum holds each block
// in the register order of the dQ GEMM (consumer thread t's element i at float4 slot (i / 4) *
// threads + t), so this kernel asks the same tiled MMA which (row, col) each of its values is,
// and writes rows through shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

template <class T>
__global__ void __launch_bounds__(T::kNumConsumerThreads) bwd_postprocess_kernel(const __grid_constant__ BwdPostParams<typename T::Element> p) {
  using namespace cute;
  using Element = typename T::Element;
  // Launched with PDL (launch.hpp): dq_accum is complete only once the main kernel is. Every
  // CTA waits, even one with no rows, so that this grid never completes before that kernel.
  wait_for_prior_grids();
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const fwd::SeqInfo si = fwd::seq_info(p, batch);
  if (m_block * T::kBlockM >= si.seqlen_q) return;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t row_base = head * p.rows_per_head +
                           padded_row_start<T::kBlockM>(varlen, batch, si.q_offset, p.seqlen_q_rounded) +
                           m_block * T::kBlockM;
  const float4* block = reinterpret_cast<const float4*>(p.dq_accum + row_base * T::kHeadDim);

  const int tid = threadIdx.x;
  typename T::MmaDQ mma;
  Tensor coords = mma.get_thread_slice(tid).partition_C(make_identity_tensor(typename T::DqTile{}));
  static_assert(decltype(size(coords))::value == T::kDqPerThread);
  Element* dq = head_rows(p.dq, p.dq_stride, varlen, si.q_offset, batch, head);

  // The block goes through shared memory so that global stores are whole 16-byte row pieces
  // (the accumulator order gives each thread 4-byte pairs scattered over rows). Rows are padded
  // by 16 bytes: the pair stores of a warp (8 rows x 4 threads) then hit 32 distinct banks.
  constexpr int kPitch = T::kHeadDim + 8;
  __shared__ alignas(16) uint16_t tile_bits[T::kBlockM * kPitch];
  Element* tile = reinterpret_cast<Element*>(tile_bits);
  // The block's state word, then all of its loads (skipped for a block nobody wrote). Loading
  // unconditionally and selecting after measured slower (more registers: perf-log, session 24).
  const bool written = p.dq_accum_cleared || p.dq_block_state[row_base / T::kBlockM] != 0;
  float4 v[T::kDqPerThread / 4];
  CUTE_UNROLL
  for (int i = 0; i < T::kDqPerThread / 4; ++i)
    v[i] = written ? block[i * T::kNumConsumerThreads + tid] : make_float4(0.f, 0.f, 0.f, 0.f);
  if constexpr (T::kDqTransposed) {  // coordinates are (d, query): pairs are two rows of dQ
    CUTE_UNROLL
    for (int i = 0; i < T::kDqPerThread; ++i) {
      const float val = reinterpret_cast<const float*>(&v[i / 4])[i % 4];
      tile[get<1>(coords(i)) * kPitch + get<0>(coords(i))] = Element(val * p.softmax_scale);
    }
  } else {
    CUTE_UNROLL
    for (int i = 0; i < T::kDqPerThread; i += 2) {  // accumulator pairs are adjacent columns of one row
      const float* vals = reinterpret_cast<const float*>(&v[i / 4]) + i % 4;
      __nv_bfloat162 pair;  // any 4-byte carrier of two 16-bit values
      reinterpret_cast<Element*>(&pair)[0] = Element(vals[0] * p.softmax_scale);
      reinterpret_cast<Element*>(&pair)[1] = Element(vals[1] * p.softmax_scale);
      *reinterpret_cast<__nv_bfloat162*>(&tile[get<0>(coords(i)) * kPitch + get<1>(coords(i))]) = pair;
    }
  }
  __syncthreads();
  constexpr int kVecsPerRow = T::kHeadDim / 8;
  constexpr int kVecsPerThread = T::kBlockM * kVecsPerRow / T::kNumConsumerThreads;
  static_assert(T::kBlockM * kVecsPerRow % T::kNumConsumerThreads == 0);
  CUTE_UNROLL
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int vec = i * T::kNumConsumerThreads + tid;
    const int r = vec / kVecsPerRow, c = vec % kVecsPerRow * 8;
    const int row = m_block * T::kBlockM + r;
    if (row < si.seqlen_q)
      *reinterpret_cast<uint4*>(dq + row * p.dq_stride.row + c) = *reinterpret_cast<const uint4*>(&tile[r * kPitch + c]);
  }
}

}  // namespace hopattn::kernels::bwd
