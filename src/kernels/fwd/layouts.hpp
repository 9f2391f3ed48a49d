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

// A (rows, head_dim, heads, batch) global tensor as the TMA descriptors of every kernel see it.
template <class Element>
struct GmemView {
  using Shape_ = Shape<int32_t, int32_t, int32_t, int32_t>;
  using Stride_ = Stride<int64_t, _1, int64_t, int64_t>;
  using Tensor_ = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), Shape_{}, Stride_{}));
};

}  // namespace hopattn::kernels::fwd
