// Experiment probe, compiled only with -DHOPATTN_EXP_TIMELINE=<cta> (tools/fwd-timeline): SM
// clock stamps of each tile's phases in one CTA, printed by a one-thread kernel launched after
// the forward (launch.hpp), so that the cost of a tile boundary splits into its parts (Q arriving,
// the first Q K^T, the last P V, the epilogue). One thread per role records: the producer's loader,
// thread 0 of each consumer warpgroup and, in the FP8 in-ring kernels, transposer thread 0 (role 3,
// kTransposerRole). Without the switch every call compiles to nothing.
#pragma once

#include <cstdint>
#include <cstdio>

namespace hopattn::kernels::fwd {

// Consumer events per tile (thread 0 of its warpgroup).
enum TimelineEvent : int {
  kTileReceived,  // receive_tile returned
  kQLanded,       // wait for the tile's Q done
  kFirstScoresIssued,
  kFirstScoresDone,
  kFirstPvIssued,
  kLastPvIssued,
  kLastPvDone,
  kEpilogueDone,
  kSetupDone,  // the tile's setup (decode, bounds, descales, O cleared) done: the Q wait begins
  kQReadyAtSetup,  // not a stamp: 1 if the tile's Q had landed when the setup was done, else 0
  // The epilogue's steps (epilogue.hpp):
  kEpilogueScaled,     // O scaled by 1 / rowsum
  kEpilogueRingFree,   // in-ring output: the wait for the ring's readers passed
  kEpilogueStsmIssued, // in-ring output: the last stmatrix issued
  kEpilogueFenced,     // in-ring output: the async-proxy fence passed (the stmatrix drained)
  kVtReadyAtFirstPv,   // not a stamp: 1 if the first P V's V (V^T) had landed when it was issued
  kFirstPvReached,     // the first P V's wait for its V (V^T) begins
  kNumTimelineEvents
};
// Producer events per tile (the loader).
enum ProducerTimelineEvent : int { kTileClaimed, kQIssued, kLastVIssued };
// FP8 d = 256 transposer thread 0 (role 3) per received tile: the previous tile's O store has read
// the ring half of the tile's first V^T, and that V^T was released to the consumers.
enum TransposerTimelineEvent : int { kTransposerReceived, kOutputRead, kFirstVtReleased };
constexpr int kTransposerRole = 3;

#ifdef HOPATTN_EXP_TIMELINE
// Stamps in global memory (a static buffer of each kernel's translation unit), so that the probe
// adds a store per event and three registers, not a local-memory array, to the kernel it times.
// Each mark is a branch taken by one lane, between GEMM issues and waits: ptxas may schedule the
// probed kernel a little differently (the d256 kernel spills 24-28 B with it).
constexpr int kTimelineMaxTiles = 48;
static __device__ long long timeline_stamps[4][kTimelineMaxTiles][kNumTimelineEvents];
static __device__ int timeline_tiles[4];  // tiles each role recorded

struct Timeline {
  bool on;
  int role, tile = -1;  // role: 0 producer, 1 + w consumer warpgroup w, kTransposerRole (FP8 in-ring)
  // (The no-warp-specialization ablation kernel has no producer: there its warpgroup 1 records as
  // role 1 and warpgroup 0 not at all.)
  // A consumer's: thread 0 of each consumer warpgroup records.
  __device__ Timeline()
      : on(threadIdx.x >= 128 && threadIdx.x % 128 == 0 && int(blockIdx.x) == HOPATTN_EXP_TIMELINE),
        role(int(threadIdx.x) / 128) {}
  // The producer's: the loader (constructed by that thread only), or transposer thread 0
  // (kTransposerRole; `records` picks the thread).
  __device__ explicit Timeline(int producer_role, bool records = true)
      : on(records && int(blockIdx.x) == HOPATTN_EXP_TIMELINE), role(producer_role) {}
  __device__ __forceinline__ void next_tile() {
    if (on && ++tile < kTimelineMaxTiles) {
      for (int e = 0; e < kNumTimelineEvents; ++e) timeline_stamps[role][tile][e] = 0;
      timeline_tiles[role] = tile + 1;
    }
  }
  __device__ __forceinline__ void mark(int event) {
    if (on && tile >= 0 && tile < kTimelineMaxTiles) timeline_stamps[role][tile][event] = clock64();
  }
  // A value instead of a stamp; `value` is called only by the recording thread of a probe build.
  template <class Value>
  __device__ __forceinline__ void record(int event, Value&& value) {
    if (on && tile >= 0 && tile < kTimelineMaxTiles) timeline_stamps[role][tile][event] = value();
  }
};

// Launched after the kernel (launch.hpp): with printf inside the warp-specialized kernel (its
// producer runs in 24 registers) the launch ended in an illegal-instruction error. `bwd`: the
// backward's stamps (bwd/launch.hpp), printed as "timeline bwd role ..." so that tools/bwd-timeline
// never reads the forward's, which the same benchmark run also prints.
static __global__ void timeline_print_kernel(bool bwd) {
  for (int role = 0; role < 4; ++role) {
    for (int t = 0; t < timeline_tiles[role]; ++t) {
      const long long* e = timeline_stamps[role][t];
      static_assert(kNumTimelineEvents == 16, "the line below prints every event");
      printf("timeline %srole %d tile %d: %lld %lld %lld %lld %lld %lld %lld %lld"
             " %lld %lld %lld %lld %lld %lld %lld %lld\n",
             bwd ? "bwd " : "", role, t, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8], e[9], e[10], e[11],
             e[12], e[13], e[14], e[15]);
    }
    timeline_tiles[role] = 0;
  }
}
#else
struct Timeline {
  __device__ Timeline() {}
  __device__ explicit Timeline(int, bool = true) {}
  __device__ __forceinline__ void next_tile() {}
  __device__ __forceinline__ void mark(int) {}
  template <class Value>
  __device__ __forceinline__ void record(int, Value&&) {}
};
#endif

