// Kernel parameters of the backward kernels (passed as __grid_constant__ structs).
#pragma once

#include <cstdint>

#include "kernels/fwd/params.hpp"
#include "kernels/fwd_args.hpp"

namespace hopattn::kernels::bwd {

// What the pre- and postprocessing kernels and the main kernel all need: lengths (for
// fwd::seq_info) and the workspace arrays.
struct BwdCommonParams {
  int batch{}, seqlen_q{}, seqlen_k{}, nheads{}, nheads_k{}, head_group{};
  int total_q{}, total_k{};
  const int32_t* cu_seqlens_q{};
  const int32_t* cu_seqlens_k{};
  const int32_t* seqused_q{};
  const int32_t* seqused_k{};
  int64_t rows_per_head{}, seqlen_q_rounded{};  // workspace geometry (workspace.hpp)
  float* lse_log2{};
  float* dsum{};
  float* dq_accum{};
  // Per padded query block (dq_writer.hpp): 0 while no key block has written it; then, by
  // default, 1 (claimed by the first writer) and 2 (its store has landed); in deterministic mode
  // the number of key blocks whose contribution has landed.
  int* dq_block_state{};
  // The preprocess clears dq_accum and every writer adds, instead of the first writer of each
  // query block storing (launch.hpp, clears_dq_accum, says where).
  bool dq_accum_cleared{};
  // Concurrent dQ conversion (launch.hpp, concurrent_dq_convert_sms): per (batch entry, KV
  // head) pair, batch * nheads_k + kv_head, the number of its key tiles whose dQ writes have all
  // landed (the main kernel's dQ writer counts, postprocess.hpp waits). Null otherwise.
  int* pair_tiles_done{};
  float softmax_scale{};
};

// First element of (batch entry, head) in a row-major tensor with strides s: dense entries by
// batch stride, varlen entries by their first packed row.
template <class E>
__device__ __forceinline__ E* head_rows(E* base, const Strides3& s, bool varlen, int64_t first_row, int batch,
                                        int head) {
  return base + (varlen ? first_row * s.row : batch * s.batch) + head * s.head;
}

// Preprocess: reads O, dO and LSE, writes dsum and lse_log2.
template <class Element>
struct BwdPreParams : BwdCommonParams {
  const Element* out{};
  const Element* dout{};
  Strides3 out_stride, dout_stride;
  const float* lse{};
  int64_t lse_head_stride{}, lse_batch_stride{};
};

// Postprocess: dq = softmax_scale * dq_accum in the input dtype.
template <class Element>
struct BwdPostParams : BwdCommonParams {
  Element* dq{};
  Strides3 dq_stride;
  // The concurrent form only (postprocess.hpp): its work items are (pair, query head of the
  // group, query block), claimed in pair order from item_counter; a pair is complete once
  // pair_tiles_done counts tiles_per_pair.
  int* item_counter{};
  int num_m_blocks{}, tiles_per_pair{};
};

// The stored dS's TMA store (Traits::kStoreDs, stored_ds.hpp): a base of BwdTmaParams, empty
// elsewhere, so that the other kernels' parameters keep their layout. (A one-byte placeholder
// member instead let the next base, BwdCommonParams, start in its tail padding, at an offset
// that is 8 mod 128, and the kernel then faulted on a misaligned 64-bit constant load.)
template <class Traits, bool = Traits::kStoreDs>
struct DsStoreTma {};
template <class Traits>
struct DsStoreTma<Traits, true> {
  typename Traits::TmaDsStore tma_ds;
  typename Traits::GmemShape shape_ds;  // (keys, queries, heads, batch), padded to whole tiles
};

// The TMA descriptors come first (a base placed at offset 0 of the kernel parameters), as in
// the forward kernel.
template <class Traits>
struct BwdTmaParams : DsStoreTma<Traits> {
  typename Traits::TmaQ tma_q, tma_do;
  typename Traits::TmaK tma_k;
  typename Traits::TmaV tma_v;
  typename Traits::TmaGrad tma_dk, tma_dv;  // TMA stores of dK, dV (Traits::kStagedGrads)
};

template <class Traits>
struct BwdKernelParams : BwdTmaParams<Traits>, BwdCommonParams {
  using Element = typename Traits::Element;
  typename Traits::GmemShape shape_q, shape_k;

  Element* dk{};
  Element* dv{};
  Strides3 dk_stride, dv_stride;

  float scale_log2{};        // as in the forward: (softcap or softmax_scale) * log2(e)
  float softcap_prescale{};  // softmax_scale / softcap
  bool use_softcap{};
  int window_left{}, window_right{};
  bool deterministic{};
  bool rotate_walk{};  // each tile starts its walk level with its keys (schedule.hpp, first_query_block)

  int num_n_blocks{}, num_tiles{}, heads_per_l2_section{};
  // Tail splitting (tail_split.hpp): work items below num_whole_tiles are whole key tiles; each
  // later tile goes out as two items, the halves of its query walk (num_items in all), which add
  // their FP32 dK and dV into the tile's zeroed slot of split_partials.
  int num_whole_tiles{}, num_items{};
  float* split_partials{};
  int* tile_counter{};
  fwd::TileDivisors tile_divisors{};  // TileScheduler::decode's, from the fields above
  int lag_dq_min_steps{};  // tiles with at least this many steps run dQ one step late (consumer.hpp)
  // Always 0. The consumers offset their shared-memory operand views by `step & opaque_zero`
  // so that ptxas cannot hoist the descriptors out of the step loop (consumer.hpp).
  int opaque_zero{};
};

}  // namespace hopattn::kernels::bwd
