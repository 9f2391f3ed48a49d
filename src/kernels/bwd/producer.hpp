// The load warp (warpgroup 0, warp 0, one elected thread): per tile, K and V once (after the
// tile's first Q where T::kFirstQBeforeKv); per step Q, dO (TMA) and the step's lse_log2 and dsum
// rows (1-D bulk copies) into the step rings (StepLoadRings: one ring for both, or one each where
// Q has more stages than dO).
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/bwd/timeline_events.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/timeline.hpp"

namespace hopattn::kernels::bwd {

using fwd::expect_bytes;
using fwd::PackedPipeState;
using fwd::wait_empty;
using fwd::wait_full;

__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t& bar) {
  cute::SM90_BULK_COPY_G2S::copy(gmem_src, &bar, smem_dst, int32_t(bytes));
}

// Claims the next tile and publishes it on the tile ring. Unlike the forward, every tile (the
// first one too) comes from the counter, whose address is read from shared memory (traits.hpp):
// in warpgroup 0's 24 registers at d = 64, ptxas spilled both the address and gridDim.x when
// they were held through the loop.
template <class Storage>
__device__ __forceinline__ int claim_and_publish(Storage& smem, fwd::TileRingState& ring) {
  const int next = atomicAdd(smem.tile_counter, 1);
  fwd::publish_tile(smem.tiles, ring, next);
  return next;
}

// The producer's positions in the Q and dO rings of the steps: one ring with one empty barrier
// per stage (qdo_empty), or, with T::kSplitQdoRings, a ring each (q_empty, do_empty). acquire_*
// waits until the next slot is free and returns its stage.
template <class T, bool kSplit = T::kSplitQdoRings>
struct StepLoadRings {
  PackedPipeState<T::kStages> pipe;
  __device__ __forceinline__ int acquire_q(typename T::SharedStorage& smem) {
    wait_empty(smem.qdo_empty[pipe.stage()], pipe.phase());
    return pipe.stage();
  }
  __device__ __forceinline__ int acquire_do(typename T::SharedStorage&) { return pipe.stage(); }
  __device__ __forceinline__ void advance() { pipe.advance(); }
};

template <class T>
struct StepLoadRings<T, true> {
  PackedPipeState<T::kQStages> q;
  PackedPipeState<T::kDoStages> dout;
  __device__ __forceinline__ int acquire_q(typename T::SharedStorage& smem) {
    wait_empty(smem.q_empty[q.stage()], q.phase());
    return q.stage();
  }
  __device__ __forceinline__ int acquire_do(typename T::SharedStorage& smem) {
    wait_empty(smem.do_empty[dout.stage()], dout.phase());
    return dout.stage();
  }
  __device__ __forceinline__ void advance() {
    q.advance();
    dout.advance();
  }
};

