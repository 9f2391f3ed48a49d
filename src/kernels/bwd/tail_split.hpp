// Tail splitting: the key tiles of the main kernel's last, partly filled wave go out as two work
// items each, the halves of the tile's query walk (tile_work, schedule.hpp; how many tiles:
// tail_split_rule.hpp). Each half accumulates dK and dV over its own query blocks; the dQ adds
// need nothing new (each query block is still added once per key tile). At the end each half
// adds its FP32 dK and dV into the tile's slot of the workspace (split_partials, row-major, zeroed
// by the launch's memset) instead of storing them, and a small kernel after the main kernel
// (bwd_split_tiles_kernel) writes the sums out in the input dtype. Neither half waits for the
// other: a handshake at the tile's end (a ticket, and a wait for the other half's partials) cost
// d64/d128 a spilled register through the steps, for a few microseconds at most.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

// FP32 slot of split tile `split`: dK (kBlockN x kHeadDim, row-major), then dV.
template <class T>
__host__ __device__ __forceinline__ constexpr int64_t split_slot_floats() {
  return 2 * int64_t(T::kBlockN) * T::kHeadDim;
}

__device__ __forceinline__ void red_add_pair(float* dst, float a, float b) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// acc (a WGMMA accumulator fragment, coords its (row, col) tensor) added into slot[row * kHeadDim +
// col], column pairs at a time. As in store_acc_rows, a thread's k-th pair of a row is 8 * k columns
// past its first: the offsets are immediates from one address per row (column coordinates taken
// per pair spilled 100 B at d256).
template <class T, class TAcc, class TC>
__device__ __forceinline__ void red_add_acc(const TAcc& acc, const TC& coords, float* slot) {
  using namespace cute;
  Tensor a_rc = make_tensor(acc.data(), acc_as_rowcol(acc.layout()));
  Tensor c_rc = make_tensor(coords.data(), acc_as_rowcol(coords.layout()));
  CUTE_UNROLL
  for (int i = 0; i < size<0>(a_rc); ++i) {
    float* row = slot + get<0>(c_rc(i, 0)) * T::kHeadDim + get<1>(c_rc(i, 0));
    CUTE_UNROLL
    for (int k = 0; k < size<1>(a_rc) / 2; ++k) red_add_pair(row + 8 * k, a_rc(i, 2 * k), a_rc(i, 2 * k + 1));
  }
}

// One half's dK and dV of split tile `split` into its slot.
template <class T, class TAcc, class MmaDkv>
__device__ __forceinline__ void add_split_tile_grads(const BwdKernelParams<T>& p, int split, const TAcc& dk,
                                                     const TAcc& dv, const MmaDkv& mma_dkv, int tid) {
  const auto coords = mma_dkv.get_thread_slice(tid).partition_C(
      cute::make_identity_tensor(cute::Shape<cute::Int<T::kBlockN>, cute::Int<T::kHeadDim>>{}));
  float* slot = p.split_partials + split * split_slot_floats<T>();
  red_add_acc<T>(dk, coords, slot);
  red_add_acc<T>(dv, coords, slot + T::kBlockN * T::kHeadDim);
}

// After the main kernel (PDL): CTA (s, g) writes split tile s's dK (g = 0, times softmax_scale) or
// dV (g = 1) from its slot, 8 columns (16 bytes) a thread at a time, rows past seqlen_k left alone.
template <class T>
__global__ void __launch_bounds__(256) bwd_split_tiles_kernel(const __grid_constant__ BwdKernelParams<T> p) {
  using Element = typename T::Element;
  wait_for_prior_grids();  // every half's adds have landed
  allow_dependent_launch();
  const fwd::TileScheduler sched{p.num_n_blocks, p.nheads_k, p.num_items, p.heads_per_l2_section,
                                 false,          nullptr,    p.tile_divisors};
  const int split = blockIdx.x, grad = blockIdx.y;
  const TileWork<T> w = tile_work<T>(p, sched, p.num_whole_tiles + 2 * split);
  const int rows = min(T::kBlockN, w.si.seqlen_k - w.n_block * T::kBlockN);  // <= 0: no keys, nothing to write
  const bool varlen = p.cu_seqlens_k != nullptr;
  Element* base = grad == 0 ? head_rows(p.dk, p.dk_stride, varlen, w.si.k_offset, w.batch, w.kv_head)
                            : head_rows(p.dv, p.dv_stride, varlen, w.si.k_offset, w.batch, w.kv_head);
  const int64_t row_stride = grad == 0 ? p.dk_stride.row : p.dv_stride.row;
  const float scale = grad == 0 ? p.softmax_scale : 1.f;
  const float* slot = p.split_partials + split * split_slot_floats<T>() + grad * T::kBlockN * T::kHeadDim;
  constexpr int kGroups = T::kHeadDim / 8;  // 8-column groups per row
  for (int i = threadIdx.x; i < rows * kGroups; i += blockDim.x) {
    const int r = i / kGroups, c = i % kGroups * 8;
    const float4 a = *reinterpret_cast<const float4*>(slot + r * T::kHeadDim + c);
    const float4 b = *reinterpret_cast<const float4*>(slot + r * T::kHeadDim + c + 4);
    uint4 out;
    out.x = pack_pair<Element>(a.x * scale, a.y * scale);
    out.y = pack_pair<Element>(a.z * scale, a.w * scale);
    out.z = pack_pair<Element>(b.x * scale, b.y * scale);
    out.w = pack_pair<Element>(b.z * scale, b.w * scale);
    *reinterpret_cast<uint4*>(base + int64_t(w.n_block * T::kBlockN + r) * row_stride + c) = out;
  }
}

}  // namespace hopattn::kernels::bwd
