// Epilogue: O = O / rowsum and LSE = max + log(rowsum). Rows that saw no key get O = 0 and
// LSE = -inf. The output dtype is the input's for 16-bit inputs; FP8 inputs write bf16 or fp16,
// chosen at run time (FwdKernelParams::out_fp16).
// Three ways out for O, per consumer warpgroup (64 rows):
//  * staged (T::Output::kStaged, output_tile.hpp): stmatrix into the warpgroup's shared buffer,
//    then one thread issues a TMA store and the warpgroup moves on to its next tile. Used unless
//    a varlen slice would cross into the next sequence (TMA clips only at the tensor's end).
//  * register stores (write_rows): 16-byte stores after a transpose within each quad (two consumer
//    warpgroups), with row bounds checks.
//  * staged in the ring the P V GEMM reads (Output::kInVRing: the V ring of the 16-bit kernels
//    with one Q buffer, d128's 176-key kernel, d192 and d256; FP8 d = 256's V^T ring): once the
//    P Vs that read the ring where this warpgroup's rows go have completed, stmatrix into the
//    ring and arrive on `o_staged`; the producer's loader (producer.hpp) or a transposer thread
//    (producer_fp8.hpp) issues the TMA stores before the ring takes the next tile's V (V^T).
//    The wait (wait_ring_readers): with T::kOutputWaitsRingStages, the v_empty phase of the most
//    recent use of each ring stage under the warpgroup's rows; otherwise named barrier
//    kOutputRingBarrier (every consumer thread: the tile's last P V, of both warpgroups).
// Named barrier kEpilogueBarrierBase + w (128 threads, warpgroup w) is passed twice per staged
// store: "the previous store has read the buffer" and "the buffer is written".
#pragma once

#include <cuda_bf16.h>
#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/common/staged_store.hpp"
#include "kernels/fwd/output_tile.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/softmax.hpp"
#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/timeline.hpp"

