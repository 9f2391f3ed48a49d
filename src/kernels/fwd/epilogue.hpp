// Epilogue: O = O / rowsum and LSE = max + log(rowsum), written straight from the accumulator
// registers (each thread owns pairs of adjacent columns: 4-byte stores) with row bounds checks.
// Rows that saw no key get O = 0 and LSE = -inf. The output dtype is the input's for 16-bit
// inputs; FP8 inputs write bf16 or fp16, chosen at run time (FwdKernelParams::out_fp16).
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
  // o_mult: a factor every output row takes (the FP8 V descale; 1 otherwise).
  template <class TensorO, class TensorC, class Softmax>
  __device__ __forceinline__ static void store(const FwdKernelParams<T>& p, TensorO& tOrO,
                                               const TensorC& tOcO, Softmax& softmax, float o_mult,
                                               const TileCoord& c, const SeqInfo& si, int tid) {
    using namespace cute;
    constexpr int kRows = Softmax::kRowsPerThread;
    float out_scale[kRows], lse[kRows];
    softmax.finalize(out_scale, lse);

    Tensor o_rc = make_tensor(tOrO.data(), acc_as_rowcol(tOrO.layout()));
    CUTE_UNROLL
    for (int i = 0; i < size<0>(o_rc); ++i) {
      const float f = T::kFp8 ? out_scale[i] * o_mult : out_scale[i];
      CUTE_UNROLL
      for (int j = 0; j < size<1>(o_rc); ++j) o_rc(i, j) *= f;
    }
    const int row0 = c.m_block * T::kBlockM;
    if constexpr (T::kFp8) {
      if (p.out_fp16) write_rows<cutlass::half_t>(p, tOrO, tOcO, c, si, row0);
      else write_rows<cutlass::bfloat16_t>(p, tOrO, tOcO, c, si, row0);
    } else {
      write_rows<typename T::Element>(p, tOrO, tOcO, c, si, row0);
    }
    const bool varlen = p.cu_seqlens_q != nullptr;
    if (p.lse != nullptr && tid % 4 == 0) {
      Tensor c_rc = make_tensor(tOcO.data(), acc_as_rowcol(tOcO.layout()));
      float* lse_base = p.lse + (varlen ? si.q_offset : c.batch * p.lse_batch_stride) + c.head * p.lse_head_stride;
      CUTE_UNROLL
      for (int i = 0; i < kRows; ++i) {
        const int row = row0 + get<0>(c_rc(i, 0));
        if (row < si.seqlen_q) lse_base[row] = lse[i];
      }
    }
  }

  template <class Out, class TensorO, class TensorC>
  __device__ __forceinline__ static void write_rows(const FwdKernelParams<T>& p, TensorO& tOrO, const TensorC& tOcO,
                                                    const TileCoord& c, const SeqInfo& si, int row0) {
    using namespace cute;
    Tensor out = convert_fragment<Out>(tOrO);
    Tensor out_rc = make_tensor(out.data(), acc_as_rowcol(out.layout()));
    Tensor c_rc = make_tensor(tOcO.data(), acc_as_rowcol(tOcO.layout()));
    const bool varlen = p.cu_seqlens_q != nullptr;
    Out* base = static_cast<Out*>(p.out) +
                (varlen ? int64_t(si.q_offset) * p.out_row_stride : c.batch * p.out_batch_stride) +
                c.head * p.out_head_stride;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(out_rc); ++i) {
      const int row = row0 + get<0>(c_rc(i, 0));
      if (row >= si.seqlen_q) continue;
      Out* dst = base + int64_t(row) * p.out_row_stride;
      CUTE_UNROLL
      for (int j = 0; j < size<1>(out_rc); j += 2) {
        const int col = get<1>(c_rc(i, j));
        __nv_bfloat162 pair;  // any 4-byte carrier of two 16-bit values
        reinterpret_cast<Out*>(&pair)[0] = out_rc(i, j);
        reinterpret_cast<Out*>(&pair)[1] = out_rc(i, j + 1);
        *reinterpret_cast<__nv_bfloat162*>(dst + col) = pair;
      }
    }
  }
};

}  // namespace hopattn::kernels::fwd
