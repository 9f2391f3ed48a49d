// Backward epilogue: a tile's dK (times softmax_scale) and dV, straight from the accumulator
// registers to global memory in the input dtype (pairs of adjacent columns: 4-byte stores), rows
// past seqlen_k left alone.
#pragma once

#include <cuda_bf16.h>
#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

template <class Element, class TAcc, class TC>
__device__ __forceinline__ void store_acc_rows(const TAcc& acc, const TC& coords, float scale, Element* base,
                                               int64_t row_stride, int row0, int row_limit) {
  using namespace cute;
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const int row = row0 + get<0>(coords(i));
    if (row >= row_limit) continue;
    __nv_bfloat162 pair;  // any 4-byte carrier of two 16-bit values
    reinterpret_cast<Element*>(&pair)[0] = Element(acc(i) * scale);
    reinterpret_cast<Element*>(&pair)[1] = Element(acc(i + 1) * scale);
    *reinterpret_cast<__nv_bfloat162*>(base + row * row_stride + get<1>(coords(i))) = pair;
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
