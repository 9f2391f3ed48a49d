// A random sweep over the option space of the forward, backward and FP8 forward tests: the
// hand-picked coverage lists name each feature once or twice, and this draws combinations of them
// (head dim, dtype, GQA ratio, unequal and ragged lengths, causal and windowed masks, softcap,
// scale, variable length with empty sequences, strided rows, deterministic mode and the dQ form;
// for the forward also few persistent CTAs, each running many tiles, and keys scaled up so that
// late key blocks lift the kept row offsets) that nobody listed. The FP8 suite draws its descale options on top
// (test_fwd_fp8.cpp).
// The draw is fixed by a seed (for one standard library: the distributions are its own), so a
// failure reproduces from the test's name; HOPATTN_SWEEP_SEED and HOPATTN_SWEEP_CASES
// (environment) draw other or more cases for an exploratory run of the test binary itself
// (CTest lists the tests' names when it builds them, so under CTest they must stay unset).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/attention_case.hpp"

namespace hopattn::testing {

enum class SweepDirection { kForward, kBackward, kForwardFp8 };

// A decimal number from the environment, or the fallback when unset or not a number.
inline uint64_t sweep_env(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  if (!s || *s < '0' || *s > '9') return fallback;
  char* end = nullptr;
  const uint64_t v = std::strtoull(s, &end, 10);
  return *end == '\0' ? v : fallback;
}

// Sizes stay small enough for the float64 reference (one CPU thread) to take seconds per case.
inline AttnCase random_case(std::mt19937_64& rng, SweepDirection dir) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto length = [&](int hi) {  // short and block-edge lengths more often than uniform
    switch (pick(0, 3)) {
      case 0: return pick(1, 17);
      case 1: {  // one draw per statement: the order of a sum's operands is unspecified
        const int blocks = pick(1, hi / 64);
        return 64 * blocks + pick(-1, 1);
      }
      default: return pick(1, hi);
    }
  };
  static const int kHeadDims[] = {64, 96, 128, 192, 256};
  static const int kFp8HeadDims[] = {64, 128, 256};
  const bool fp8 = dir == SweepDirection::kForwardFp8;
  AttnCase c;
  c.dtype = chance(0.5) ? DType::kBFloat16 : DType::kFloat16;
  c.head_dim = kHeadDims[pick(0, 4)];
  if (fp8) {  // e4m3 and its head dims instead (the two draws above are discarded)
    c.dtype = DType::kFloat8E4M3;
    c.head_dim = kFp8HeadDims[pick(0, 2)];
  }
  c.nheads_k = pick(1, 3);
  c.nheads = c.nheads_k * (chance(0.5) ? 1 : pick(2, 4));  // MHA, or GQA / MQA groups
  c.batch = pick(1, 2);
  c.seqlen_q = length(384);
  c.seqlen_k = chance(0.4) ? c.seqlen_q : length(384);
  switch (pick(0, 3)) {  // mask
    case 0: break;
    case 1: c.causal = true; break;
    case 2: c.causal = true; c.window_left = pick(0, 200); break;
    default: c.window_left = chance(0.8) ? pick(0, 200) : -1; c.window_right = pick(0, 100); break;
  }
  if (chance(0.2)) c.softcap = float(pick(2, 50));
  if (chance(0.15)) c.softmax_scale = 0.25f * float(pick(1, 4));
  if (chance(0.25)) {  // variable length, empty and one-token sequences included
    const int n = pick(1, 4);
    for (int i = 0; i < n; ++i) {
      c.varlen_q.push_back(chance(0.15) ? pick(0, 1) : length(320));
      c.varlen_k.push_back(chance(0.15) ? pick(0, 1) : length(320));
    }
    // Empty sequences, not an empty batch.
    if (std::accumulate(c.varlen_q.begin(), c.varlen_q.end(), 0) == 0) c.varlen_q[0] = 1;
    if (std::accumulate(c.varlen_k.begin(), c.varlen_k.end(), 0) == 0) c.varlen_k[0] = 1;
  } else if (chance(0.25)) {
    c.row_pad = (fp8 ? 16 : 8) * pick(1, 8);  // 16-byte aligned rows (TMA) with gaps between them
  }
  // A problem the backward's dense kernels take (bwd_args.hpp's is_dense_bwd_problem; the
  // forward's 2-CTA clusters also need an even number of query blocks): no mask, no softcap,
  // fixed lengths, keys a multiple of 128. The draws above almost never give one (about 1 in 200).
  if (chance(0.15)) {
    c.causal = false;
    c.window_left = c.window_right = -1;
    c.softcap = 0.f;
    c.varlen_q.clear();
    c.varlen_k.clear();
    c.seqlen_k = 128 * pick(1, 3);
  }
  if (dir == SweepDirection::kBackward) {
    if (chance(0.2)) c.deterministic = true;
    // dQ from a stored dS (d192/d256, fixed lengths): the rule takes it up to 2048 keys, so a
    // fixed-length draw at those head dims would seldom run the dQ adds; force each form now and then.
    if (chance(0.3)) c.dq_from_stored_ds = chance(0.5) ? 1 : -1;
  } else {
    // Few CTAs for the problem's tiles: state carried from tile to tile in a persistent CTA.
    if (chance(0.2)) c.max_ctas = pick(1, 4);
    // The first gain_keys keys of each sequence scaled up (the forward walks key blocks last to
    // first): row offsets lifted late, by 2^8 and more, or exps overflowing (recompute path).
    if (chance(0.15)) {
      c.gain_keys = pick(1, 320);
      c.key_gain = chance(0.5) ? 4.f : 64.f;
    }
  }
  return c;
}

inline std::vector<AttnCase> random_cases(SweepDirection dir, uint64_t default_seed, int default_count) {
  const uint64_t seed = sweep_env("HOPATTN_SWEEP_SEED", default_seed);
  const int count = int(sweep_env("HOPATTN_SWEEP_CASES", uint64_t(default_count)));
  // The suites draw apart at one seed; suite d at seed s shares its stream with suite 0 at s + d.
  std::mt19937_64 rng(seed + uint64_t(dir));
  std::vector<AttnCase> cases;
  for (int i = 0; i < count; ++i) cases.push_back(random_case(rng, dir));
  return cases;
}

// Test names: the draw's index first, as two draws may describe the same case.
template <class Info>
std::string sweep_case_name(const Info& info) {
  return "r" + std::to_string(info.index) + "_" + info.param.name();
}

}  // namespace hopattn::testing