namespace hopattn::kernels::fwd {

constexpr int kEpilogueBarrierBase = 4;  // 4 + w; 1..3 are the pingpong tokens (consumer.hpp)
constexpr int kOutputRingBarrier = 7;    // every consumer thread; in-ring epilogue without kOutputWaitsRingStages

template <class T>
struct Epilogue {
  using Output = typename T::Output;
  static constexpr int kWgRows = Output::kRows;
  // o_mult: a factor every output row takes (the FP8 V descale; 1 otherwise).
  // v_next: the consumer's V ring position after the tile's last block (the in-ring epilogue's
  // wait counts back from it).
  template <class TensorO, class TensorC, class Softmax>
  __device__ __forceinline__ static void store(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                               TensorO& tOrO, const TensorC& tOcO, Softmax& softmax,
                                               float o_mult, const TileCoord& c, const SeqInfo& si, int tid,
                                               bool had_blocks, const PipeState<T::kStages>& v_next,
                                               Timeline& timeline) {
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
    timeline.mark(kEpilogueScaled);
    const int row0 = c.m_block * T::kBlockM;
    // The output type comes as a value's type (FP8 inputs choose bf16 or fp16 at run time).
    auto write = [&](auto out) {
      write_output<decltype(out)>(p, smem, tOrO, tOcO, c, si, row0, tid, had_blocks, v_next, timeline);
    };
    if constexpr (T::kFp8) {
      if (p.out_fp16) write(cutlass::half_t{});
      else write(cutlass::bfloat16_t{});
    } else {
      write(typename T::Element{});
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
                                                      const SeqInfo& si, int row0, int tid, bool had_blocks,
                                                      const PipeState<T::kStages>& v_next, Timeline& timeline) {
    if constexpr (Output::kInVRing) {
      // A tile without key blocks (O = 0) goes out from registers and leaves the ring alone: its
      // consumers never waited for a V (V^T), so the previous tile's stores may still read the
      // ring (and an o_staged arrival ahead of the producer's wait would make its parity
      // ambiguous).
      if (had_blocks) {
        write_into_v_ring<Out>(p, smem, tOrO, tOcO, c, si, row0, tid, v_next, timeline);
        return;
      }
    } else if constexpr (Output::kStaged) {
      const int wg = consumer_wg_uniform();
      if (wg_box_by_tma(p, c, si, wg)) {
        store_staged<Out>(p, smem, tOrO, c, si, wg, tid % 128);
        return;
      }
    }
    write_rows<Out>(p, tOrO, tOcO, c, si, row0);
  }

  // This thread's consumer warpgroup, in a form ptxas proves warp-uniform (warpgroup 0 of the CTA
  // produces). With tid / 128 instead, the branch on wg_box_by_tma below counts as divergent, and
  // ptxas moved the mainloop's ring positions and descriptors from uniform to vector registers
  // (R2UR before every WGMMA batch): the FP8 d256 in-ring kernel spilled 180 B in its mainloop.
  __device__ __forceinline__ static int consumer_wg_uniform() { return warp_idx_uniform() / 4 - 1; }

  // Whether warpgroup wg's 64 rows of tile c leave by one TMA store. Dense: TMA clips at the
  // tensor's end, which is the sequence's unless seqused_q shortens it.
  __device__ __forceinline__ static bool wg_box_by_tma(const FwdKernelParams<T>& p, const TileCoord& c,
                                                       const SeqInfo& si, int wg) {
    const bool ends_at_tensor = p.cu_seqlens_q == nullptr && si.seqlen_q == p.seqlen_q;
    return box_fits_sequence(c.m_block * T::kBlockM + wg * kWgRows, kWgRows, si.seqlen_q, ends_at_tensor);
  }

  // The TMA store of warpgroup wg's 64 rows from `buffer` (Output::SmemLayout, any 16-bit type:
  // the store copies bits). Committed by the caller.
  __device__ __forceinline__ static void issue_output_store(const FwdKernelParams<T>& p, void* buffer,
                                                            const TileCoord& c, const SeqInfo& si, int wg) {
    using namespace cute;
    using Carrier = typename Output::Carrier;
    const bool varlen = p.cu_seqlens_q != nullptr;
    Tensor mO = p.tma_o.get_tma_tensor(p.shape_q);  // (rows, d, heads, batch)
    Tensor gO = local_tile(domain_offset(make_coord(si.q_offset, _0{}), mO(_, _, c.head, varlen ? 0 : c.batch)),
                           typename Output::TileWg{}, make_coord(c.m_block * T::kNumConsumerWgs + wg, _0{}));
    Tensor sO_bits =
        make_tensor(make_smem_ptr(static_cast<Carrier*>(buffer)), typename Output::SmemLayout{})(_, _, wg);
    auto [tOg, tOs] = tma_partition(p.tma_o, _0{}, Layout<_1>{}, group_modes<0, 2>(sO_bits), group_modes<0, 2>(gO));
    copy(p.tma_o, tOs, tOg);
  }

  // Output::kInVRing, from the thread that stores (the 16-bit loader, an FP8 transposer): waits
  // until `tile`'s O is staged in the V ring (`o_staged`, lap parity `phase`), then stores every
  // warpgroup's rows by TMA, one bulk group each, warpgroup `first_wg`'s first. Returns once all
  // have read shared memory, or with `split` once the first has (the caller waits for the rest).
  __device__ __forceinline__ static void store_from_v_ring(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                           const TileScheduler& sched, int tile, uint32_t phase,
                                                           int first_wg, bool split) {
    const TileCoord c = sched.decode(tile);
    const SeqInfo si = seq_info(p, c.batch);
    wait_full(smem.o_staged, phase);
    for (int k = 0; k < T::kNumConsumerWgs; ++k) {
      const int wg = (first_wg + k) % T::kNumConsumerWgs;
      if (wg_box_by_tma(p, c, si, wg)) issue_output_store(p, smem.v.data(), c, si, wg);
      cute::tma_store_arrive();
    }
    if (split) cute::tma_store_wait<T::kNumConsumerWgs - 1>();
    else cute::tma_store_wait<0>();
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
    store_wg_tile_staged<Out, typename T::MmaPV>(tOrO, sO, kEpilogueBarrierBase + wg, wg_tid,
                                                 [&] { issue_output_store(p, smem.o.data.data(), c, si, wg); });
  }

  // The in-ring epilogue's consumer side. The wait orders this warpgroup's stmatrix after the
  // other warpgroup's P Vs that may still read the part of the ring this one writes. The
  // loader (transposers) write the ring again only once the stores have read it (producer.hpp,
  // producer_fp8.hpp), and they have written every V (V^T) of this tile before, so no barrier is
  // needed on their side here.
  // A warpgroup whose rows cannot go out as one box stores from registers and arrives all the same.
  template <class Out, class TensorO, class TensorC>
  __device__ __forceinline__ static void write_into_v_ring(const FwdKernelParams<T>& p,
                                                           typename T::SharedStorage& smem, TensorO& tOrO,
                                                           const TensorC& tOcO, const TileCoord& c,
                                                           const SeqInfo& si, int row0, int tid,
                                                           const PipeState<T::kStages>& v_next, Timeline& timeline) {
    using namespace cute;
    const int wg = consumer_wg_uniform();
    wait_ring_readers(smem, wg, v_next);
    timeline.mark(kEpilogueRingFree);
    if (wg_box_by_tma(p, c, si, wg)) {
      const uint32_t buffer = cute::cast_smem_ptr_to_uint(smem.v.data()) + Output::Rows::stage_base(wg);
      stmatrix_output_rows<Output, Out>(tOrO, buffer, warpgroup_thread_fresh());
      timeline.mark(kEpilogueStsmIssued);
      cute::tma_store_fence();  // the generic-proxy writes, visible to the TMA store (async proxy)
      timeline.mark(kEpilogueFenced);
    } else {
      write_rows<Out>(p, tOrO, tOcO, c, si, row0);
    }
    release(smem.o_staged);
  }

  // An idle warpgroup's part of the in-ring epilogue (Output::kInVRing): it writes nothing but
  // passes the barrier (without kOutputWaitsRingStages) and arrives, as the other warpgroup and
  // the producer count on it. The two warpgroups reach the barrier at two code locations, hence
  // its unaligned form.
  __device__ __forceinline__ static void skip_v_ring_output(typename T::SharedStorage& smem) {
    if constexpr (!T::kOutputWaitsRingStages) named_barrier_sync_unaligned(kOutputRingBarrier, T::kNumConsumerThreads);
    release(smem.o_staged);
  }

  // Until no P V still reads the ring where warpgroup wg's O rows go (the stage's most recent
  // use may belong to an earlier tile).
  // kOutputWaitsRingStages: every consumer thread arrives on v_empty[s] once its P V from stage s
  // has completed, once per use, so the stage is free when the phase of its most recent use
  // (counted back from v_next) is complete. Only the stages under wg's rows are waited for: at
  // FP8 d256 warpgroup w's rows are V^T slot w. Where the tile's last block is in slot 1 (a tile
  // that starts in slot 0 with an even number of blocks: every tile of an unmasked problem whose
  // key length is a multiple of 256), warpgroup 0, whose P V runs first under the pingpong token,
  // waits for the other's second-to-last P V, long done, not for its last; where it is in slot 0
  // the wait is that of the barrier. No later use can complete meanwhile: the stage is refilled
  // only after this tile's O was stored. A stage never used has the parity of the phase before
  // the first, which counts as complete. Otherwise: named barrier 7, both warpgroups' last P V.
  __device__ __forceinline__ static void wait_ring_readers(typename T::SharedStorage& smem, int wg,
                                                           const PipeState<T::kStages>& v_next) {
    if constexpr (T::kOutputWaitsRingStages) {
      constexpr uint32_t kWgBytes = uint32_t(Output::kBytes / T::kNumConsumerWgs);
      static_assert(Output::Rows::stage_base(1) == kWgBytes, "warpgroup w's rows are bytes [w, w + 1) x kWgBytes");
      const uint32_t rows_begin = uint32_t(wg) * kWgBytes, rows_end = rows_begin + kWgBytes;
      CUTE_UNROLL
      for (int back = 1; back <= T::kStages; ++back) {
        const int s = (v_next.stage - back + T::kStages) % T::kStages;
        const uint32_t phase = v_next.phase ^ (v_next.stage < back ? 1u : 0u);
        const uint32_t stage_begin = uint32_t(s) * T::kBytesKV;
        if (stage_begin < rows_end && rows_begin < stage_begin + T::kBytesKV) wait_full(smem.v_empty[s], phase);
      }
    } else {
      named_barrier_sync_unaligned(kOutputRingBarrier, T::kNumConsumerThreads);
    }
  }

  // Thread 0 of each warpgroup, before the CTA exits: its last store must have read shared memory.
  // (The in-ring epilogue's stores belong to the loader or a transposer thread, which drains them.)
  __device__ __forceinline__ static void drain(int tid) {
    if constexpr (Output::kStaged && !Output::kInVRing) {
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
