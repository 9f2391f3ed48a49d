// The producer: one elected thread of warpgroup 0 walks the same tiles as the consumers and
// issues TMA loads: Q once per tile, then K_n and V_n into the ring, from the last key block to
// the first (the order the consumers use, so masked blocks come first). Where O is staged in the V
// ring (T::kOutputInVRing: d128's 176-key kernel, d192, d256), the loader stores the previous
// tile's O from there before this tile's first V: after K_n and K_{n-1} are issued, so the
// consumers' first Q K^T does not wait.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/fwd/epilogue.hpp"
#include "kernels/fwd/kv_loads.hpp"
#include "kernels/fwd/mask.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/timeline.hpp"

namespace hopattn::kernels::fwd {

// T::kOutputInVRing: tile `tile`'s O, staged by the consumers in the V ring (epilogue.hpp), leaves
// by TMA; returns once the stores have read the ring, so that the next tile's first V may load into
// V stage `next_stage`. Warpgroup w's O is bytes [w, w + 1) x Output::kBytes / 2 of the ring. The
// stores are committed one bulk group per warpgroup, the one that overlaps `next_stage` first; with
// `split` (only for next_stage 1, which overlaps no more than warpgroup 1's rows) it returns once
// that first store has read, and the caller waits for the other before the tile's second V.
template <class T>
__device__ __forceinline__ void store_output_from_v_ring(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                         const TileScheduler& sched, int tile, uint32_t phase,
                                                         int next_stage, bool split) {
  static_assert(T::kBytesKV >= uint32_t(T::Output::kBytes / 2), "V stage 1 must start past warpgroup 0's O");
  // tile_to_shape puts the stage mode outermost, so stage s starts at s x kBytesKV if unpadded.
  static_assert(cute::cosize_v<typename T::SmemLayoutV> == T::kStages * T::kBlockN * T::kHeadDim,
                "the V ring must be kStages unpadded stages");
  // Stage 0 overlaps warpgroup 0's O and some or all of warpgroup 1's; stage 1 at most warpgroup
  // 1's (the assert above; none at d128's 176-key stages).
  Epilogue<T>::store_from_v_ring(p, smem, sched, tile, phase, next_stage == 0 ? 0 : 1, split);
}

template <class T>
__device__ void producer_loop(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                              const TileScheduler& sched) {
  using namespace cute;
  Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);  // (rows, d, heads, batch)
  Tensor mK = p.tma_k.get_tma_tensor(p.shape_k);
  Tensor mV = p.tma_v.get_tma_tensor(p.shape_k);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutV{});
  const bool varlen = p.cu_seqlens_q != nullptr;

  PipeState<T::kStages> k_pipe, v_pipe;
  PipeState<T::kQStages> q_pipe;
  TileRingState ring;
  Timeline timeline(0);  // experiment probe (timeline.hpp)
  int staged_tile = -1;  // kOutputInVRing: the last tile whose O waits in the V ring (-1: none)
  uint32_t staged_phase = 0;
  bool store_pending = false;  // kOutputInVRing, split: a store may still read the ring (until the second V)
  int tile = sched.first_tile();
  publish_tile(smem.tiles, ring, tile);
  // The next tile is claimed once this tile's loads are issued (the consumers need it only at
  // this tile's end): +1.6..3.5% under a causal mask at 512-1k, -0.5% unmasked at d128 (H100,
  // perf-log session 21), as in the backward's producer.
  for (; tile < sched.num_tiles; tile = claim_and_publish(sched, smem.tiles, ring, tile)) {
    timeline.next_tile();
    timeline.mark(kTileClaimed);
    const TileCoord c = sched.decode(tile);
    const SeqInfo si = seq_info(p, c.batch);
    if (c.m_block * T::kBlockM >= si.seqlen_q) continue;
    const WindowMask<T::kBlockM, T::kBlockN> mask{si.seqlen_q, si.seqlen_k, p.window_left, p.window_right};
    int n_begin, n_end;
    mask.block_range(c.m_block, n_begin, n_end);
    if (n_end <= n_begin) continue;  // the consumers write the empty-row result without loads
#ifdef HOPATTN_EXP_FWD_HALF_KV_LOADS
#pragma message("HOPATTN_EXP_FWD_HALF_KV_LOADS: tiles of odd query blocks skip their K and V loads; O is wrong")
    // Timing experiment only (session 37): the L2 reads that 2-CTA clusters multicasting K and V
    // to the tiles of two adjacent query blocks would save, without the clusters' lockstep (an
    // upper bound). Built with it, the kernel runs without clusters (T::kClusterKV).
    const bool load_kv = (c.m_block & 1) == 0;
#else
    constexpr bool load_kv = true;
#endif

    const int b = varlen ? 0 : c.batch;
    const int kv_head = c.head / p.head_group;
    Tensor gQ = local_tile(domain_offset(make_coord(si.q_offset, _0{}), mQ(_, _, c.head, b)),
                           typename T::TileQ{}, make_coord(c.m_block, _0{}));
    Tensor gK = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mK(_, _, kv_head, b)),
                           typename T::TileKV{}, make_coord(_, _0{}));  // (N, d, blocks)
    Tensor gV = local_tile(domain_offset(make_coord(si.k_offset, _0{}), mV(_, _, kv_head, b)),
                           typename T::TileKV{}, make_coord(_, _0{}));
    auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    // With one Q buffer this tile's Q can load only after the previous tile's last Q K^T; this
    // loop turn starts at the claim, about a block earlier, so the Q box is sent to L2 now and
    // the load below finds it there (T::kPrefetchNextQ).
    if constexpr (T::kPrefetchNextQ) prefetch(p.tma_q, tQg);
    wait_empty(smem.q_empty[q_pipe.stage], q_pipe.phase);  // consumers done with that buffer's Q
    expect_bytes(smem.q_full[q_pipe.stage], T::kBytesQ);
    copy(p.tma_q.with(smem.q_full[q_pipe.stage]), tQg, tQs(_, q_pipe.stage));
    q_pipe.advance();
    timeline.mark(kQIssued);

    // The key blocks, given how one K or V block is issued into a freed stage: issue(n, stage, lap
    // parity). Written once for both ways of loading; each way is its own instance, so neither
    // keeps the other's TMA views live (the d256 producer has 24 registers).
    auto walk_blocks = [&](auto&& issue_k, auto&& issue_v) {
      // K runs one block ahead of V: the consumers need K_{n-1} (next scores) and V_n (this
      // block's P V) at the same time, and K stages are released a GEMM earlier than V stages.
      auto load_k = [&](int n) {
        wait_empty(smem.k_empty[k_pipe.stage], k_pipe.phase);
        issue_k(n, k_pipe.stage, k_pipe.phase);
        k_pipe.advance();
      };
      auto load_v = [&](int n) {
        wait_empty(smem.v_empty[v_pipe.stage], v_pipe.phase);
        issue_v(n, v_pipe.stage, v_pipe.phase);
        v_pipe.advance();
      };
      load_k(n_end - 1);
      for (int n = n_end - 1; n >= n_begin; --n) {
        if (n > n_begin) load_k(n - 1);
        if constexpr (T::kOutputInVRing) {
          if (n == n_end - 1) {
            if (staged_tile >= 0) {
              // Split only where a second V follows: waiting for the other store before it is
              // what keeps the consumers' next stmatrix (after this tile's last P V) off rows a
              // store still reads. A one-block tile waits for both here.
              store_pending = T::kOutputInVRingSplit && v_pipe.stage == 1 && n_end - n_begin >= 2;
              store_output_from_v_ring<T>(p, smem, sched, staged_tile, staged_phase, v_pipe.stage, store_pending);
              staged_phase ^= 1;
            }
            staged_tile = tile;
          } else if (store_pending) {
            cute::tma_store_wait<0>();
            store_pending = false;
          }
        }
        load_v(n);
      }
    };

    if (T::kClusterKV && p.cluster_kv) {
      // With the V-ring epilogue the previous tile's O store has read a stage before the stage is
      // declared free to the peer (the walk waits for the store before the load).
      walk_multicast_halves(p, smem, sK, gK, sV, gV, smem.v_full, walk_blocks);
    } else {
      walk_whole_blocks(p, smem, sK, gK, sV, gV, smem.v_full, walk_blocks, load_kv);
    }
    timeline.mark(kLastVIssued);
  }
  if constexpr (T::kOutputInVRing) {
    if (staged_tile >= 0) store_output_from_v_ring<T>(p, smem, sched, staged_tile, staged_phase, 0, false);
  }
}

}  // namespace hopattn::kernels::fwd
