// The backward pass's scratch memory, carved out of the caller's workspace:
//
//   counters | dq_block_state (H x R/Bm) | pair_tiles_done (B x H_k) | split_partials (S x 2 x Bn x d)
//   | lse_log2 (H x R) | dsum (H x R) | dq_accum (H x R x d), or the stored dS (stored_ds.hpp)
//
// The counters (the main kernel's tile counter, the concurrent dQ conversion's item counter),
// the query blocks' states, the (batch entry, KV head) pairs' finished-tile counts and the FP32
// dK and dV sums of the S split tiles (both halves add into them, tail_split.hpp) are zeroed by
// one memset before the launches (everything before lse_offset).
// dq_accum is cleared by the preprocess only where every dQ writer adds (launch.hpp,
// clears_dq_accum); elsewhere the first key block to write a query block stores it (dq_writer.hpp).
// Per-row arrays use "padded rows": every (batch entry, head) owns a run of rows that starts at a
// multiple of kBlockM, so that a query block is one contiguous, aligned chunk (a single bulk
// copy or bulk reduce-add). Dense: entry b starts at b * round_up(seqlen_q, kBlockM). Varlen:
// entry b starts at floor((cu_seqlens_q[b] + b * kBlockM) / kBlockM) * kBlockM, which leaves at
// least round_up(len_b, kBlockM) rows before entry b + 1 starts; R = round_up(total_q +
// batch * kBlockM, kBlockM) rows hold them all. Rows of head h live at h * R.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hopattn::kernels::bwd {

template <int kBlockM>
__host__ __device__ __forceinline__ int64_t padded_row_start(bool varlen, int batch_idx, int q_offset,
                                                             int64_t seqlen_q_rounded) {
  return varlen ? (int64_t(q_offset) + int64_t(batch_idx) * kBlockM) / kBlockM * kBlockM
                : int64_t(batch_idx) * seqlen_q_rounded;
}

struct WorkspaceLayout {
  static constexpr size_t kAlign = 256;
  int64_t rows_per_head = 0;      // R
  int64_t seqlen_q_rounded = 0;   // dense: round_up(seqlen_q, kBlockM)
  int split_tiles = 0;            // S: key tiles split in halves (tail_split.hpp), each with a slot
  static constexpr size_t kTileCounterOffset = 0, kConvertItemCounterOffset = sizeof(int);
  size_t state_offset = 0, pair_done_offset = 0, split_partials_offset = 0, lse_offset = 0, dsum_offset = 0,
         dq_accum_offset = 0, total = 0;

  static size_t align(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

  static WorkspaceLayout make(bool varlen, int batch, int seqlen_q, int total_q, int nheads, int nheads_k,
                              int head_dim, int block_m, int split_tiles = 0, int block_n = 0,
                              size_t stored_ds_bytes = 0) {
    WorkspaceLayout w;
    const int64_t bm = block_m;
    w.seqlen_q_rounded = (int64_t(seqlen_q) + bm - 1) / bm * bm;
    w.rows_per_head = varlen ? (int64_t(total_q) + int64_t(batch) * bm + bm - 1) / bm * bm
                             : int64_t(batch) * w.seqlen_q_rounded;
    const int64_t rows = w.rows_per_head * nheads;
    w.state_offset = kAlign;  // the first granule holds the counters
    w.pair_done_offset = w.state_offset + align(size_t(rows / bm) * sizeof(int));
    w.split_tiles = split_tiles;
    w.split_partials_offset = w.pair_done_offset + align(size_t(batch) * size_t(nheads_k) * sizeof(int));
    w.lse_offset = w.split_partials_offset + align(size_t(split_tiles) * 2 * block_n * head_dim * sizeof(float));
    w.dsum_offset = w.lse_offset + align(size_t(rows) * sizeof(float));
    w.dq_accum_offset = w.dsum_offset + align(size_t(rows) * sizeof(float));
    // A backward that stores dS (stored_ds.hpp) has no dq_accum: the region holds dS instead.
    w.total = w.dq_accum_offset + align(stored_ds_bytes > 0 ? stored_ds_bytes : size_t(rows) * head_dim * sizeof(float));
    return w;
  }
};

}  // namespace hopattn::kernels::bwd
