// How many (head, batch) pairs one L2 section of the tile order holds (tile_scheduler.hpp). Host
// code without CUDA types, so that the CPU tests check the rule.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hopattn::kernels::fwd {

// A whole number of KV-head groups (head_group query heads share one K/V head).
//  * Long keys: as many heads as fill about half of L2 with their K and V.
//  * Up to 2048 keys: 8 query heads, so that a wave of CTAs runs all m-blocks of few heads and each
//    K/V block is fetched once for ~16 readers. Measured on an H200 with one build, the sizes
//    alternating in one process (docs/perf-log.md, session 7): +3.5..4% at d128 1k and 2k and at
//    d256 1k, flat at d64 and under a causal mask. At 4k the smaller sizes were no better, so the
//    L2 fill rule stays there.
inline int64_t l2_section_pairs(int64_t seqlen_k, int64_t kv_bytes_per_head, int64_t head_group,
                                int64_t l2_bytes) {
  constexpr int64_t kShortKeys = 2048, kShortSectionHeads = 8;
  const int64_t kv_heads = seqlen_k <= kShortKeys ? (kShortSectionHeads + head_group - 1) / head_group
                                                  : l2_bytes / 2 / std::max<int64_t>(1, kv_bytes_per_head);
  return std::max<int64_t>(1, kv_heads) * head_group;
}

}  // namespace hopattn::kernels::fwd
