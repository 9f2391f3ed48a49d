// Backward epilogue: a tile's dK (times softmax_scale) and dV in the input dtype, rows past
// seqlen_k left alone. Staged (d <= 128, T::kStagedGrads): each warpgroup's 64 rows through
// smem.grad and a TMA store (store_rows_staged). Otherwise, and for rows a TMA box would carry
// past their sequence, straight from the accumulator registers (store_acc_rows):
//
// 16-byte stores after a transpose within each quad (quad_transpose, as the forward's register
// epilogue): each thread stores whole 8-column groups of its two rows. The earlier 4-byte stores
// (one per column pair, each with its own 64-bit address) took 6-8 us per tile at d128:
// every store's address registers were reused by the next one, which then waited for the
// congested store pipe to read them, so the stores ran one at a time (ncu, perf-log session 19).
// Here each row's address is computed once and the stores take immediate offsets from it.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/staged_store.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

// acc: a WGMMA accumulator fragment of one warpgroup's rows (coords: its (row, col) tensor);
// writes acc * scale to base[(row0 + row) * row_stride + col] for rows below row_limit. Rows
// are 16-byte aligned (the API validates dk, dv for TMA). The shuffles run for every row, so
// that all lanes of a quad take part; only the stores are predicated.
template <class Element, class TAcc, class TC>
__device__ __forceinline__ void store_acc_rows(const TAcc& acc, const TC& coords, float scale, Element* base,
                                               int64_t row_stride, int row0, int row_limit) {
  using namespace cute;
  Tensor a_rc = make_tensor(acc.data(), acc_as_rowcol(acc.layout()));
  Tensor c_rc = make_tensor(coords.data(), acc_as_rowcol(coords.layout()));
  constexpr int kGroups = decltype(size<1>(a_rc))::value / 2;  // 8-column groups per row
  static_assert(kGroups % 4 == 0, "the quad transpose takes 4 groups at a time");
  const int t = lane_id_fresh() % 4;
  CUTE_UNROLL
  for (int i = 0; i < size<0>(a_rc); ++i) {
    const int row = row0 + get<0>(c_rc(i, 0));
    // Column of this thread's first pair, minus its quad offset, plus group t's: the first
    // column of group t; group g0 + t is 8 * g0 further.
    Element* dst = base + int64_t(row) * row_stride + (get<1>(c_rc(i, 0)) - 2 * t + 8 * t);
    const bool in_rows = row < row_limit;
    CUTE_UNROLL
    for (int g0 = 0; g0 < kGroups; g0 += 4) {
      uint32_t v[4];  // v[k]: this thread's 2 columns of group g0 + k
      CUTE_UNROLL
      for (int k = 0; k < 4; ++k)
        v[k] = pack_pair<Element>(a_rc(i, 2 * (g0 + k)) * scale, a_rc(i, 2 * (g0 + k) + 1) * scale);
      const uint4 w = quad_transpose(v, t);
      if (in_rows) *reinterpret_cast<uint4*>(dst + 8 * g0) = w;
    }
  }
}

constexpr int kGradBarrierBase = 4;  // named barriers 4 + w: warpgroup w's staged dK/dV (1..3: consumer_common.hpp)

// Warpgroup wg's 64 rows of a tile's dK or dV (acc times scale) through its half of smem.grad
// and one TMA store issued by its thread 0 (store_wg_tile_staged, common/staged_store.hpp, as
// the forward's O).
template <class T, class TAcc, class Tma>
__device__ __forceinline__ void store_rows_staged(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                  TAcc& acc, float scale, const Tma& tma, const TileWork<T>& w,
                                                  int wg, int wg_tid) {
  using namespace cute;
  Tensor sGrad = make_tensor(make_smem_ptr(smem.grad.data()), typename T::SmemLayoutGrad{})(_, _, wg);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) acc(i) *= scale;
  store_wg_tile_staged<typename T::Element, typename T::MmaDKV>(acc, sGrad, kGradBarrierBase + wg, wg_tid, [&] {
    const bool varlen = p.cu_seqlens_k != nullptr;
    Tensor mG = tma.get_tma_tensor(p.shape_k);  // (rows, d, kv heads, batch)
    Tensor gG = local_tile(domain_offset(make_coord(w.si.k_offset, _0{}), mG(_, _, w.kv_head, varlen ? 0 : w.batch)),
                           typename T::GradTileWg{}, make_coord(w.n_block * T::kNumConsumerWgs + wg, _0{}));
    auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sGrad), group_modes<0, 2>(gG));
    copy(tma, ts, tg);
  });
}

// dK (times softmax_scale) and dV of a finished tile. Staged through shared memory and TMA
// (T::kStagedGrads) unless the warpgroup's 64 rows would cross into the next varlen sequence
// (TMA clips rows only at the tensor's end); otherwise from the registers.
template <class T, class TAcc, class MmaDkv>
__device__ __forceinline__ void store_kv_grads(const BwdKernelParams<T>& p, typename T::SharedStorage& smem, TAcc& dk,
                                               TAcc& dv, const MmaDkv& mma_dkv, const TileWork<T>& w, int tid) {
  if constexpr (T::kStagedGrads) {
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform
    const int wg_row0 = w.n_block * T::kBlockN + wg * 64;
    const bool ends_at_tensor = p.cu_seqlens_k == nullptr && w.si.seqlen_k == p.seqlen_k;
    if (box_fits_sequence(wg_row0, 64, w.si.seqlen_k, ends_at_tensor)) {
      store_rows_staged(p, smem, dk, p.softmax_scale, p.tma_dk, w, wg, tid % 128);
      store_rows_staged(p, smem, dv, 1.f, p.tma_dv, w, wg, tid % 128);
      return;
    }
  }
  const bool varlen = p.cu_seqlens_k != nullptr;
  const int64_t k0 = w.si.k_offset;
  typename T::Element* dk_base = head_rows(p.dk, p.dk_stride, varlen, k0, w.batch, w.kv_head);
  typename T::Element* dv_base = head_rows(p.dv, p.dv_stride, varlen, k0, w.batch, w.kv_head);
  const int row0 = w.n_block * T::kBlockN;
  // The accumulators' (row, col) coordinates, built here in the fallback rather than held
  // through every tile's steps, where registers are short.
  const auto coords = mma_dkv.get_thread_slice(tid).partition_C(
      cute::make_identity_tensor(cute::Shape<cute::Int<T::kBlockN>, cute::Int<T::kHeadDim>>{}));
  store_acc_rows(dk, coords, p.softmax_scale, dk_base, p.dk_stride.row, row0, w.si.seqlen_k);
  store_acc_rows(dv, coords, 1.f, dv_base, p.dv_stride.row, row0, w.si.seqlen_k);
}

}  // namespace hopattn::kernels::bwd
