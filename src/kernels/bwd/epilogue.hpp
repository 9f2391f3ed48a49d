// Backward epilogue: a tile's dK (times softmax_scale) and dV, straight from the accumulator
// registers to global memory in the input dtype, rows past seqlen_k left alone.
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

template <class T, class TAcc, class TC>
__device__ __forceinline__ void store_kv_grads(const BwdKernelParams<T>& p, const TAcc& dk, const TAcc& dv,
                                               const TC& coords, const TileWork<T>& w) {
  const bool varlen = p.cu_seqlens_k != nullptr;
  const int64_t k0 = w.si.k_offset;
  typename T::Element* dk_base = head_rows(p.dk, p.dk_stride, varlen, k0, w.batch, w.kv_head);
  typename T::Element* dv_base = head_rows(p.dv, p.dv_stride, varlen, k0, w.batch, w.kv_head);
  const int row0 = w.n_block * T::kBlockN;
  store_acc_rows(dk, coords, p.softmax_scale, dk_base, p.dk_stride.row, row0, w.si.seqlen_k);
  store_acc_rows(dv, coords, 1.f, dv_base, p.dv_stride.row, row0, w.si.seqlen_k);
}

}  // namespace hopattn::kernels::bwd
