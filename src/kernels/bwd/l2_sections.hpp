// How many (KV head, batch) pairs one L2 section of the backward's tile order holds
// (schedule.hpp) for a causal or windowed mask. Host code without CUDA types, so that the CPU
// tests check the rule.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hopattn::kernels::bwd {

// Every key tile of a KV head reads its whole group's Q and dO and adds into the group's dq_accum
// rows. Under a mask the tiles differ in length and a section is run longest tile first (LPT):
//  * At most two waves of tiles: the whole problem is one section, so that LPT balances all of it
//    (+18% at d128 with 8 query heads per KV head, 4k, 256 tiles; session 11, H200). Up to 4
//    waves (session 11's rule) lost to 16-pair sections: d128 with 4 query heads per KV head,
//    causal 1k / 2k (512 tiles): +17% / +4% with this rule (session 36, H100). Except with GQA
//    and 64-key tiles where a wave holds at most four pairs' tiles (from ~1.7k keys at 132
//    SMs): the group's rows outgrow L2 before LPT's balance pays, and the 64-key rule applies
//    (session 37, H100, 256 tiles, causal: d256 with 4 query heads per KV head +11% at 2k, +20%
//    at 4k-8k; d192 with 5 +15..18% at 4k-8k; MQA 8k +9%; 2 query heads per KV head 4k 0.99;
//    one section stays best at 1k).
//  * 64-key tiles (head dims 192 and 256): about one wave of tiles per section, at most 8 pairs
//    and at least 2 without GQA (1 pair lost 1-1.5% at d256 8k-16k), 1 with GQA (+5..10% at
//    d192/d256 8k-16k against 2; session 36).
//    These tiles are bound by L2 traffic (the dQ reduce-adds, Q and dO); a wave's tiles drawn
//    from few heads share it, and with GQA a pair's tiles each read the whole group's Q and dO.
//    Measured on an H100 (session 36, in one process) against the earlier rule (8 pairs, and
//    problems of up to 4 waves one section): with 4-5 query heads per KV head, causal, 512-4k,
//    +23..63%; without GQA 0.98-1.0 at 512-4k and windows, +3..7% at 8k-16k.
//  * 128-key tiles (head dims 64..128): 16 pairs with GQA (smaller sections lost 5..9%, session
//    36) and at d64 (its best size moved with the length: 4 pairs +5% at 1k, -3..5% at 2k-4k).
//    Without GQA at d96/d128, about one wave of tiles per section, 1 to 16 pairs. Session 37,
//    H100, against 16 pairs in one process, five rounds: causal d128 2k / 4k / 8k / 16k 1.008 /
//    1.038 / 1.059 / 1.045 (one pair at 16k; two read 1.010), d96 2k / 4k / 8k / 16k 1.043 /
//    1.052 / 1.056 / 1.062, windows at d128 4k-8k 1.03-1.06; 1k the same.
inline int64_t bwd_masked_section_pairs(int64_t pairs, int64_t n_blocks, int64_t block_n, int64_t num_sms,
                                        int64_t head_group, int64_t head_dim) {
  constexpr int64_t kWideTileKeys = 64, kMaxWidePairs = 8, kNarrowTilePairs = 16, kOneWaveMinHeadDim = 96;
  constexpr int64_t kOneSectionWaves = 2;
  num_sms = std::max<int64_t>(num_sms, 1);
  n_blocks = std::max<int64_t>(n_blocks, 1);
  pairs = std::max<int64_t>(pairs, 1);
  const bool wide_tiles = block_n <= kWideTileKeys;
  const bool long_gqa_pairs = wide_tiles && head_group > 1 && num_sms / n_blocks <= 4;
  if (pairs * n_blocks <= kOneSectionWaves * num_sms && !long_gqa_pairs) return pairs;
  int64_t section = kNarrowTilePairs;
  if (wide_tiles) {
    section = std::clamp(num_sms / n_blocks, head_group > 1 ? int64_t(1) : int64_t(2), kMaxWidePairs);
  } else if (head_group == 1 && head_dim >= kOneWaveMinHeadDim) {
    section = std::clamp(num_sms / n_blocks, int64_t(1), kNarrowTilePairs);
  }
  return std::min(pairs, section);
}

// Deterministic mode under a causal or windowed mask. The adds into a query block go in key-block
// order, so the tiles of one head that run together form a pipeline, each a step behind the one
// before: the fewer of them per head, the less each waits, and the more heads' rows share L2.
// Sections of about 4 waves of tiles up to 2k keys and 8 beyond measured best (session 37, H100,
// against sections of half of L2 in Q and dO, the unmasked rule): causal d128 1k / 2k / 8k / 16k
// 1.03 / 1.12 / 1.29 / 1.33 with the sizes this gives, d256 1.09 / 1.13 / 1.56 / 2.0, d64 1k / 4k
// / 16k 1.11 / 1.10 / 1.13, window (1024, 0) at d128 4k 2.2, GQA 4 at d128 4k 1.39.
inline int64_t bwd_deterministic_masked_section_pairs(int64_t pairs, int64_t n_blocks, int64_t seqlen_k,
                                                      int64_t num_sms) {
  const int64_t waves = seqlen_k <= 2048 ? 4 : 8;
  const int64_t tiles = waves * std::max<int64_t>(num_sms, 1);
  return std::clamp(tiles / std::max<int64_t>(n_blocks, 1), int64_t(1), std::max<int64_t>(pairs, 1));
}

}  // namespace hopattn::kernels::bwd
