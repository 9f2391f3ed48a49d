// Backward postprocessing: dQ = softmax_scale * dq_accum, converted to the input dtype; zero for
// a block that no key block wrote, unless the preprocess cleared dq_accum (dq_writer.hpp), in one
// of two forms: a CTA per query block after the main kernel, or a few CTAs converting while it
// runs (below). dq_accum holds each block
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

// Rows are padded by 16 bytes in the staging tile: the pair stores of a warp (8 rows x 4 threads)
// then hit 32 distinct banks.
template <class T>
constexpr int kPostPitch = T::kHeadDim + 8;

// Converts query block m_block of (head, batch) into dQ. `tile` is the CTA's staging buffer
// (kBlockM x kPostPitch 16-bit values); the CTA's threads all call this. `fresh`: read dq_accum
// and the block's state around the L1 cache, for the concurrent form, whose reads follow the main
// kernel's writes while it still runs.
template <class T>
__device__ __forceinline__ void convert_dq_block(const BwdPostParams<typename T::Element>& p, int m_block, int head,
                                                 int batch, typename T::Element* tile, bool fresh) {
  using namespace cute;
  using Element = typename T::Element;
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
  // (the accumulator order gives each thread 4-byte pairs scattered over rows).
  constexpr int kPitch = kPostPitch<T>;
  // The block's state word, then all of its loads (skipped for a block nobody wrote). Loading
  // unconditionally and selecting after measured slower (more registers: perf-log, session 24).
  const int* state = p.dq_block_state + row_base / T::kBlockM;
  const bool written = p.dq_accum_cleared || (fresh ? __ldcg(state) : *state) != 0;
  float4 v[T::kDqPerThread / 4];
  CUTE_UNROLL
  for (int i = 0; i < T::kDqPerThread / 4; ++i) {
    const float4* src = block + i * T::kNumConsumerThreads + tid;
    v[i] = written ? (fresh ? __ldcg(src) : *src) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
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

// One CTA per (query block, head, batch entry), after the main kernel.
template <class T>
__global__ void __launch_bounds__(T::kNumConsumerThreads) bwd_postprocess_kernel(const __grid_constant__ BwdPostParams<typename T::Element> p) {
  // Launched with PDL (launch.hpp): dq_accum is complete only once the main kernel is. Every
  // CTA waits, even one with no rows, so that this grid never completes before that kernel.
  wait_for_prior_grids();
  __shared__ alignas(16) uint16_t tile_bits[T::kBlockM * kPostPitch<T>];
  convert_dq_block<T>(p, blockIdx.x, blockIdx.y, blockIdx.z, reinterpret_cast<typename T::Element*>(tile_bits),
                      /*fresh=*/false);
}

// The concurrent form (launch.hpp, concurrent_dq_convert_sms): launched with PDL while the main
// kernel, which leaves a few SMs free, still runs; the CTAs that fit there convert each (batch
// entry, KV head) pair's dQ as soon as the pair's last key tile has landed its adds
// (p.pair_tiles_done, counted by the dQ writer), from L2 where they were just added, instead of
// reading all of dq_accum back from memory after the kernel. Work items (pair, query head of the
// group, query block) are claimed in pair order, the order in which the tile scheduler finishes
// pairs, so the CTAs that start only when the main kernel's CTAs leave take what is left.
template <class T>
__global__ void __launch_bounds__(T::kNumConsumerThreads)
    bwd_postprocess_concurrent_kernel(const __grid_constant__ BwdPostParams<typename T::Element> p) {
  __shared__ alignas(16) uint16_t tile_bits[T::kBlockM * kPostPitch<T>];
  __shared__ int claimed[2];  // the item claimed for the next turn, by parity of the turn
  const int items_per_pair = p.head_group * p.num_m_blocks;
  const int num_items = p.batch * p.nheads_k * items_per_pair;
  if (threadIdx.x == 0) claimed[0] = atomicAdd(p.item_counter, 1);
  __syncthreads();
  for (int turn = 0;; ++turn) {
    const int item = claimed[turn % 2];
    if (item >= num_items) break;
    const int pair = item / items_per_pair, in_pair = item % items_per_pair;
    const int g = in_pair / p.num_m_blocks, m_block = in_pair % p.num_m_blocks;
    const int batch = pair / p.nheads_k, kv_head = pair % p.nheads_k;
    if (threadIdx.x == 0) {
      claimed[(turn + 1) % 2] = atomicAdd(p.item_counter, 1);  // its round trip overlaps the wait below
      // Every tile of the pair counts itself once its dQ writes have landed (dq_writer.hpp).
      while (load_acquire_gpu(p.pair_tiles_done + pair) < p.tiles_per_pair) __nanosleep(128);
    }
    __syncthreads();  // the acquire above orders every thread's reads of the pair's dq_accum
    convert_dq_block<T>(p, m_block, kv_head * p.head_group + g, batch, reinterpret_cast<typename T::Element*>(tile_bits),
                        /*fresh=*/true);
    __syncthreads();  // the staging tile and claimed[turn % 2] are free again
  }
  // This grid must not complete before the main kernel: work queued after it on the stream may
  // read dK and dV.
  wait_for_prior_grids();
}

}  // namespace hopattn::kernels::bwd