template <class T>
__device__ void bwd_producer_loop(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                  const fwd::TileScheduler& sched) {
  using namespace cute;
  Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);  // (rows, d, heads, batch)
  Tensor mdO = p.tma_do.get_tma_tensor(p.shape_q);
  Tensor mK = p.tma_k.get_tma_tensor(p.shape_k);
  Tensor mV = p.tma_v.get_tma_tensor(p.shape_k);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutdO{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutV{});
  const bool varlen = p.cu_seqlens_q != nullptr;

  // One-register ring positions: warpgroup 0 runs in few registers (traits.hpp).
  StepLoadRings<T> rings;
  PackedPipeState<1> kv_pipe;
  fwd::TileRingState ring;
  fwd::Timeline tl(0);  // experiment probe (tools/bwd-timeline, timeline_events.hpp)
  // The next tile is claimed and published once this tile's loads are issued, not before them:
  // the consumers ask for it only at this tile's end, and the claim's atomic round trip no longer
  // delays the tile's K/V load (+2..4% at d128 512-2k, perf-log session 21).
  for (int tile = claim_and_publish(smem, ring); tile < sched.num_tiles; tile = claim_and_publish(smem, ring)) {
    tl.next_tile();
    tl.mark(kBwdTileClaimed);
    const TileWork<T> w = tile_work<T>(p, sched, tile);
    if (w.empty()) continue;  // the consumers write zero dK, dV without loads
#ifdef HOPATTN_EXP_BWD_HALF_QDO_LOADS
#pragma message("HOPATTN_EXP_BWD_HALF_QDO_LOADS: tiles of odd key blocks skip their Q and dO loads; gradients are wrong")
    // Timing experiment only: the L2 reads that 2-CTA clusters multicasting Q and dO to the tiles
    // of two adjacent key blocks would save, without the clusters' lockstep (an upper bound).
    const bool load_qdo = (w.n_block & 1) == 0;
#else
    constexpr bool load_qdo = true;
#endif

    const int b = varlen ? 0 : w.batch;
    Tensor gK = local_tile(domain_offset(make_coord(w.si.k_offset, _0{}), mK(_, _, w.kv_head, b)),
                           typename T::TileKV{}, make_coord(w.n_block, _0{}));
    Tensor gV = local_tile(domain_offset(make_coord(w.si.k_offset, _0{}), mV(_, _, w.kv_head, b)),
                           typename T::TileKV{}, make_coord(w.n_block, _0{}));
    // tma_partition takes the TMA box as the first mode: group (rows, d) into one.
    auto k_views = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto v_views = tma_partition(p.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    auto load_kv = [&] {
      tl.mark(kBwdKvLoadBegins);
      wait_empty(smem.kv_empty, kv_pipe.phase());
      expect_bytes(smem.kv_full, 2 * T::kBytesKV);
      copy(p.tma_k.with(smem.kv_full), get<0>(k_views), get<1>(k_views));
      copy(p.tma_v.with(smem.kv_full), get<0>(v_views), get<1>(v_views));
      tl.mark(kBwdKvIssued);
      kv_pipe.advance();
    };
    // K and V free only once the previous tile's last GEMM is done; its last step's Q stage (and
    // dO's, with one ring for both) is free earlier. With T::kFirstQBeforeKv the tile's first Q
    // (and dO) are loaded before K and V, so they have landed when K does.
    bool kv_left = T::kFirstQBeforeKv;
    auto load_kv_after_first_q = [&] {
      if constexpr (T::kFirstQBeforeKv) {
        if (kv_left) load_kv();
        kv_left = false;
      }
    };
    if constexpr (!T::kFirstQBeforeKv) load_kv();

    for (int g = 0; g < p.head_group; ++g) {
      const int head = w.kv_head * p.head_group + g;
      Tensor gQ = local_tile(domain_offset(make_coord(w.si.q_offset, _0{}), mQ(_, _, head, b)),
                             typename T::TileQ{}, make_coord(_, _0{}));  // (M, d, m blocks)
      Tensor gdO = local_tile(domain_offset(make_coord(w.si.q_offset, _0{}), mdO(_, _, head, b)),
                              typename T::TileQ{}, make_coord(_, _0{}));
      auto q_views = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      auto do_views = tma_partition(p.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
      // Padded rows (workspace.hpp): query block m's LSE and dsum rows are block stats_block0 + m.
      // An index rather than a 64-bit row offset: warpgroup 0 runs in 24 registers at d = 64.
      const int stats_block0 = int((head * p.rows_per_head + w.stats_row0) / T::kBlockM);
      // Not unrolled: in warpgroup 0's few registers, an unrolled copy of this loop spills.
#pragma unroll 1
      for (QueryWalk q{w.m_begin, w.m_first, w.m_end}; !q.done(); q.advance()) {
        const int m = q.m();
        const int qs = rings.acquire_q(smem);
        expect_bytes(smem.q_full[qs], (load_qdo ? T::kBytesQ : 0) + T::kBytesRowStats);
        if (load_qdo) copy(p.tma_q.with(smem.q_full[qs]), get<0>(q_views)(_, m), get<1>(q_views)(_, qs));
        bulk_load(smem.lse_log2[qs], p.lse_log2 + int64_t(stats_block0 + m) * T::kBlockM, T::kBytesRowStats, smem.q_full[qs]);
        if constexpr (T::kSplitQdoRings) load_kv_after_first_q();  // dO's own stage frees with K and V
        const int ds = rings.acquire_do(smem);
        expect_bytes(smem.do_full[ds], (load_qdo ? T::kBytesQ : 0) + T::kBytesRowStats);
        if (load_qdo) copy(p.tma_do.with(smem.do_full[ds]), get<0>(do_views)(_, m), get<1>(do_views)(_, ds));
        bulk_load(smem.dsum[ds], p.dsum + int64_t(stats_block0 + m) * T::kBlockM, T::kBytesRowStats, smem.do_full[ds]);
        if constexpr (!T::kSplitQdoRings) load_kv_after_first_q();
        rings.advance();
      }
    }
  }
}

}  // namespace hopattn::kernels::bwd
