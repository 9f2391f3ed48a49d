// What one backward tile (a block of keys of one KV head) iterates over, shared by the producer,
// the consumers and the dQ writer so that all three walk the same steps: for each query head of
// the KV head's group, the query blocks [m_begin, m_end) that see the tile's keys. Walking the
// whole group in one tile keeps dK and dV of a KV head in registers: GQA needs no atomics.
#pragma once

#include "kernels/bwd/mask.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::bwd {

template <class T>
struct TileWork {
  int n_block, kv_head, batch;
  fwd::SeqInfo si;
  KeyBlockMask<T::kBlockM, T::kBlockN> mask;
  int m_begin, m_end;
  int64_t stats_row0;  // padded row of query row 0 of this batch entry (add head * rows_per_head)

  __device__ __forceinline__ bool empty() const { return m_end <= m_begin; }
};

// The query block of the consumers' current step: steps walk the query blocks [m_begin, m_end)
// of each query head of the KV head's group in turn.
struct StepCursor {
  int m, m_begin, m_end;
  __device__ __forceinline__ void advance() {
    if (++m == m_end) m = m_begin;
  }
};

template <class T, class Params>
__device__ __forceinline__ TileWork<T> tile_work(const Params& p, const fwd::TileScheduler& sched, int tile) {
  const fwd::TileCoord c = sched.decode(tile);  // (n block, kv head, batch)
  TileWork<T> w;
  w.n_block = c.m_block;
  w.kv_head = c.head;
  w.batch = c.batch;
  w.si = fwd::seq_info(p, c.batch);
  w.mask = {w.si.seqlen_q, w.si.seqlen_k, p.window_left, p.window_right};
  w.mask.m_block_range(w.n_block, w.m_begin, w.m_end);
  w.stats_row0 = padded_row_start<T::kBlockM>(p.cu_seqlens_q != nullptr, c.batch, w.si.q_offset,
                                              p.seqlen_q_rounded);
  return w;
}

}  // namespace hopattn::kernels::bwd
