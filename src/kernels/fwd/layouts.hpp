// Layout building blocks shared by the forward and backward traits: the shared-memory swizzle
// atom of a K-major WGMMA operand, and the global-tensor type every TMA descriptor is built from.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace hopattn::kernels::fwd {

using namespace cute;

// The widest swizzle whose atom divides the K extent of a K-major operand tile.
template <class Element, int kKExtent>
constexpr auto k_major_smem_atom() {
  constexpr int kBytes = kKExtent * int(sizeof(Element));
  if constexpr (kBytes % 128 == 0) return GMMA::Layout_K_SW128_Atom<Element>{};
  else if constexpr (kBytes % 64 == 0) return GMMA::Layout_K_SW64_Atom<Element>{};
  else if constexpr (kBytes % 32 == 0) return GMMA::Layout_K_SW32_Atom<Element>{};
  else return GMMA::Layout_K_INTER_Atom<Element>{};
}

// Byte offset of an element (row, col, stage) of a swizzled K-major layout of kElemBytes-byte
// elements, as CuTe addresses it: a GMMA atom's swizzle acts on the byte address (buffers are
// 1024-byte aligned, so swizzling the offset is the same). Only for the compile-time checks below.
template <class Layout, int kElemBytes>
constexpr uint32_t cute_byte_offset(int row, int col, int stage) {
  return uint32_t(get_swizzle_portion(Layout{})(kElemBytes * get_nonswizzle_portion(Layout{})(row, col, stage)));
}

// Whether a closed form of those offsets (Closed::offset(row, byte column, stage): SwizzledRows,
// v_transpose_layout.hpp) agrees with CuTe's layout, on a sample of rows and every 16-byte chunk
// (constexpr evaluation has a step limit).
template <class Layout, class Closed, int kElemBytes, int kRows, int kCols, int kStages>
constexpr bool closed_form_matches() {
  for (int row = 0; row < kRows; row += 3)
    for (int col = 0; col < kCols; col += 16 / kElemBytes)
      for (int stage = 0; stage < kStages; ++stage)
        if (cute_byte_offset<Layout, kElemBytes>(row, col, stage) != Closed::offset(row, kElemBytes * col, stage))
          return false;
  return true;
}

// A (rows, head_dim, heads, batch) global tensor as the TMA descriptors of every kernel see it.
template <class Element>
struct GmemView {
  using Shape_ = Shape<int32_t, int32_t, int32_t, int32_t>;
  using Stride_ = Stride<int64_t, _1, int64_t, int64_t>;
  using Tensor_ = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), Shape_{}, Stride_{}));
};

}  // namespace hopattn::kernels::fwd
