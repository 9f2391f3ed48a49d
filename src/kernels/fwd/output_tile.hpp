// Where the epilogue stages O on its way to global memory (epilogue.hpp). With kStaged, each
// consumer warpgroup owns a 64 x d buffer of 16-bit values in shared memory: the accumulator goes
// in with stmatrix and leaves with one TMA store, so the warpgroup starts its next tile as soon as
// the buffer is written instead of draining global stores. The short-key kernels listed in
// manifest.cmake have such a buffer (it fits next to the rings only for d <= 128);
// without kStaged O is stored straight from the registers. kInVRing (the 16-bit kernels with one Q
// buffer and FP8 d = 256, whose rings fill shared memory): the buffer is the ring the P V GEMM
// reads (V, or FP8's V^T), free between a tile's last P V and the next tile's first V load
// (transpose); the producer issues the store (producer.hpp, producer_fp8.hpp).
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/layouts.hpp"
#include "kernels/fwd/v_transpose_layout.hpp"

namespace hopattn::kernels::fwd {

using namespace cute;

// Storage carries the buffer; TmaO is the store's tensor map type. The map is always typed
// bf16: a TMA store copies bits, so fp16 outputs (FP8 kernels choose at run time) share it.
template <int kHeadDim, int kNumWgs, bool kStaged_, bool kInVRing_ = false>
struct OutputTile {
  static constexpr bool kStaged = kStaged_;
  static constexpr bool kInVRing = kInVRing_;
  static_assert(kStaged || !kInVRing, "the V ring only ever holds a staged O");
  static constexpr int kRows = 64;  // rows of one consumer warpgroup
  using Carrier = cutlass::bfloat16_t;
  using TileWg = Shape<Int<kRows>, Int<kHeadDim>>;
  using SmemLayoutWg = decltype(tile_to_shape(k_major_smem_atom<Carrier, kHeadDim>(), TileWg{}));
  // (rows, d, warpgroup): each warpgroup's buffer is a whole SmemLayoutWg, as the TMA box needs.
  using SmemLayout = decltype(tile_to_shape(k_major_smem_atom<Carrier, kHeadDim>(),
                                            Shape<Int<kRows>, Int<kHeadDim>, Int<kNumWgs>>{}));
  static constexpr int kBytes = kRows * kHeadDim * kNumWgs * int(sizeof(Carrier));

  using GmemTensor = typename GmemView<Carrier>::Tensor_;
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, SmemLayoutWg{}, TileWg{}, _1{}));

  // Byte offsets within the buffer in closed form: 128-byte swizzle atoms (64 columns) tiled
  // rows first, one warpgroup after the other (the in-ring epilogue's stmatrix_output_rows).
  using Rows = SwizzledRows<kRows, 128, kRows * kHeadDim * int(sizeof(Carrier))>;
  static_assert(!kInVRing || closed_form_matches<SmemLayout, Rows, int(sizeof(Carrier)), kRows, kHeadDim, kNumWgs>(),
                "the output buffer's closed-form offsets differ from CuTe's layout");

  struct Empty {};
  struct Buffer {
    alignas(1024) cute::array_aligned<Carrier, cute::cosize_v<SmemLayout>> data;
  };
  using Storage = std::conditional_t<kStaged && !kInVRing, Buffer, Empty>;
};

// One warpgroup's 64 x d accumulator (a WGMMA C fragment: warp w holds rows 16w..16w+15; per
// 8-column group a thread holds columns 2t, 2t+1 of rows lane / 4 and lane / 4 + 8) as Out into
// its buffer at smem address `buffer`, 16 columns per stmatrix.x4: matrix m takes rows
// 8 (m % 2) .. +7 and column group m / 2 of the 16, so lane L gives the address of row L % 8 +
// 8 (L / 8 % 2), column 8 (L / 16). Addresses in closed form from one row base and one XOR term,
// and each pair converted right before its store: CuTe's tiled copy computed all 16 addresses as
// 64-bit pointers at once, and with O's 128 registers live the FP8 d256 mainloop spilled.
template <class Tile, class Out, class TensorO>
__device__ __forceinline__ void stmatrix_output_rows(const TensorO& tOrO, uint32_t buffer, int wg_thread) {
  using namespace cute;
  using Rows = typename Tile::Rows;
  Tensor o_rc = make_tensor(tOrO.data(), acc_as_rowcol(tOrO.layout()));  // (2 row halves, 2 x d / 8)
  static_assert(decltype(size<0>(o_rc))::value == 2 && decltype(size<1>(o_rc))::value % 4 == 0,
                "one 64-row WGMMA accumulator per warpgroup, whole 16-column stores");
  constexpr int kStores = decltype(size<1>(o_rc))::value / 4;  // 16 columns each
  const int warp = wg_thread / 32, lane = wg_thread % 32;
  const int row = 16 * warp + lane % 8 + 8 * (lane / 8 % 2);
  const uint32_t row_addr = buffer + Rows::row_base(row);
  const uint32_t col_xor = Rows::row_xor(row) ^ (uint32_t(lane / 16) << 4);
  CUTE_UNROLL
  for (int n = 0; n < kStores; ++n) {
    const uint32_t addr = row_addr + Rows::col_part(32 * n, col_xor);
    const uint32_t r0 = pack_pair<Out>(o_rc(0, 4 * n), o_rc(0, 4 * n + 1));
    const uint32_t r1 = pack_pair<Out>(o_rc(1, 4 * n), o_rc(1, 4 * n + 1));
    const uint32_t r2 = pack_pair<Out>(o_rc(0, 4 * n + 2), o_rc(0, 4 * n + 3));
    const uint32_t r3 = pack_pair<Out>(o_rc(1, 4 * n + 2), o_rc(1, 4 * n + 3));
    stmatrix_x4(addr, r0, r1, r2, r3);
  }
}

}  // namespace hopattn::kernels::fwd
