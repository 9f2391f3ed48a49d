// Epilogue: O = O / rowsum and LSE = max + log(rowsum). Rows that saw no key get O = 0 and
// LSE = -inf. The output dtype is the input's for 16-bit inputs; FP8 inputs write bf16 or fp16,
// chosen at run time (FwdKernelParams::out_fp16).
// Two ways out for O, per consumer warpgroup (64 rows):
//  * staged (T::Output::kStaged, output_tile.hpp): stmatrix into the warpgroup's shared buffer,
//    then one thread issues a TMA store and the warpgroup moves on to its next tile. Used unless
//    a varlen slice would cross into the next sequence (TMA clips only at the tensor's end).
//  * register stores (write_rows): 16-byte stores after a transpose within each quad (two consumer
//    warpgroups), with row bounds checks.
// Named barrier kEpilogueBarrierBase + w (128 threads, warpgroup w) is passed twice per staged
// store: "the previous store has read the buffer" and "the buffer is written".
#pragma once

#include <cuda_bf16.h>
#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/common/staged_store.hpp"
#include "kernels/fwd/output_tile.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/softmax.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

constexpr int kEpilogueBarrierBase = 4;  // 4 + w; 1..3 are the pingpong tokens (consumer.hpp)

template <class T>
struct Epilogue {
  using Output = typename T::Output;
  static constexpr int kWgRows = Output::kRows;
  // o_mult: a factor every output row takes (the FP8 V descale; 1 otherwise).
  template <class TensorO, class TensorC, class Softmax>
  __device__ __forceinline__ static void store(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                               TensorO& tOrO, const TensorC& tOcO, Softmax& softmax,
                                               float o_mult, const TileCoord& c, const SeqInfo& si, int tid) {
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
      if (p.out_fp16) write_output<cutlass::half_t>(p, smem, tOrO, tOcO, c, si, row0, tid);
      else write_output<cutlass::bfloat16_t>(p, smem, tOrO, tOcO, c, si, row0, tid);
    } else {
      write_output<typename T::Element>(p, smem, tOrO, tOcO, c, si, row0, tid);
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
  __device__ __forceinline__ static void write_output(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                      TensorO& tOrO, const TensorC& tOcO, const TileCoord& c,
                                                      const SeqInfo& si, int row0, int tid) {
    if constexpr (Output::kStaged) {
      const int wg = tid / 128;
      const int wg_row0 = row0 + wg * kWgRows;
      // Dense: TMA clips at the tensor's end, which is the sequence's unless seqused_q shortens it.
      const bool ends_at_tensor = p.cu_seqlens_q == nullptr && si.seqlen_q == p.seqlen_q;
      if (box_fits_sequence(wg_row0, kWgRows, si.seqlen_q, ends_at_tensor)) {
        store_staged<Out>(p, smem, tOrO, c, si, wg, tid % 128);
        return;
      }
    }
    write_rows<Out>(p, tOrO, tOcO, c, si, row0);
  }

  // stmatrix into this warpgroup's buffer, then a TMA store of its 64 rows issued by thread 0 of
  // the warpgroup (store_wg_tile_staged, common/staged_store.hpp).
  template <class Out, class TensorO>
  __device__ __forceinline__ static void store_staged(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                      TensorO& tOrO, const TileCoord& c, const SeqInfo& si, int wg,
                                                      int wg_tid) {
    using namespace cute;
    Tensor sO = make_tensor(make_smem_ptr(reinterpret_cast<Out*>(smem.o.data.data())),
                            typename Output::SmemLayout{})(_, _, wg);
    store_wg_tile_staged<Out, typename T::MmaPV>(tOrO, sO, kEpilogueBarrierBase + wg, wg_tid, [&] {
      const bool varlen = p.cu_seqlens_q != nullptr;
      Tensor mO = p.tma_o.get_tma_tensor(p.shape_q);  // (rows, d, heads, batch)
      Tensor gO = local_tile(domain_offset(make_coord(si.q_offset, _0{}), mO(_, _, c.head, varlen ? 0 : c.batch)),
                             typename Output::TileWg{}, make_coord(c.m_block * T::kNumConsumerWgs + wg, _0{}));
      Tensor sO_bits = make_tensor(make_smem_ptr(smem.o.data.data()), typename Output::SmemLayout{})(_, _, wg);
      auto [tOg, tOs] = tma_partition(p.tma_o, _0{}, Layout<_1>{}, group_modes<0, 2>(sO_bits), group_modes<0, 2>(gO));
      copy(p.tma_o, tOs, tOg);
    });
  }

  // Thread 0 of each warpgroup, before the CTA exits: its last store must have read shared memory.
  __device__ __forceinline__ static void drain(int tid) {
    if constexpr (Output::kStaged) {
      if (tid % 128 == 0) cute::tma_store_wait<0>();
    }
  }

  // Register stores with row bounds checks. Two consumer warpgroups: 16-byte stores. The
  // four threads of a quad share a row and hold 2 adjacent columns of each 8-column group; a 4x4
  // transpose over the quad (4 shuffles per 4 groups) hands each thread one whole group, stored with
  // one 16-byte STG instead of four 4-byte ones that half-fill their sectors (+1.4% at d128 4k, +8%
  // at d256 1k on an H200, perf-log session 7). `out` rows are 16-byte aligned (validated for TMA).
  // The shuffles run for every row so that all lanes take part; only the stores are predicated.
  // Values are converted 8 at a time from the accumulator, so no converted copy of O is live.
  // 4-byte stores for three warpgroups (d64, 160 registers: the transpose spilled 8 bytes, no gain).
  // The quad position comes from lane_id_fresh(): with threadIdx.x, ptxas spilled at d256.
  template <class Out, class TensorO, class TensorC>
  __device__ __forceinline__ static void write_rows(const FwdKernelParams<T>& p, TensorO& tOrO, const TensorC& tOcO,
                                                    const TileCoord& c, const SeqInfo& si, int row0) {
    using namespace cute;
    Tensor o_rc = make_tensor(tOrO.data(), acc_as_rowcol(tOrO.layout()));
    Tensor c_rc = make_tensor(tOcO.data(), acc_as_rowcol(tOcO.layout()));
    constexpr int kGroups = decltype(size<1>(o_rc))::value / 2;  // 8-column groups per row
    static_assert(kGroups % 4 == 0, "the quad transpose takes 4 groups at a time");
    constexpr bool kWideStores = T::kNumConsumerWgs == 2;
    const bool varlen = p.cu_seqlens_q != nullptr;
    Out* base = static_cast<Out*>(p.out) +
                (varlen ? int64_t(si.q_offset) * p.out_row_stride : c.batch * p.out_batch_stride) +
                c.head * p.out_head_stride;
    const int t = lane_id_fresh() % 4;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(o_rc); ++i) {
      const int row = row0 + get<0>(c_rc(i, 0));
      Out* dst = base + int64_t(row) * p.out_row_stride;
      CUTE_UNROLL
      for (int g0 = 0; g0 < kGroups; g0 += 4) {
        uint32_t v[4];  // v[k]: this thread's 2 columns of group g0 + k
        CUTE_UNROLL
        for (int k = 0; k < 4; ++k) v[k] = pack_pair<Out>(o_rc(i, 2 * (g0 + k)), o_rc(i, 2 * (g0 + k) + 1));
        if constexpr (kWideStores) {
          const uint4 w = quad_transpose(v, t);
          const int col = get<1>(c_rc(i, 2 * g0)) - 2 * t + 8 * t;  // first column of group g0 + t
          if (row < si.seqlen_q) *reinterpret_cast<uint4*>(dst + col) = w;
        } else {
          CUTE_UNROLL
          for (int k = 0; k < 4; ++k)
            if (row < si.seqlen_q) *reinterpret_cast<uint32_t*>(dst + get<1>(c_rc(i, 2 * (g0 + k)))) = v[k];
        }
      }
    }
  }
};

}  // namespace hopattn::kernels::fwd
