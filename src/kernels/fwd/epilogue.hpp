// Epilogue: O = O / rowsum and LSE = max + log(rowsum), written straight from the accumulator
// registers (each thread owns pairs of adjacent columns: 4-byte stores) with row bounds checks.
// Rows that saw no key get O = 0 and LSE = -inf.
#pragma once

#include <cuda_bf16.h>
#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/softmax.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

template <class T>
struct Epilogue {
  using Element = typename T::Element;

  template <class TensorO, class TensorC, class Softmax>
  __device__ __forceinline__ static void store(const FwdKernelParams<T>& p, TensorO& tOrO,
                                               const TensorC& tOcO, Softmax& softmax,
                                               const TileCoord& c, const SeqInfo& si, int tid) {
    using namespace cute;
    constexpr int kRows = Softmax::kRowsPerThread;
    float out_scale[kRows], lse[kRows];
    softmax.finalize(out_scale, lse);

    Tensor o_rc = make_tensor(tOrO.data(), acc_as_rowcol(tOrO.layout()));
    CUTE_UNROLL
    for (int i = 0; i < size<0>(o_rc); ++i) {
      CUTE_UNROLL
      for (int j = 0; j < size<1>(o_rc); ++j) o_rc(i, j) *= out_scale[i];
    }
    Tensor out = convert_fragment<Element>(tOrO);
    Tensor out_rc = make_tensor(out.data(), acc_as_rowcol(out.layout()));
    Tensor c_rc = make_tensor(tOcO.data(), acc_as_rowcol(tOcO.layout()));

    const bool varlen = p.cu_seqlens_q != nullptr;
    Element* base = p.out + (varlen ? int64_t(si.q_offset) * p.out_row_stride : c.batch * p.out_batch_stride) +
                    c.head * p.out_head_stride;
    const int row0 = c.m_block * T::kBlockM;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(out_rc); ++i) {
      const int row = row0 + get<0>(c_rc(i, 0));
      if (row >= si.seqlen_q) continue;
      Element* dst = base + int64_t(row) * p.out_row_stride;
      CUTE_UNROLL
      for (int j = 0; j < size<1>(out_rc); j += 2) {
        const int col = get<1>(c_rc(i, j));
        __nv_bfloat162 pair;  // any 4-byte carrier of two 16-bit values
        reinterpret_cast<Element*>(&pair)[0] = out_rc(i, j);
        reinterpret_cast<Element*>(&pair)[1] = out_rc(i, j + 1);
        *reinterpret_cast<__nv_bfloat162*>(dst + col) = pair;
      }
    }
    if (p.lse != nullptr && tid % 4 == 0) {
      float* lse_base = p.lse + (varlen ? si.q_offset : c.batch * p.lse_batch_stride) + c.head * p.lse_head_stride;
      CUTE_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const int row = row0 + get<0>(c_rc(i, 0));
        if (row < si.seqlen_q) lse_base[row] = lse[i];
      }
    }
  }
};

}  // namespace hopattn::kernels::fwd
