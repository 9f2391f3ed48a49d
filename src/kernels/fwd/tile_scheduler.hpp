// Persistent tile scheduler: the grid is at most one CTA per SM and CTA c takes tiles
// c, c + grid, c + 2 grid, ... (static, so the producer and the consumers of a CTA walk the same
// sequence without talking to each other, and results are deterministic).
//
// Order of tiles, for L2 reuse and load balance:
//  * (head, batch) pairs are cut into L2 sections of heads_per_l2_section pairs, sized on the
//    host so that one section's K and V fit in about half of L2;
//  * inside a section the head is the fastest index, so the CTAs running at one time share few
//    K/V heads;
//  * with a causal or windowed mask, m blocks go longest-first (the diagonal tiles near the end
//    of the sequence see the most keys): largest-processing-time-first, the LPT of the slides.
#pragma once

namespace hopattn::kernels::fwd {

struct TileCoord {
  int m_block, head, batch;
};

struct TileScheduler {
  int num_m_blocks, nheads, num_tiles, section;
  bool longest_first;

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

}  // namespace hopattn::kernels::fwd
