// The FP8 producer warpgroup, in two roles:
//  * warp 0, one elected thread (the loader): claims and publishes tiles and issues the TMA
//    loads, as in the 16-bit kernel, except that V_n goes into a staging ring, that tile n's
//    K and V descales are written next to its K stage, and the tile's tensor-wide Q and V
//    descales next to its Q buffer (fp8_scales.hpp);
//  * warps 1..3 (96 threads, the transposers): read the tiles from the tile ring like the
//    consumers and rewrite each staged V_n as V^T into the ring the consumers read
//    (v_transpose.hpp).
// Two separate loops rather than one loop where some thread does both: registers are allocated
// for the largest live set of any point of the kernel, and the TMA views plus the transpose's
// 16 loaded words did not fit the producer's budget together.
//
// Per key block n (last to first):
//   loader:      load K_n (+ descales), load V_n into staging          (runs ahead, ring depth)
//   transposers: wait staged V_n, wait V^T slot free, transpose, fence to the async proxy,
//                arrive v_full (consumers may read), arrive v_stage_empty (TMA may refill)
// In 2-CTA clusters (d256, traits_fp8.hpp) each loader loads half of K_n and V_n into both
// CTAs' rings and first waits for the peer's word that its copy of the stage is free too.
// No cycle: the loader waits only for the consumers (K) and the transposers (staging slots of
// earlier blocks); the transposers for the loader (V_n) and the consumers' P V of block
// n+kStages (the V^T slot's previous tenant).
// With the in-ring epilogue (Output::kInVRing, epilogue.hpp) the consumers stage tile t's O in
// the V^T ring after its last P V; on receiving tile t+1 (or the end), the transposers first wait
// for that (`o_staged`), thread 0 issues the TMA stores and waits until the one from the half
// of the ring that tile t+1's first V^T goes to has read it (the other, before its second V^T),
// and only then do they write that V^T. They have written all of tile t's V^T by then, so the
// consumers' wait for the ring closes no cycle.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/epilogue.hpp"
#include "kernels/fwd/fp8_scales.hpp"
#include "kernels/fwd/kv_loads.hpp"
#include "kernels/fwd/mask.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/timeline.hpp"
#include "kernels/fwd/v_transpose.hpp"

