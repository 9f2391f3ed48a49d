// dQ from a stored dS, both sides: the backward of the wide kernel (d = 192, 256) up to 2048 keys
// by the rule, 4096 when forced (stored_ds_rule.hpp). The main kernel's dQ costs it two things per step: the dQ GEMM (a fifth
// of its tensor work) and a 64 x d FP32 partial (64 KB at d256) added into L2, which bounds the
// d256 kernel (perf-log, sessions 30-31: without the adds, 1.24x at causal 512). Here the main
// kernel's consumers instead store each step's dS^T, 8 KB in the input dtype, with one TMA store
// from the shared buffer the dK GEMM reads anyway (store_ds_tile); then a second kernel
// (bwd_dq_from_ds_kernel) computes, per query block, dQ = softmax_scale * sum_n dS[:, n] K_n over
// the key blocks n that visited it, in FP32 registers, and writes dQ in the input dtype. No
// dq_accum, no postprocess, and the result is deterministic. The cost: dS of every visited
// (query block, key block) pair in the workspace (batch x heads x keys x queries in the input
// dtype, both padded to 64) and a kernel that reads it and K back.
//
// The stored tensor is dS^T as (keys, queries, heads, batch), queries contiguous: each tile is
// the (64 keys, 64 queries) K-major SW128 tile of smem.ds, so that the dQ kernel loads it into
// the same layout and reads it through the same MN-major view as the main kernel's dQ GEMM
// (traits_wide.hpp, SmemLayoutdS), with K as its B operand (kt_chunk_view).
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/bwd/epilogue.hpp"
#include "kernels/bwd/mask.hpp"
#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/consumer.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

// Main kernel, consumer thread 0, once both warpgroups' dS^T of the step is in buffer `buf`
// (after the ds_ready barrier; every writer fenced its stores for the async proxy): the tile
// (n_block, m) of query head `head`. The caller waits for its read before the buffer is refilled.
template <class T>
__device__ __forceinline__ void store_ds_tile(const BwdKernelParams<T>& p, typename T::SharedStorage& smem, int buf,
                                              const TileWork<T>& w, int head, int m) {
  using namespace cute;
  const auto& tma = p.tma_ds;
  Tensor mDs = tma.get_tma_tensor(p.shape_ds);  // (keys, queries, heads, batch)
  Tensor gDs = local_tile(mDs(_, _, head, w.batch), typename T::TileDs{}, make_coord(w.n_block, m));
  Tensor sDs = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutPt{})(_, _, buf);
  auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sDs), group_modes<0, 2>(gDs));
  copy(tma, ts, tg);
  tma_store_arrive();
}

// The key blocks [n_lo, n_hi) that visit query block m (whose tiles stored its dS): one run, as
// key_blocks_before (dq_writer.hpp) says; empty where no key block does (dQ is then zero).
template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ void visiting_key_blocks(const KeyBlockMask<kBlockM, kBlockN>& mask,
                                                             int num_n_blocks, int m, int& n_lo, int& n_hi) {
  n_lo = n_hi = 0;
  for (int n = 0; n < num_n_blocks; ++n) {
    int mb, me;
    mask.m_block_range(n, mb, me);
    if (m >= mb && m < me) {
      if (n_hi == 0) n_lo = n;
      n_hi = n + 1;
    }
  }
}

template <class T>
struct DqFromDsParams {
  using Element = typename T::Element;
  typename T::TmaDsLoad tma_ds;
  typename T::TmaK tma_k;
  typename T::GmemShape shape_ds, shape_k;
  Element* dq{};
  Strides3 dq_stride;
  int seqlen_q{}, seqlen_k{}, window_left{}, window_right{}, head_group{}, num_n_blocks{};
  float softmax_scale{};
};

// Two stages of (dS^T tile, K tile): the P/dS buffers' layout holds the dS^T stages. 80 KB at
// d = 256 (64 KB at d192), so that two CTAs share an SM and one's loads run under the other's
// GEMMs and stores.
template <class T>
struct DqFromDsStorage {
  static constexpr int kStages = T::kPdsBuffers;
  alignas(1024) cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutPt>> ds;
  alignas(1024) cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutK>> k[kStages];
  alignas(8) uint64_t full[kStages], empty[kStages];
};

constexpr int kDqFromDsConsumerThreads = 256;  // two warpgroups, each d/2 columns of dQ
constexpr int kDqFromDsThreads = kDqFromDsConsumerThreads + 32;  // and one load warp

// The load warp's elected thread: dS^T tile (n, m) of the head and K block n of its KV head.
template <class T>
__device__ __forceinline__ void dq_from_ds_loads(const DqFromDsParams<T>& p, DqFromDsStorage<T>& smem, int m,
                                                 int head, int batch, int n_lo, int n_hi) {
  using namespace cute;
  Tensor mDs = p.tma_ds.get_tma_tensor(p.shape_ds);  // (keys, queries, heads, batch)
  Tensor mK = p.tma_k.get_tma_tensor(p.shape_k);     // (keys, d, kv heads, batch)
  Tensor gDs = local_tile(mDs(_, _, head, batch), typename T::TileDs{}, make_coord(_, m));  // (64, 64, n)
  Tensor sDs = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutPt{});   // (64, 64, stage)
  auto ds_views = tma_partition(p.tma_ds, _0{}, Layout<_1>{}, group_modes<0, 2>(sDs), group_modes<0, 2>(gDs));
  Tensor gK = local_tile(mK(_, _, head / p.head_group, batch), typename T::TileKV{}, make_coord(_, _0{}));
  fwd::PackedPipeState<DqFromDsStorage<T>::kStages> pipe;
  for (int n = n_lo; n < n_hi; ++n) {
    const int s = pipe.stage();
    fwd::wait_empty(smem.empty[s], pipe.phase());
    fwd::expect_bytes(smem.full[s], T::kBytesDs + T::kBytesKV);
    copy(p.tma_ds.with(smem.full[s]), get<0>(ds_views)(_, n), get<1>(ds_views)(_, s));
    Tensor sK = make_tensor(make_smem_ptr(smem.k[s].data()), typename T::SmemLayoutK{});
    auto k_views = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK(_, _, n)));
    copy(p.tma_k.with(smem.full[s]), get<0>(k_views), get<1>(k_views));
    pipe.advance();
  }
}

