// Persistent tile scheduler. The grid is at most one CTA per SM; each CTA's producer thread
// claims tiles and hands each one to the consumer warpgroups through a two-slot ring in shared
// memory (TileRing), so producer and consumers always agree on the sequence.
//
// Claiming: the first tile of CTA c is c; after that the producer takes the next unclaimed tile
// from a global counter (atomicAdd on the workspace, zeroed before the launch): greedy, so a CTA
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
#pragma once

#include <cutlass/arch/barrier.h>

namespace hopattn::kernels::fwd {

struct TileCoord {
  int m_block, head, batch;
};

struct TileScheduler {
  int num_m_blocks, nheads, num_tiles, section;
  bool longest_first;
  int* counter;  // workspace: tiles claimed beyond the first wave

  __device__ __forceinline__ int first_tile() const { return blockIdx.x; }
  __device__ __forceinline__ int claim_next() const { return int(gridDim.x) + atomicAdd(counter, 1); }

  __device__ __forceinline__ TileCoord decode(int tile) const {
    const int tiles_per_section = section * num_m_blocks;
    const int sec = tile / tiles_per_section;
    const int in_sec = tile - sec * tiles_per_section;
    const int pairs_total = num_tiles / num_m_blocks;
    const int pairs_here = min(section, pairs_total - sec * section);
    const int m_index = in_sec / pairs_here;
    const int pair = sec * section + (in_sec - m_index * pairs_here);
    TileCoord c;
    c.m_block = longest_first ? num_m_blocks - 1 - m_index : m_index;
    c.head = pair % nheads;
    c.batch = pair / nheads;
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

// Position in the two-slot ring in one register (slot = count & 1, lap parity = count >> 1): the
// backward's warpgroup 0 runs its loops in few registers.
struct TileRingState {
  uint32_t count = 0;
  __device__ __forceinline__ int stage() const { return int(count & 1); }
  __device__ __forceinline__ uint32_t phase() const { return count >> 1; }
  __device__ __forceinline__ void advance() { count = (count + 1) & 3; }
};

__device__ __forceinline__ void publish_tile(TileRing& ring, TileRingState& st, int tile) {
  cutlass::arch::ClusterBarrier::wait(&ring.empty[st.stage()], st.phase() ^ 1);
  ring.slot[st.stage()] = tile;
  cutlass::arch::ClusterBarrier::arrive(&ring.full[st.stage()]);
  st.advance();
}

__device__ __forceinline__ int receive_tile(TileRing& ring, TileRingState& st) {
  cutlass::arch::ClusterBarrier::wait(&ring.full[st.stage()], st.phase());
  const int tile = ring.slot[st.stage()];
  cutlass::arch::ClusterBarrier::arrive(&ring.empty[st.stage()]);
  st.advance();
  return tile;
}

}  // namespace hopattn::kernels::fwd