namespace hopattn::kernels::fwd {

template <class T>
__device__ void fp8_loader_loop(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                const TileScheduler& sched) {
  using namespace cute;
  Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);
  Tensor mK = p.tma_k.get_tma_tensor(p.shape_k);
  Tensor mV = p.tma_v.get_tma_tensor(p.shape_k);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v_stage.data()), typename T::SmemLayoutVStage{});
  const bool varlen = p.cu_seqlens_q != nullptr;

  PipeState<T::kStages> k_pipe, v_pipe;
  PipeState<T::kQStages> q_pipe;
  TileRingState ring;
  Timeline timeline(0);  // experiment probe (timeline.hpp)
  BlockProbeCounter probe;  // blocks issued so far (block probe, timeline.hpp)
  int tile = sched.first_tile();
  publish_tile(smem.tiles, ring, tile);
  // The next tile is claimed once this tile's loads are issued, as in producer.hpp: +0.9..6.4%
  // under a causal mask at 512-1k (d256 causal 1k: 622 -> 662 TFLOP/s), unmasked within 1% (H200,
  // perf-log session 21).
  for (; tile < sched.num_tiles; tile = claim_and_publish(sched, smem.tiles, ring, tile)) {
    timeline.next_tile();
    timeline.mark(kTileClaimed);
    const TileCoord c = sched.decode(tile);
    const SeqInfo si = seq_info(p, c.batch);
    if (c.m_block * T::kBlockM >= si.seqlen_q) continue;
    const WindowMask<T::kBlockM, T::kBlockN> mask{si.seqlen_q, si.seqlen_k, p.window_left, p.window_right};
    int n_begin, n_end;
    mask.block_range(c.m_block, n_begin, n_end);
    if (n_end <= n_begin) continue;

    const int b = varlen ? 0 : c.batch;
    const int kv_head = c.head / p.head_group;
    Tensor gQ = local_tile(domain_offset(make_coord(si.q_offset, _0{}), mQ(_, _, c.head, b)),
                           typename T::TileQ{}, make_coord(c.m_block, _0{}));
    Tensor gK = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mK(_, _, kv_head, b)),
                           typename T::TileKV{}, make_coord(_, _0{}));
    Tensor gV = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mV(_, _, kv_head, b)),
                           typename T::TileKV{}, make_coord(_, _0{}));
    auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    const Fp8ProducerScales scales = Fp8ProducerScales::load(p, c);

    if constexpr (T::kPrefetchNextQ) prefetch(p.tma_q, tQg);  // as producer.hpp
    wait_empty(smem.q_empty[q_pipe.stage], q_pipe.phase);
    // Q's load goes out before the descales are stored: a store of a descale waits for its global
    // load, issued just above. The phase completes only with the arrive, after the stores.
    expect_bytes_only(smem.q_full[q_pipe.stage], T::kBytesQ);
    copy(p.tma_q.with(smem.q_full[q_pipe.stage]), tQg, tQs(_, q_pipe.stage));
    compiler_memory_fence();  // the stores stay between the wait and the arrive
    smem.q_tensor_descale[q_pipe.stage] = scales.q_tensor;
    smem.v_tensor_descale[q_pipe.stage] = scales.v_tensor;
    publish_stage(smem.q_full[q_pipe.stage]);
    q_pipe.advance();
    timeline.mark(kQIssued);

    // The key blocks, given how one K or V block is issued into a freed stage (as producer.hpp:
    // one instance per way of loading, so that neither keeps the other's TMA views live; the
    // d = 256 loader runs in 24 registers).
    auto walk_blocks = [&](auto&& issue_k, auto&& issue_v) {
      for (int n = n_end - 1; n >= n_begin; --n) {
        // The descales are read before the wait so that their latency overlaps it.
        const float k_scale = scales.k(n), v_scale = scales.v(n);
        wait_empty(smem.k_empty[k_pipe.stage], k_pipe.phase);
        issue_k(n, k_pipe.stage, k_pipe.phase);  // announces the bytes, no arrive (as Q's above)
        probe.mark(kPbKIssued);
        compiler_memory_fence();
        smem.k_descale[k_pipe.stage] = k_scale;
        smem.v_descale[k_pipe.stage] = v_scale;
        publish_stage(smem.k_full[k_pipe.stage]);
        k_pipe.advance();
        wait_empty(smem.v_stage_empty[v_pipe.stage], v_pipe.phase);
        issue_v(n, v_pipe.stage, v_pipe.phase);
        v_pipe.advance();
        probe.mark(kPbVIssued);
        probe.next();
      }
    };

    if (T::kClusterKV && p.cluster_kv) {
      // A staging stage is refilled once both CTAs' transposers have read it, a K stage once both
      // CTAs' consumers (kv_loads.hpp).
      walk_multicast_halves<false>(p, smem, sK, gK, sV, gV, smem.v_stage_full, walk_blocks);
    } else {
      walk_whole_blocks<false>(p, smem, sK, gK, sV, gV, smem.v_stage_full, walk_blocks);
    }
    timeline.mark(kLastVIssued);
  }
}

constexpr int kTransposerBarrier = 8;  // the 96 transposer threads (named barriers: epilogue.hpp)

// The in-ring epilogue's store of `tile`'s O, from the V^T ring; returns once the ring is free.
// The stores leave from one thread (bulk groups are per thread), which waits for them to read
// shared memory; the other transposers wait at the named barrier.
// The stores are committed one bulk group per warpgroup, the warpgroup whose half of the ring is
// V^T slot `first_slot` (where the next tile's first V^T goes) first; with `split` thread 0 waits
// only for that group here and for the other before the tile's second V^T (the caller), so the
// first transpose runs while the second store still reads: +0.5..1.5% at d256 512-2k, causal
// unchanged (H100, perf-log session 29). Without (a tile of fewer than two blocks, or the end)
// it waits for both.
template <class T>
__device__ __forceinline__ void store_output_from_vt_ring(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                       const TileScheduler& sched, int tile, uint32_t phase, int tid,
                                                       int first_slot, bool split) {
  // Warpgroup w's half of the ring is V^T slot w (output_tile.hpp), which the slot order needs.
  static_assert(T::kStages == T::kNumConsumerWgs &&
                    T::Output::Rows::stage_base(1) == uint32_t(T::kBlockN * T::kHeadDim),
                "each consumer warpgroup's O must fill exactly one V^T slot");
  if (tid == 0) Epilogue<T>::store_from_v_ring(p, smem, sched, tile, phase, first_slot, split);
  named_barrier_sync(kTransposerBarrier, T::kNumTransposeThreads);
}