// Experiment probe, compiled only with -DHOPATTN_EXP_BLOCK_PROBE=<cta> (tools/fwd-block-probe):
// SM clock stamps per key block (the first kProbeBlocks blocks each role of that CTA handles,
// counted across tiles), for the order in which the loads, transposes and GEMM waits meet (the
// FP8 kernel's V chain, perf-log session 58). Each role counts its own blocks; the 16-bit
// producer stamps nothing. Printed after the forward by block_probe_print_kernel as
// "blockprobe j: <events>" (tools/block-probe-summary reads them).
enum BlockProbeEvent : int {
  kPbVIssued,     // the loader issued V_j
  kPbKIssued,     // the loader issued K_j
  kPbVLanded,     // transposer thread 32: V_j landed (its wait passed)
  kPbSlotFree,    // transposer thread 32: V^T_j's slot free
  kPbVtDone,      // transposer thread 32: its part of V^T_j written and released
  kPbVtDoneT0,    // transposer thread 0 (d256: the warp with the most ranges, 6 of 16): the same
  kPbKWaited,     // consumer warpgroup 0: K_j landed (its wait passed)
  kPbKReleased,   // consumer warpgroup 1: K_j released
  kPbPvIssued,    // consumer warpgroup 0: the wait for V^T_j passed (P V_j issues)
  kPbVReleased,   // consumer warpgroup 1: V^T_j's slot released
  kNumBlockProbeEvents
};
#ifdef HOPATTN_EXP_BLOCK_PROBE
constexpr int kProbeBlocks = 96;
static __device__ long long block_probe_stamps[kProbeBlocks][kNumBlockProbeEvents];
__device__ __forceinline__ void block_probe_mark(int j, int event) {
  if (int(blockIdx.x) == HOPATTN_EXP_BLOCK_PROBE && j >= 0 && j < kProbeBlocks) block_probe_stamps[j][event] = clock64();
}
static __global__ void block_probe_print_kernel() {
  static_assert(kNumBlockProbeEvents == 10, "the line below prints every event");
  for (int j = 0; j < kProbeBlocks; ++j) {
    long long* e = block_probe_stamps[j];
    printf("blockprobe %d: %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld\n", j, e[0], e[1], e[2], e[3], e[4], e[5],
           e[6], e[7], e[8], e[9]);
    for (int k = 0; k < kNumBlockProbeEvents; ++k) e[k] = 0;  // a shorter next launch leaves no stale blocks
  }
}
// One role's block count; mark() stamps block `count` where the caller's thread records.
struct BlockProbeCounter {
  int count = 0;
  __device__ __forceinline__ void mark(int event, bool records = true) const {
    if (records) block_probe_mark(count, event);
  }
  __device__ __forceinline__ void next() { ++count; }
};
#else
struct BlockProbeCounter {  // without the switch every call compiles to nothing
  __device__ __forceinline__ void mark(int, bool = true) const {}
  __device__ __forceinline__ void next() {}
};
#endif

}  // namespace hopattn::kernels::fwd
