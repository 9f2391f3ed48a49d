// What one backward tile (a block of keys of one KV head) iterates over, shared by the producer,
// the consumers and the dQ writer so that all three walk the same steps: for each query head of
// the KV head's group, the query blocks [m_begin, m_end) that see the tile's keys, from m_first
// on and around (m_first .. m_end - 1, then m_begin .. m_first - 1). Walking the whole group in
// one tile keeps dK and dV of a KV head in registers: GQA needs no atomics. The last tiles may go
// out as two work items each, the two halves of that walk (tail_split.hpp).
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
  int m_begin, m_end, m_first;
  int64_t stats_row0;  // padded row of query row 0 of this batch entry (add head * rows_per_head)

  __device__ __forceinline__ bool empty() const { return m_end <= m_begin; }
};

// The query block a tile's walk starts at. Without a mask all tiles of a head walk the same query
// blocks, side by side (one-pair L2 sections, launch.hpp); where the first writer of a block
// stores and the others wait for that store (dq_writer.hpp), starting every tile at block 0 would
// make all but one of them wait at every step. With `rotate`, tile n starts at block
// n * kBlockN / kBlockM (modulo the count), the one level with its keys, so the tiles of a head
// reach each block in turn, kBlockN / kBlockM steps apart.
template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ int first_query_block(int n_block, int m_begin, int m_end, bool rotate) {
  if (!rotate || m_end <= m_begin) return m_begin;
  return m_begin + n_block * kBlockN / kBlockM % (m_end - m_begin);
}

// A tile's query blocks in walking order, as a loop cursor: `for (QueryWalk q{b, f, e};
// !q.done(); q.advance())` visits q.m(): a position v from m_first up to m_first + count, whose
// block wraps past m_end to m_begin (where the walk is not rotated, m_first is m_begin and this
// is the plain loop). The cursor holds one register and reads the tile's bounds where they live
// (warpgroup 0's loops run in 24 registers at d = 64, and the deterministic dQ writer keeps its
// tile's fields in shared memory; session 23's form held the block, the blocks left and both
// bounds: 52 B of spills at d = 64).
struct QueryWalk {
  int v;
  const int &begin, &first, &end;
  __device__ __forceinline__ QueryWalk(const int& m_begin, const int& m_first, const int& m_end)
      : v(m_first), begin(m_begin), first(m_first), end(m_end) {}
  __device__ __forceinline__ int m() const { return v < end ? v : v - (end - begin); }
  __device__ __forceinline__ bool done() const { return v - first >= end - begin; }
  __device__ __forceinline__ void advance() { ++v; }
};

// The query block of the consumers' current step: steps walk the query blocks of each query head
// of the KV head's group in turn, each in walking order.
struct StepCursor {
  int m, m_begin, m_end;
  __device__ __forceinline__ void advance() {
    if (++m == m_end) m = m_begin;
  }
};

// Of a work item: the index of the split tile it is a half of (tail_split.hpp), or -1 (a whole tile).
template <class Params>
__device__ __forceinline__ int split_of_item(const Params& p, int item) {
  return item < p.num_whole_tiles ? -1 : (item - p.num_whole_tiles) / 2;
}

// Work item `item` (below p.num_items): tile `item` whole, or past p.num_whole_tiles half
// (item - num_whole_tiles) % 2 of the next tiles in turn, whose query blocks it splits in two
// (the first half takes the lower ones, per query head of the group).
template <class T, class Params>
__device__ __forceinline__ TileWork<T> tile_work(const Params& p, const fwd::TileScheduler& sched, int item) {
  const int past = item - p.num_whole_tiles;
  const int tile = past < 0 ? item : p.num_whole_tiles + past / 2;
  const fwd::TileCoord c = sched.decode(tile);  // (n block, kv head, batch)
  TileWork<T> w;
  w.n_block = c.m_block;
  w.kv_head = c.head;
  w.batch = c.batch;
  w.si = fwd::seq_info(p, c.batch);
  w.mask = {w.si.seqlen_q, w.si.seqlen_k, p.window_left, p.window_right};
  w.mask.m_block_range(w.n_block, w.m_begin, w.m_end);
  if (past >= 0) {
    const int mid = w.m_begin + (w.m_end - w.m_begin) / 2;
    if (past % 2 == 0) w.m_end = mid;
    else w.m_begin = mid;
  }
  w.m_first = first_query_block<T::kBlockM, T::kBlockN>(w.n_block, w.m_begin, w.m_end, p.rotate_walk);
  w.stats_row0 = padded_row_start<T::kBlockM>(p.cu_seqlens_q != nullptr, c.batch, w.si.q_offset,
                                              p.seqlen_q_rounded);
  return w;
}

}  // namespace hopattn::kernels::bwd