// tid: 0 .. T::kNumTransposeThreads - 1.
template <class T>
__device__ void fp8_transpose_loop(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                   const TileScheduler& sched, int tid) {
  const uint32_t v_stage_base = cute::cast_smem_ptr_to_uint(smem.v_stage.data());
  const uint32_t vt_base = cute::cast_smem_ptr_to_uint(smem.v.data());
  using Transpose = std::conditional_t<T::kLdmatrixTranspose, VTransposeLdsm<T>, VTranspose<T>>;
  // The staging and V^T rings advance together, once per key block; one register (the d = 256
  // transposers run in 24).
  PackedPipeState<T::kStages> pipe;
  TileRingState ring;
  constexpr bool kOutputInRing = T::Output::kInVRing;
  int staged_tile = -1;  // kOutputInRing: the last tile whose O the consumers stage in the ring (-1: none)
  Timeline timeline(kTransposerRole, kOutputInRing && tid == 0);  // experiment probe (timeline.hpp)
  uint32_t staged_phase = 0;
  BlockProbeCounter probe;  // blocks transposed so far (block probe, timeline.hpp)
  for (int tile = receive_tile(smem.tiles, ring); tile < sched.num_tiles; tile = receive_tile(smem.tiles, ring)) {
    timeline.next_tile();
    timeline.mark(kTransposerReceived);
    const TileCoord c = sched.decode(tile);
    const SeqInfo si = seq_info(p, c.batch);
    if (c.m_block * T::kBlockM >= si.seqlen_q) continue;  // the consumers skip it too: no epilogue
    const WindowMask<T::kBlockM, T::kBlockN> mask{si.seqlen_q, si.seqlen_k, p.window_left, p.window_right};
    int n_begin, n_end;
    mask.block_range(c.m_block, n_begin, n_end);
    bool rest_pending = false;  // kOutputInRing: the second store may still read the ring
    if constexpr (kOutputInRing) {
      if (staged_tile >= 0) {
        rest_pending = n_end - n_begin >= 2;
        store_output_from_vt_ring<T>(p, smem, sched, staged_tile, staged_phase, tid, pipe.stage(), rest_pending);
        timeline.mark(kOutputRead);
        staged_phase ^= 1;
      }
      staged_tile = n_end > n_begin ? tile : -1;  // a tile without blocks stores from registers
    }
    for (int blocks = n_end - n_begin; blocks > 0; --blocks) {
      const int stage = pipe.stage();
      wait_full(smem.v_stage_full[stage], pipe.phase());
      probe.mark(kPbVLanded, tid == 32);
      wait_empty(smem.v_empty[stage], pipe.phase());
      probe.mark(kPbSlotFree, tid == 32);
      Transpose::run(v_stage_base, vt_base, stage, tid);
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> WGMMA reads
      release(smem.v_full[stage]);
      if (blocks == n_end - n_begin) timeline.mark(kFirstVtReleased);
      release(smem.v_stage_empty[stage]);
      pipe.advance();
      probe.mark(kPbVtDone, tid == 32);
      probe.mark(kPbVtDoneT0, tid == 0);
      probe.next();
      if (kOutputInRing && rest_pending) {  // the other warpgroup's store has read its slot too
        if (tid == 0) cute::tma_store_wait<0>();
        named_barrier_sync(kTransposerBarrier, T::kNumTransposeThreads);
        rest_pending = false;
      }
    }
  }
  if constexpr (kOutputInRing) {
    if (staged_tile >= 0) store_output_from_vt_ring<T>(p, smem, sched, staged_tile, staged_phase, tid, pipe.stage(), false);
  }
}

}  // namespace hopattn::kernels::fwd
