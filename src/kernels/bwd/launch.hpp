// Host side of the backward pass: workspace carving, TMA descriptors, scheduler sizing, and the
// launches (one memset of the counters and the query-block states, preprocess (clearing
// dq_accum where every dQ writer adds), main kernel, postprocess (after the main kernel, or
// concurrent with it); or, where dQ comes from a stored dS (stored_ds.hpp), the main kernel that
// stores it and the dQ kernel), all on one stream and graph-capturable.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include <cute/tensor.hpp>

#include "api/cuda_check.hpp"
#include "hopattn/error.hpp"
#include "kernels/bwd/dq_convert_rule.hpp"
#include "kernels/bwd/kernel.hpp"
#include "kernels/bwd/l2_sections.hpp"
#include "kernels/bwd/postprocess.hpp"
#include "kernels/bwd/preprocess.hpp"
#include "kernels/bwd/stored_ds.hpp"
#include "kernels/bwd/stored_ds_rule.hpp"
#include "kernels/bwd/tail_split_rule.hpp"
#include "kernels/bwd/tile_table.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/bwd_args.hpp"
#include "kernels/fwd/launch.hpp"

namespace hopattn::kernels::bwd {

template <class T>
int split_tail_tiles(const BwdArgs& a);

// Whether T's launch has a stored-dS main kernel (stored_ds.hpp): the wide kernel (d192, d256),
// whose dQ adds bound it (perf-log, sessions 30-31) and whose two P/dS buffers let a TMA store
// read one while the next step fills the other. Measured on an H100 (session 48): +16..23% at
// 512 keys at both head dims.
// Two Q stages too: the stored step issues the next step's S^T (and dP^T) before it frees this
// step's stages (consumer_wide.hpp), which with one stage would wait for itself; the default
// shapes have two, experiment shapes (HOPATTN_BWD256_SHAPE=112211) may not.
template <class T>
constexpr bool has_stored_ds_kernel() {
  if constexpr (T::kStoreDs || !T::kSplitHeadDim) return false;  // the narrow traits have no kPdsBuffers
  else return T::kPdsBuffers == 2 && T::kQStages >= 2;
}

// Whether the backward stores dS and computes dQ in a second kernel (stored_ds.hpp) rather than
// adding dQ partials into dq_accum: stored_ds_rule.hpp.
template <class T>
bool uses_stored_ds(const BwdArgs& a) {
  if constexpr (T::kStoreDs) return true;
  else if constexpr (!has_stored_ds_kernel<T>()) return false;
  else return stored_ds_rule(a);
}

// The stored dS's keys and queries per (head, batch entry): whole tiles of each.
template <class T>
std::pair<int64_t, int64_t> stored_ds_extent(const BwdArgs& a) {
  return {(int64_t(a.seqlen_k) + T::kBlockN - 1) / T::kBlockN * T::kBlockN,
          (int64_t(a.seqlen_q) + T::kBlockM - 1) / T::kBlockM * T::kBlockM};
}

// The stored dS^T as a global tensor (keys, queries, heads, batch), queries contiguous, in the
// workspace's dq_accum region (stored_ds.hpp).
template <class T>
auto stored_ds_view(const BwdArgs& a, char* ds) {
  using namespace cute;
  const auto [keys, queries] = stored_ds_extent<T>(a);
  auto shape = make_shape(int32_t(keys), int32_t(queries), int32_t(a.nheads), int32_t(a.batch));
  auto stride = make_stride(queries, _1{}, keys * queries, keys * queries * a.nheads);
  return make_tensor(make_gmem_ptr(reinterpret_cast<const typename T::Element*>(ds)), shape, stride);
}

template <class T>
size_t stored_ds_bytes(const BwdArgs& a) {
  if (!uses_stored_ds<T>(a)) return 0;
  const auto [keys, queries] = stored_ds_extent<T>(a);
  return size_t(keys * queries * a.nheads * a.batch) * sizeof(typename T::Element);
}

template <class T>
WorkspaceLayout workspace_layout(const BwdArgs& a) {
  return WorkspaceLayout::make(a.varlen(), a.batch, a.seqlen_q, a.total_q, a.nheads, a.nheads_k, T::kHeadDim,
                               T::kBlockM, split_tail_tiles<T>(a), T::kBlockN, stored_ds_bytes<T>(a));
}

template <class T>
size_t workspace_bytes(const BwdArgs& a) {
  return workspace_layout<T>(a).total;
}

// Whether the preprocess clears dq_accum and every dQ writer adds (BwdCommonParams), rather than
// the first writer of each query block storing (dq_writer.hpp). The first store saves the clear
// and the main kernel's first read of each block: under a causal mask, H100, +11% at d64 and
// +24% at d128 at 512 keys, +9% at d128 1k, neutral from 4k (perf-log, session 23). With the
// 64-key tiles of d192 and d256 the tile of the next key block reaches a query block just one
// step after its first writer: 0.89-0.94x at causal 2k-8k, so beyond 1024 keys they keep the
// clear. Without a mask the key blocks of a head walk the same query blocks side by side; all
// but one would wait for that store at every step (d128 2k 0.91x, d256 0.85x) unless each tile
// starts its walk elsewhere (rotate_walk, schedule.hpp: +5..6% at d128 512, +4% at d256 512,
// +1..3% at 1k, +5% with GQA 4 at d128 1k, 0.99-1.01 at 2k, -1% at 8k; d64 +10% at 512, +6% at
// 1k), so unmasked problems take first stores only up to 1024 keys.
template <class T>
bool clears_dq_accum(const BwdArgs& a) {
  if (uses_stored_ds<T>(a)) return false;  // no dq_accum
  const bool narrow_tiles_past_1k = T::kBlockN < 128 && a.seqlen_k > 1024;  // varlen: the longest sequence
  if (a.has_window() || a.deterministic) return narrow_tiles_past_1k;
  return a.seqlen_k > 1024;
}

// How many SMs convert dQ while the main kernel runs (postprocess.hpp, the concurrent form); 0:
// the postprocess runs after it. The rule: dq_convert_rule.hpp; not in deterministic mode, whose
// slower main kernel leaves the conversion a smaller share (0.99 at causal 1k, session 38).
template <class T>
int concurrent_dq_convert_sms(const BwdArgs& a) {
  // The conversion waits for the main kernel's tiles: only where it has some (launch: total_k > 0
  // and num_tiles > 0; varlen's longest sequence may be 0 keys with total_k > 0) and queries.
  const bool main_has_tiles = a.seqlen_k > 0 && (!a.varlen() || a.total_k > 0) && a.batch > 0 && a.nheads_k > 0;
  if (!main_has_tiles || a.seqlen_q <= 0 || a.dq_convert_sms < 0 || a.num_sms < 2 || uses_stored_ds<T>(a)) return 0;
  // Forced tail splitting: the conversion counts whole tiles per pair (postprocess.hpp).
  if (a.split_tail_tiles > 0) return 0;
  // Its work items (query blocks of every head) are counted in 32 bits, with room for the
  // claims past the end.
  const int64_t items = int64_t(a.batch) * a.nheads * ((int64_t(a.seqlen_q) + T::kBlockM - 1) / T::kBlockM);
  if (items > INT32_MAX / 2) return 0;
  if (a.dq_convert_sms > 0) return std::min(a.dq_convert_sms, a.num_sms - 1);
  return a.deterministic ? 0 : concurrent_dq_convert_sms_rule(a.seqlen_k, a.has_window(), a.num_sms);
}

// The main kernel's key tiles: every key block of every (batch entry, KV head) pair.
template <class T>
int64_t main_kernel_tiles(const BwdArgs& a) {
  return (int64_t(a.seqlen_k) + T::kBlockN - 1) / T::kBlockN * a.nheads_k * a.batch;
}

// How many of the main kernel's last tiles go out as two halves (tail_split.hpp): the rule
// (tail_split_rule.hpp) where the dQ conversion runs after the main kernel (the concurrent one
// counts whole tiles), or the forced count; none in deterministic mode (its dQ adds go in
// key-block order, which halves would have to keep too).
template <class T>
int split_tail_tiles(const BwdArgs& a) {
  const int64_t tiles = main_kernel_tiles<T>(a);
  if (a.split_tail_tiles < 0 || a.deterministic || tiles <= 0 || tiles > INT32_MAX / 2) return 0;
  if (a.split_tail_tiles > 0) return int(std::min<int64_t>(a.split_tail_tiles, tiles));
  if (concurrent_dq_convert_sms<T>(a) > 0) return 0;
  return split_tail_tiles_rule(tiles, int(std::min<int64_t>(tiles, a.num_sms)));
}

// The fields every backward kernel reads, the same for the three launches (so the clear policy
// and the form of the dQ conversion are decided in one place).
template <class T>
void fill_common(BwdCommonParams& c, const BwdArgs& a, const WorkspaceLayout& wl, char* ws) {
  fwd::copy_sequence_fields(c, a);
  c.nheads_k = a.nheads_k;
  c.rows_per_head = wl.rows_per_head;
  c.seqlen_q_rounded = wl.seqlen_q_rounded;
  c.lse_log2 = reinterpret_cast<float*>(ws + wl.lse_offset);
  c.dsum = reinterpret_cast<float*>(ws + wl.dsum_offset);
  c.dq_accum = reinterpret_cast<float*>(ws + wl.dq_accum_offset);
  c.dq_block_state = reinterpret_cast<int*>(ws + wl.state_offset);
  c.dq_accum_cleared = clears_dq_accum<T>(a);
  c.pair_tiles_done = concurrent_dq_convert_sms<T>(a) > 0 ? reinterpret_cast<int*>(ws + wl.pair_done_offset) : nullptr;
  c.softmax_scale = a.softmax_scale;
}

template <class T>
BwdKernelParams<T> make_main_params(const BwdArgs& a, const WorkspaceLayout& wl, char* ws) {
  using namespace cute;
  using Element = typename T::Element;
  const bool varlen = a.varlen();
  const int q_rows = varlen ? a.total_q : a.seqlen_q;
  const int k_rows = varlen ? a.total_k : a.seqlen_k;
  // A tensor map cannot describe zero rows; without queries nothing is loaded from Q or dO (the
  // tiles only write zero dK, dV), so a one-row map over k's memory stands in.
  const bool no_queries = q_rows == 0;
  auto mQ = fwd::make_gmem_view<T>(no_queries ? a.k : a.q, no_queries ? a.k_stride : a.q_stride,
                                   std::max(q_rows, 1), a.nheads, a.batch, varlen);
  auto mdO = fwd::make_gmem_view<T>(no_queries ? a.k : a.dout, no_queries ? a.k_stride : a.dout_stride,
                                    std::max(q_rows, 1), a.nheads, a.batch, varlen);
  auto mK = fwd::make_gmem_view<T>(a.k, a.k_stride, k_rows, a.nheads_k, a.batch, varlen);
  auto mV = fwd::make_gmem_view<T>(a.v, a.v_stride, k_rows, a.nheads_k, a.batch, varlen);

  BwdKernelParams<T> p{};
  fill_common<T>(p, a, wl, ws);
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, mQ, take<0, 2>(typename T::SmemLayoutQ{}), typename T::TileQ{}, _1{});
  p.tma_do = make_tma_copy(SM90_TMA_LOAD{}, mdO, take<0, 2>(typename T::SmemLayoutdO{}), typename T::TileQ{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, typename T::SmemLayoutK{}, typename T::TileKV{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{}, mV, typename T::SmemLayoutV{}, typename T::TileKV{}, _1{});
  if constexpr (T::kStagedGrads) {
    if (k_rows > 0) {  // else no tile writes dK or dV, and a tensor map cannot describe zero rows
      auto mdK = fwd::make_gmem_view<T>(a.dk, a.dk_stride, k_rows, a.nheads_k, a.batch, varlen);
      auto mdV = fwd::make_gmem_view<T>(a.dv, a.dv_stride, k_rows, a.nheads_k, a.batch, varlen);
      const auto box = take<0, 2>(typename T::SmemLayoutGrad{});
      p.tma_dk = make_tma_copy(SM90_TMA_STORE{}, mdK, box, typename T::GradTileWg{}, _1{});
      p.tma_dv = make_tma_copy(SM90_TMA_STORE{}, mdV, box, typename T::GradTileWg{}, _1{});
    }
  }
  if constexpr (T::kStoreDs) {
    auto mDs = stored_ds_view<T>(a, ws + wl.dq_accum_offset);
    p.tma_ds = make_tma_copy(SM90_TMA_STORE{}, mDs, typename T::SmemLayoutDsTile{}, typename T::TileDs{}, _1{});
    p.shape_ds = mDs.shape();
  }
  p.shape_q = mQ.shape();
  p.shape_k = mK.shape();
  p.dk = static_cast<Element*>(a.dk);
  p.dv = static_cast<Element*>(a.dv);
  p.dk_stride = a.dk_stride;
  p.dv_stride = a.dv_stride;
  fwd::set_score_scale(p, a);
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.deterministic = a.deterministic;
  p.rotate_walk = !a.has_window() && !a.deterministic && !p.dq_accum_cleared;

  const int64_t num_n_blocks = (int64_t(a.seqlen_k) + T::kBlockN - 1) / T::kBlockN;
  const int64_t pairs = int64_t(a.nheads_k) * a.batch;
  const int64_t num_tiles = main_kernel_tiles<T>(a);
  if (num_tiles > INT32_MAX)
    throw Error(ErrorCode::kNotSupported, "k", "more than 2^31 backward tiles (batch * nheads_k * seqlen_k / " +
                                                   std::to_string(T::kBlockN) + ")");
  p.num_n_blocks = int(num_n_blocks);
  p.num_tiles = int(num_tiles);
  // As the workspace was sized for (tiles <= INT32_MAX / 2 where > 0).
  p.num_whole_tiles = p.num_tiles - wl.split_tiles;
  p.num_items = p.num_tiles + wl.split_tiles;
  p.split_partials = wl.split_tiles > 0 ? reinterpret_cast<float*>(ws + wl.split_partials_offset) : nullptr;
  // Every key block of a KV head reads all of its group's Q and dO and adds into its dq_accum
  // rows. Without a mask all key blocks take equally long: one (KV head, batch) pair per L2
  // section, so the key blocks of a head run side by side, walk the query blocks together (from
  // different starts where the walk is rotated, schedule.hpp) and share each Q/dO load and
  // dq_accum line in L2 (+5..10% at d128 1k-8k against many-head sections; 2 or 4 pairs measured
  // the same, perf-log sessions 10 and 11). With a mask: l2_sections.hpp.
  // Deterministic mode keeps the half-of-L2 sections without a mask: its adds into a query block go
  // in key-block order, so key blocks of one head that run side by side wait for each other at
  // every step (one-pair sections: 0.18x of the default at d64 1k, session 10; 16 pairs: 0.5x
  // causal 1k); under a mask, sections of 4-8 waves of tiles (l2_sections.hpp).
  if (a.deterministic && a.has_window()) {
    p.heads_per_l2_section = int(bwd_deterministic_masked_section_pairs(pairs, num_n_blocks, a.seqlen_k, a.num_sms));
  } else if (a.deterministic) {
    const double qdo_bytes_per_kv_head =
        2.0 * std::max(a.seqlen_q, 1) * T::kHeadDim * sizeof(Element) * (a.nheads / a.nheads_k);
    const int64_t fit = std::max<int64_t>(1, int64_t(0.5 * fwd::l2_cache_bytes() / qdo_bytes_per_kv_head));
    p.heads_per_l2_section = int(std::min<int64_t>(pairs, fit));
  } else if (a.has_window()) {
    p.heads_per_l2_section = int(bwd_masked_section_pairs(pairs, num_n_blocks, T::kBlockN, a.num_sms, p.head_group, T::kHeadDim));
  } else {
    p.heads_per_l2_section = 1;
  }
  if (a.l2_section_pairs > 0) p.heads_per_l2_section = int(std::min<int64_t>(pairs, a.l2_section_pairs));
  p.tile_divisors = fwd::TileDivisors::make(p.num_n_blocks, a.nheads_k, p.num_tiles, p.heads_per_l2_section);
  // dQ one step behind dS (consumer.hpp, kernels with T::kLagDq) in key tiles of at least 3
  // steps: a tile's first step wastes one dQ GEMM and its last one is exposed. Measured at d64
  // on an H200 against the lockstep schedule (docs/perf-log.md, session 16): from 3 steps
  // +3% causal 1k, +7% causal 2k, +8% 1k, -1% causal 512; every tile -3% causal 512.
  p.lag_dq_min_steps = a.lag_dq_min_steps > 0 ? a.lag_dq_min_steps : 3;
  return p;
}

// Kernels that read what the previous kernel on the stream wrote start with
// wait_for_prior_grids(); launched with programmatic stream serialization (PDL), their launch
// and setup overlap the previous kernel's tail instead of following its completion (a few
// microseconds per launch, which counts at short sequences). -DHOPATTN_BWD_PDL=0: plain launches.
#ifndef HOPATTN_BWD_PDL
#define HOPATTN_BWD_PDL 1
#endif
template <class... Params, class... Args>
void launch_after_prior_grid(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = HOPATTN_BWD_PDL;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  HOPATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The main kernel (and the split tiles' sums after it). Runs even without queries: its tiles
// then write the zero dK and dV.
template <class T>
void launch_main(const BwdArgs& a, const WorkspaceLayout& wl, char* ws, cudaStream_t stream) {
  if ((a.varlen() ? a.total_k : a.seqlen_k) <= 0) return;
  BwdKernelParams<T> p = make_main_params<T>(a, wl, ws);
  if (p.num_tiles <= 0) return;
  p.tile_counter = reinterpret_cast<int*>(ws + WorkspaceLayout::kTileCounterOffset);
  auto kernel = attention_bwd_kernel<T>;
  HOPATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  const int grid = std::min(p.num_tiles, a.num_sms - concurrent_dq_convert_sms<T>(a));
  launch_after_prior_grid(kernel, dim3(grid), dim3(T::kNumThreads), T::kSmemBytes, stream, p);
  if (p.num_items > p.num_tiles)  // split tiles: their dK and dV sums to the outputs
    launch_after_prior_grid(bwd_split_tiles_kernel<T>, dim3(p.num_tiles - p.num_whole_tiles, 2), dim3(256), 0,
                            stream, p);
#ifdef HOPATTN_EXP_TIMELINE
  fwd::timeline_print_kernel<<<1, 1, 0, stream>>>(/*bwd=*/true);
#endif
}

// The dQ kernel of the stored-dS backward (stored_ds.hpp): one CTA per (query block, head,
// batch entry), after the main kernel (PDL).
template <class S>
void launch_dq_from_ds(const BwdArgs& a, const WorkspaceLayout& wl, char* ws, cudaStream_t stream) {
  using namespace cute;
  DqFromDsParams<S> d{};
  auto mDs = stored_ds_view<S>(a, ws + wl.dq_accum_offset);
  auto mK = fwd::make_gmem_view<S>(a.k, a.k_stride, a.seqlen_k, a.nheads_k, a.batch, /*varlen=*/false);
  d.tma_ds = make_tma_copy(SM90_TMA_LOAD{}, mDs, typename S::SmemLayoutDsTile{}, typename S::TileDs{}, _1{});
  d.tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, typename S::SmemLayoutK{}, typename S::TileKV{}, _1{});
  d.shape_ds = mDs.shape();
  d.shape_k = mK.shape();
  d.dq = static_cast<typename S::Element*>(a.dq);
  d.dq_stride = a.dq_stride;
  d.seqlen_q = a.seqlen_q;
  d.seqlen_k = a.seqlen_k;
  d.window_left = a.window_left;
  d.window_right = a.window_right;
  d.head_group = a.nheads / a.nheads_k;
  d.num_n_blocks = int((int64_t(a.seqlen_k) + S::kBlockN - 1) / S::kBlockN);
  d.softmax_scale = a.softmax_scale;
  auto kernel = bwd_dq_from_ds_kernel<S>;
  constexpr int kSmem = int(sizeof(DqFromDsStorage<S>));
  HOPATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int num_m_blocks = (a.seqlen_q + S::kBlockM - 1) / S::kBlockM;
  launch_after_prior_grid(kernel, dim3(num_m_blocks, a.nheads, a.batch), dim3(kDqFromDsThreads), kSmem, stream, d);
}

template <class T>
void launch(const BwdArgs& a, void* workspace, cudaStream_t stream) {
  using Element = typename T::Element;
  const WorkspaceLayout wl = workspace_layout<T>(a);
  char* ws = static_cast<char*>(workspace);
  // The counters, the query blocks' states, the pairs' tile counts and the split tiles' sums start
  // at zero (one memset: they lead the workspace); lse_log2 and dsum are written by the preprocess kernel, which also clears
  // dq_accum where every writer adds (clears_dq_accum).
  HOPATTN_CUDA_CHECK(cudaMemsetAsync(ws, 0, wl.lse_offset, stream));
  const int num_m_blocks = (a.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const dim3 row_grid(num_m_blocks, a.nheads, a.batch);

  BwdPreParams<Element> pre{};
  fill_common<T>(pre, a, wl, ws);
  pre.out = static_cast<const Element*>(a.out);
  pre.dout = static_cast<const Element*>(a.dout);
  pre.out_stride = a.out_stride;
  pre.dout_stride = a.dout_stride;
  pre.lse = a.lse;
  pre.lse_head_stride = a.lse_head_stride;
  pre.lse_batch_stride = a.lse_batch_stride;
  if (num_m_blocks > 0) {
    bwd_preprocess_kernel<Element, T::kHeadDim, T::kBlockM><<<row_grid, kPreprocessThreads, 0, stream>>>(pre);
    HOPATTN_CUDA_CHECK(cudaGetLastError());
  }

  if constexpr (has_stored_ds_kernel<T>()) {
    if (uses_stored_ds<T>(a)) {  // then both lengths are positive
      using S = StoredDsBwdTraits<T>;
      launch_main<S>(a, wl, ws, stream);
      launch_dq_from_ds<S>(a, wl, ws, stream);
      return;
    }
  }
  launch_main<T>(a, wl, ws, stream);

  BwdPostParams<Element> post{};
  fill_common<T>(post, a, wl, ws);
  post.dq = static_cast<Element*>(a.dq);
  post.dq_stride = a.dq_stride;
  if (num_m_blocks == 0) return;
  if (post.pair_tiles_done == nullptr) {
    launch_after_prior_grid(bwd_postprocess_kernel<T>, row_grid, dim3(T::kNumConsumerThreads), 0, stream, post);
    return;
  }
  // The concurrent form: as many CTAs as all SMs hold, of which those on the SMs the main kernel
  // left free start at once and the others as its CTAs leave (they take what is left then).
  post.item_counter = reinterpret_cast<int*>(ws + WorkspaceLayout::kConvertItemCounterOffset);
  post.num_m_blocks = num_m_blocks;
  post.tiles_per_pair = int((int64_t(a.seqlen_k) + T::kBlockN - 1) / T::kBlockN);  // as the main kernel's tiles
  auto convert = bwd_postprocess_concurrent_kernel<T>;
  static const int ctas_per_sm = [&] {
    int n = 0;
    HOPATTN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, convert, T::kNumConsumerThreads, 0));
    return std::max(n, 1);
  }();
  launch_after_prior_grid(convert, dim3(a.num_sms * ctas_per_sm), dim3(T::kNumConsumerThreads), 0, stream, post);
}

}  // namespace hopattn::kernels::bwd
