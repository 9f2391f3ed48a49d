// Where the epilogue stages O on its way to global memory (epilogue.hpp). With kStaged, each
// consumer warpgroup owns a 64 x d buffer of 16-bit values in shared memory: the accumulator goes
// in with stmatrix and leaves with one TMA store, so the warpgroup starts its next tile as soon as
// the buffer is written instead of draining 4-byte global stores. Which kernels stage O is listed
// in manifest.cmake (a buffer fits next to the rings only for d <= 128 at the current tiles);
// without kStaged O is stored straight from the registers.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "kernels/fwd/layouts.hpp"

namespace hopattn::kernels::fwd {

using namespace cute;

// Storage carries the buffer; TmaO is the store's tensor map type. The map is always typed
// bf16: a TMA store copies bits, so fp16 outputs (FP8 kernels choose at run time) share it.
template <int kHeadDim, int kNumWgs, bool kStaged_>
struct OutputTile {
  static constexpr bool kStaged = kStaged_;
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

  struct Empty {};
  struct Buffer {
    alignas(1024) cute::array_aligned<Carrier, cute::cosize_v<SmemLayout>> data;
  };
  using Storage = std::conditional_t<kStaged, Buffer, Empty>;
};

}  // namespace hopattn::kernels::fwd
