// What the backward's timeline stamps mean (experiment probe: -DHOPATTN_EXP_TIMELINE,
// tools/bwd-timeline; fwd/timeline.hpp records and prints them). Per key tile.
#pragma once

namespace hopattn::kernels::bwd {

// Thread 0 of each consumer warpgroup.
enum BwdTimelineEvent : int {
  kBwdTileReceived,
  kBwdKvLanded,
  kBwdFirstScoresDone,  // the first step's S^T has completed (issued before the steps where they overlap)
  kBwdLastStepStarts,
  kBwdLastDkvDone,      // the last step's dV and dK GEMMs have completed
  kBwdKvReleased,       // K and V freed (after the last step's dQ GEMM; after the drain where dQ lags)
  kBwdLastStepDone,     // the last step's dQ handed off (where dQ lags: the drain's)
  kBwdGradsStored,      // the epilogue's stores are issued
};
// The producer: tile claimed; its K/V load begins (waits for the buffer; at d96-d256 after the
// tile's first Q, and dO where they share a ring); K and V issued.
enum BwdProducerTimelineEvent : int { kBwdTileClaimed, kBwdKvLoadBegins, kBwdKvIssued };

}  // namespace hopattn::kernels::bwd
