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
//    d256 1k, flat at d64. At 4k the smaller sizes were no better, so the L2 fill rule stays there.
//  * Longest-first order (causal or windowed masks): 16 query heads up to 4096 keys, 8 beyond. The
//    m-blocks of a section run longest-first, so a larger section balances the CTAs' loads
//    better than the rules above, while few heads keep their K and V in L2. Measured on an H200
//    (session 11, sizes alternating in one process): 16 against the rules above +2..5% at d64
//    and d128 and +4..8% at d256, 1k-4k; at 8k and 16k, 8 or 16 against the L2 fill rule (1-12
//    heads there) +3..10% at d128 and +11..20% at d256, 4 heads lost.
inline int64_t l2_section_pairs(int64_t seqlen_k, int64_t kv_bytes_per_head, int64_t head_group,
                                int64_t l2_bytes, bool longest_first) {
  constexpr int64_t kShortKeys = 2048, kShortSectionHeads = 8;
  constexpr int64_t kLptKeys = 4096, kLptShortSectionHeads = 16, kLptLongSectionHeads = 8;
  const auto groups_of = [&](int64_t heads) { return (heads + head_group - 1) / head_group; };
  int64_t kv_heads;
  if (longest_first) kv_heads = groups_of(seqlen_k <= kLptKeys ? kLptShortSectionHeads : kLptLongSectionHeads);
  else if (seqlen_k <= kShortKeys) kv_heads = groups_of(kShortSectionHeads);
  else kv_heads = l2_bytes / 2 / std::max<int64_t>(1, kv_bytes_per_head);
  return std::max<int64_t>(1, kv_heads) * head_group;
}

}  // namespace hopattn::kernels::fwd
