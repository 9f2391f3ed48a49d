// Persistent tile scheduler. The grid is at most one CTA per SM; each CTA's producer thread
// claims tiles and hands each one to the consumer warpgroups through a two-slot ring in shared
// memory (TileRing), so producer and consumers always agree on the sequence.
//
// Claiming: the first tile of CTA c is c (the backward's producer claims that one from the counter
// too, bwd/producer.hpp); after that the producer takes the next unclaimed tile from a global
// counter (atomicAdd on the workspace, zeroed before the launch): greedy, so a CTA
// that drew short tiles simply draws more. A fixed stride (c, c + grid, ...) looked equivalent
// but is badly unbalanced with longest-first order: with 128-tile sections and a stride of 132,
// CTA 0 drew m-blocks 127, 123, 119... and CTA 100 drew 27, 23, 19... (see docs/perf-log.md).
//
// Order of tiles, for L2 reuse and load balance:
//  * (head, batch) pairs are cut into L2 sections of heads_per_l2_section pairs, sized on the
//    host (l2_sections.hpp: 8 heads up to 2048 keys, about half of L2 of K and V beyond);
//  * inside a section the head index runs fastest, so the CTAs running at one time share few
//    K/V heads;
//  * with a causal or windowed mask, m blocks go longest-first (the tiles near the end of the
//    sequence see the most keys): largest-processing-time-first, the LPT of the slides.
// Results do not depend on which CTA runs a tile, so the forward stays deterministic.
//
// 2-CTA clusters (forward, FwdKernelParams::cluster_kv): a tile is a pair of adjacent query
// blocks (num_m_blocks counts pairs); CTA rank r of the cluster runs query block 2 m + r. Both
// CTAs must walk the same tiles, so they take a fixed stride of clusters (first the cluster's
// index, then + grid / 2) instead of the counter: the launcher allows it only without a mask,
// where every tile costs the same and the stride balances as well as the counter.
#pragma once

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/fast_math.h>

#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::fwd {

struct TileCoord {
  int m_block, head, batch;
};

// The divisors of TileScheduler::decode, prepared on the host (multiply-high and shift on the
// device instead of four integer divisions: the backward's warpgroup 0 decodes tiles in few
// registers, and each division took five of them). The last section may hold fewer pairs.
struct TileDivisors {
  cutlass::FastDivmod section_tiles, full_section_pairs, last_section_pairs, heads;
  int full_sections = 0;

  static TileDivisors make(int num_m_blocks, int nheads, int num_tiles, int section) {
    TileDivisors d;
    const int pairs = num_m_blocks > 0 ? num_tiles / num_m_blocks : 0;
    section = section > 0 ? section : 1;
    d.section_tiles = cutlass::FastDivmod(section * (num_m_blocks > 0 ? num_m_blocks : 1));
    d.full_section_pairs = cutlass::FastDivmod(section);
    d.last_section_pairs = cutlass::FastDivmod(pairs % section > 0 ? pairs % section : 1);
    d.heads = cutlass::FastDivmod(nheads > 0 ? nheads : 1);
    d.full_sections = pairs / section;
    return d;
  }
};

struct TileScheduler {
  int num_m_blocks, nheads, num_tiles, section;
  bool longest_first;
  int* counter;  // workspace: tiles claimed beyond the first wave
  TileDivisors div;
  // 2-CTA clusters. A kernel parameter, and the rank is read from its special register when
  // needed: neither holds a register in the consumers' loops (240 registers at d256).
  bool clustered = false;

  __device__ __forceinline__ static int cluster_rank() { return int(cute::block_rank_in_cluster()); }
  __device__ __forceinline__ int first_tile() const { return clustered ? int(blockIdx.x) / 2 : int(blockIdx.x); }
  __device__ __forceinline__ int claim_next() const { return int(gridDim.x) + atomicAdd(counter, 1); }
  // A fixed stride over the grid: the cluster's tiles (clustered), or the CTA's where nobody
  // claims tiles (the Table 2 kernel without warp specialization has no producer).
  __device__ __forceinline__ int strided_next(int tile) const {
    return tile + (clustered ? int(gridDim.x) / 2 : int(gridDim.x));
  }
  // The tile after `tile`: claimed from the counter, or the cluster's fixed stride.
  __device__ __forceinline__ int next_tile(int tile) const { return clustered ? strided_next(tile) : claim_next(); }

  __device__ __forceinline__ TileCoord decode(int tile) const {
    int sec, in_sec, m_index, pair_in_sec;
    div.section_tiles(sec, in_sec, tile);
    if (sec < div.full_sections) div.full_section_pairs(m_index, pair_in_sec, in_sec);
    else div.last_section_pairs(m_index, pair_in_sec, in_sec);
    TileCoord c;
    c.m_block = longest_first ? num_m_blocks - 1 - m_index : m_index;
    if (clustered) c.m_block = 2 * c.m_block + cluster_rank();
    div.heads(c.batch, c.head, sec * section + pair_in_sec);
    return c;
  }
};

// Producer -> consumers hand-off of tile indices: slot s is written by the producer thread, then
// `full[s]` completes (mbarrier arrive has release semantics); consumers read it and arrive on
// `empty[s]`. A tile index >= num_tiles tells the consumers to stop.
struct TileRing {
  int slot[2];
  alignas(8) uint64_t full[2];
  uint64_t empty[2];

  __device__ __forceinline__ void init(int num_consumer_threads) {
    for (int s = 0; s < 2; ++s) {
      cutlass::arch::ClusterBarrier::init(&full[s], 1);
      cutlass::arch::ClusterBarrier::init(&empty[s], num_consumer_threads);
    }
  }
};

// Position in the two-slot ring, in one register (the backward's warpgroup 0 runs its loops in
// few registers).
using TileRingState = PackedPipeState<2>;

__device__ __forceinline__ void publish_tile(TileRing& ring, TileRingState& st, int tile) {
  cutlass::arch::ClusterBarrier::wait(&ring.empty[st.stage()], st.phase() ^ 1);
  ring.slot[st.stage()] = tile;
  cutlass::arch::ClusterBarrier::arrive(&ring.full[st.stage()]);
  st.advance();
}

// The producer's next tile after `tile`, handed to the consumers at once.
__device__ __forceinline__ int claim_and_publish(const TileScheduler& sched, TileRing& ring, TileRingState& st,
                                                 int tile) {
  const int next = sched.next_tile(tile);
  publish_tile(ring, st, next);
  return next;
}

// The consumers' side in two halves: wait_tile returns the next tile and keeps its slot (a
// consumer may read ring.slot[st.stage()] again until it frees it); release_tile frees it.
__device__ __forceinline__ int wait_tile(TileRing& ring, const TileRingState& st) {
  cutlass::arch::ClusterBarrier::wait(&ring.full[st.stage()], st.phase());
  return ring.slot[st.stage()];
}

__device__ __forceinline__ void release_tile(TileRing& ring, TileRingState& st) {
  cutlass::arch::ClusterBarrier::arrive(&ring.empty[st.stage()]);
  st.advance();
}

// The next tile, its slot freed at once.
__device__ __forceinline__ int receive_tile(TileRing& ring, TileRingState& st) {
  const int tile = wait_tile(ring, st);
  release_tile(ring, st);
  return tile;
}

}  // namespace hopattn::kernels::fwd