// One CTA per (query block, head, batch entry). Warpgroup w accumulates dQ[:, half w] in the main
// kernel's dQ chunk GEMMs, one key block per stage, one stage's GEMMs in flight while the next
// lands; then the block's dQ times softmax_scale goes out from the registers (store_acc_rows).
template <class T>
__global__ void __launch_bounds__(kDqFromDsThreads, 2) bwd_dq_from_ds_kernel(const __grid_constant__ DqFromDsParams<T> p) {
  using namespace cute;
  using Storage = DqFromDsStorage<T>;
  constexpr int kStages = Storage::kStages, kDqChunks = T::kDqChunks;
  extern __shared__ __align__(1024) char smem_bytes[];
  auto& smem = *reinterpret_cast<Storage*>(smem_bytes);
  const int m = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int warp = warp_idx_uniform();
  if (warp == 0 && cute::elect_one_sync()) {
    for (int s = 0; s < kStages; ++s) {
      fwd::FullBarrier::init(&smem.full[s], 1);
      fwd::EmptyBarrier::init(&smem.empty[s], kDqFromDsConsumerThreads);
    }
    cute::prefetch_tma_descriptor(p.tma_ds.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
  }
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  wait_for_prior_grids();  // the main kernel's dS stores

  const KeyBlockMask<T::kBlockM, T::kBlockN> mask{p.seqlen_q, p.seqlen_k, p.window_left, p.window_right};
  int n_lo, n_hi;
  visiting_key_blocks(mask, p.num_n_blocks, m, n_lo, n_hi);
  if (warp == kDqFromDsConsumerThreads / 32) {
    if (cute::elect_one_sync()) dq_from_ds_loads(p, smem, m, head, batch, n_lo, n_hi);
    return;
  }

  const int tid = threadIdx.x;
  const int wg = warp / 4;
  typename T::MmaDQChunk mma_dq;
  using LayoutDq = typename decltype(partition_fragment_C(std::declval<typename T::MmaDQChunk&>(),
                                                          Shape<Int<T::kBlockM>, Int<T::kDqChunkCols>>{}))::layout_type;
  Tensor acc = make_tensor<float>(append(shape(LayoutDq{}), Int<kDqChunks>{}));  // (frag..., chunk)
  clear(acc);
  warpgroup_fence_operand(acc);
  Tensor tdQsdS = mma_dq.get_thread_slice(0).partition_fragment_A(
      make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdS{}));  // (MMA, q, keys, stage)
  // K^T columns of chunk c of this warpgroup, from stage s's K, as the dQ GEMM's B operand.
  auto kt_chunk = [&](int s, int c) {
    Tensor sKt = make_tensor(make_smem_ptr(smem.k[s].data()), typename T::SmemLayoutKt{});  // (d, keys)
    Tensor chunk = local_tile(sKt, Shape<Int<T::kDqChunkCols>, Int<T::kBlockN>>{}, make_coord(wg * kDqChunks + c, _0{}));
    return mma_dq.get_thread_slice(0).partition_fragment_B(chunk);
  };
  fwd::PackedPipeState<kStages> pipe;
  auto issue = [&] {
    const int s = pipe.stage();
    fwd::wait_full(smem.full[s], pipe.phase());
    auto a = tdQsdS(_, _, _, s);
    for_each(make_int_sequence<kDqChunks>{}, [&](auto c) {
      auto acc_c = acc(_, _, _, c);
      fwd::issue_wgmma<false, false>(mma_dq, a, kt_chunk(s, c), acc_c);
    });
  };
  // Stage n's GEMMs are issued before stage n - 1's are waited for and freed.
  if (n_lo < n_hi) {
    issue();
    for (int n = n_lo + 1; n < n_hi; ++n) {
      const int prev = pipe.stage();
      pipe.advance();
      issue();
      warpgroup_wait<kDqChunks>();
      fwd::release(smem.empty[prev]);
    }
    warpgroup_wait<0>();
  }
  warpgroup_fence_operand(acc);

  const auto coords = mma_dq.get_thread_slice(tid % 128).partition_C(
      make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kDqChunkCols>>{}));
  typename T::Element* base = p.dq + int64_t(batch) * p.dq_stride.batch + int64_t(head) * p.dq_stride.head;
  for_each(make_int_sequence<kDqChunks>{}, [&](auto c) {
    store_acc_rows(acc(_, _, _, c), coords, p.softmax_scale, base + (wg * kDqChunks + c) * T::kDqChunkCols,
                   p.dq_stride.row, m * T::kBlockM, p.seqlen_q);
  });
}

}  // namespace hopattn::kernels::bwd
