// Parameter structs of the public API.
//
// Layout conventions (the ones FlashAttention users already have):
//   dense     q: (batch, seqlen_q, nheads,   head_dim)      "BSHD", last dim contiguous
//             k: (batch, seqlen_k, nheads_k, head_dim)
//             v: (batch, seqlen_k, nheads_k, head_dim_v)
//             out: (batch, seqlen_q, nheads, head_dim_v)
//             lse: (batch, nheads, seqlen_q) float32
//   varlen    q: (total_q, nheads, head_dim), k/v: (total_k, nheads_k, head_dim),
//             out: (total_q, nheads, head_dim_v), lse: (nheads, total_q) float32,
//             with cu_seqlens_q/k (batch + 1, int32, device) giving each sequence's start.
//   paged KV  k: (num_pages, page_size, nheads_k, head_dim) with page_table (batch, max_pages).
// Strides of batch, sequence and head dims may be anything TMA accepts (16-byte multiples); the
// last dim must be contiguous. Inputs are never written to, except the KV cache when k_new/v_new
// are given (that is the documented purpose of those fields).
#pragma once

#include <cstdint>

#include "hopattn/types.hpp"

namespace hopattn {

// A mask is the set of keys each query row may see. Causal and sliding-window masks are one
// windowed mask: row i (aligned bottom-right, i.e. shifted by seqlen_k - seqlen_q) sees keys
// j with  i + shift - window_left <= j <= i + shift + window_right, where -1 means unbounded.
// causal == true is window_right = 0 (window_left unchanged).
struct MaskArgs {
  bool causal = false;
  int32_t window_left = -1;
  int32_t window_right = -1;
};

// FP8 block quantization: one descale per block of rows of one head, the way hopattn::quantize
// writes them (x ~= code * descale). Each tensor is optional (undefined = 1) and combines with
// the per-(batch, kv head) descales of FwdParams by multiplication.
//   q: (batch, nheads,   ceil(seqlen_q / q_block_rows)) float32, contiguous
//   k, v: (batch, nheads_k, ceil(seqlen_k / kv_block_rows)) float32, contiguous
// q_block_rows may be any positive number; kv_block_rows must be a multiple of the FP8 kernel's
// key tile, 128 (one scale then covers whole tiles, which keeps scaling free in the mainloop).
// Dense (non-varlen) layouts only.
struct Fp8BlockDescale {
  TensorView q, k, v;
  int32_t q_block_rows = 0;
  int32_t kv_block_rows = 0;
};

// Switches that turn off one technique of the forward kernel, for the ablation benchmark (the
// paper's Table 2), and knobs for experiments. Leave them at their defaults: those are the
// measured choices, and each switch makes the kernel slower.
struct FwdTuning {
  bool disable_pingpong = false;          // consumer warpgroups issue GEMMs without the token (FP8: always)
  bool disable_intra_wg_overlap = false;  // GEMMs waited for before the softmax (bf16, d=128 only)
  // No producer warpgroup: a consumer thread issues the loads between its GEMMs, with no pingpong
  // token (bf16, d=128 only; not together with disable_intra_wg_overlap).
  bool disable_warp_specialization = false;
  bool disable_lpt = false;               // causal/window tiles in plain order, not longest-first
  bool disable_cluster = false;           // no 2-CTA clusters with K/V multicast (one CTA per tile)

  // Experiment knobs, so that one build can compare choices side by side in one process (no
  // thermal or build differences between the variants): the defaults are the measured choices.
  const char* kernel = nullptr;  // run this compiled forward kernel (a Plan::kernel name), not the dispatcher's choice
  int32_t l2_section_pairs = 0;  // > 0: (batch, head) pairs per L2 section of the tile order; 0: the library's rule
};

struct FwdParams {
  TensorView q, k, v;
  TensorView out;
  TensorView lse;  // optional for inference; always written when defined

  // Variable length (all optional, int32 device arrays).
  const int32_t* cu_seqlens_q = nullptr;  // (batch + 1)
  const int32_t* cu_seqlens_k = nullptr;  // (batch + 1)
  const int32_t* seqused_q = nullptr;     // (batch): rows beyond are neither read nor written
  const int32_t* seqused_k = nullptr;     // (batch): keys beyond are ignored
  int32_t batch_varlen = 0;               // batch size when cu_seqlens_* are given
  int32_t max_seqlen_q = 0;               // upper bounds, required with cu_seqlens_*: rows of a
  int32_t max_seqlen_k = 0;               // longer sequence are not computed (left unwritten)
  // The device arrays above cannot be checked on the host without a synchronisation: the
  // kernels clamp them to the tensors' extents (never an out-of-bounds access), but wrong values
  // give wrong results. K/V rows past seqused_k must hold finite values (0 * NaN is NaN).

  float softmax_scale = 0.f;  // 0 means 1/sqrt(head_dim)
  MaskArgs mask;
  float softcap = 0.f;  // 0 disables; else scores become softcap * tanh(scores / softcap)

  // FP8 (e4m3) per-(batch, kv-head) descale factors, float32 device arrays of shape
  // (batch, nheads_k); nullptr means 1.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  Fp8BlockDescale block_descale;  // FP8 block quantization (optional)

  // KV cache / decoding.
  TensorView page_table;      // (batch, max_pages) int32; k/v are then paged
  TensorView cache_seqlens;   // (batch,) int32: current length of each cache row
  TensorView cache_batch_idx; // (batch,) int32: which cache row each batch entry uses
  TensorView k_new, v_new;    // (batch, seqlen_new, nheads_k, d): appended at cache_seqlens

  int32_t num_splits = 1;  // split-KV; 0 lets the heuristic choose
  bool pack_gqa = false;   // pack the query heads of one KV head into one tile

  FwdTuning tuning;  // ablation switches, benchmarks only
};

// Experiment knob of the backward, as FwdTuning's: leave it at its default (the measured choice).
struct BwdTuning {
  int32_t l2_section_pairs = 0;  // > 0: (batch, KV head) pairs per L2 section of the tile order; 0: the library's rule
  // > 0: key tiles with at least this many query-block steps run dQ one step behind dS (head
  // dim 64; 1 = every tile, a huge value = none); 0: the library's rule (3).
  int32_t lag_dq_min_steps = 0;
  // SMs that convert dQ while the main kernel runs (the main kernel then leaves them free): > 0
  // that many; -1 none (dQ is converted after the main kernel); 0 the library's rule.
  int32_t dq_convert_sms = 0;
  // Key tiles of the last, partly filled wave handed out as two halves of their query walk
  // (both halves add their dK and dV into an FP32 sum that a small kernel writes out): > 0 the
  // last that many tiles (the concurrent dQ conversion then runs after the main kernel); -1
  // none; 0 the library's rule.
  int32_t split_tail_tiles = 0;
  // dQ from a stored dS (head dims 192 and 256, fixed lengths, up to 4096 keys): the main kernel
  // stores each step's dS and a second kernel computes dQ from it, instead of adding FP32 dQ
  // partials into the workspace (which then holds batch x nheads x seqlen_q x seqlen_k elements
  // of the input dtype, both lengths rounded up to 64). 1 wherever supported; -1 never; 0 the
  // library's rule (up to 2048 keys).
  int32_t dq_from_stored_ds = 0;
};

struct BwdParams {
  // The forward inputs and outputs.
  TensorView q, k, v, out, lse;
  TensorView dout;
  TensorView dq, dk, dv;  // written

  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // As in FwdParams. Rows of dq past seqused_q and of dk, dv past seqused_k are not written
  // (their gradient is zero: the PyTorch op allocates those tensors zeroed).
  const int32_t* seqused_q = nullptr;
  const int32_t* seqused_k = nullptr;
  int32_t batch_varlen = 0;
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;

  float softmax_scale = 0.f;
  MaskArgs mask;
  float softcap = 0.f;
  bool deterministic = false;
  BwdTuning tuning;
};

// Merges attention results computed over disjoint key ranges ("splits": split-KV decoding, or
// the blocks of ring / context-parallel attention) into the result over all of their keys:
//   lse = log sum_i exp(lse_i),  out = sum_i exp(lse_i - lse) * out_i.
//   out_partial: (num_splits, batch * seqlen, nheads, head_dim) float32 (batch and seqlen in one
//                dim, row b * seqlen + s: a TensorView holds four dims; PyTorch callers pass
//                (num_splits, batch, seqlen, nheads, head_dim) to hopattn.flash_attn_combine)
//   lse_partial: (num_splits, batch, nheads, seqlen) float32; -inf where a split saw no key of
//                the row (that split's out_partial values are then never read)
//   out: (batch, seqlen, nheads, head_dim) float32, bf16 or fp16
//   lse: (batch, nheads, seqlen) float32, optional.
// Any strides; rows no split saw get out = 0 and lse = -inf. Outputs may not share memory with
// the inputs. A NaN lse_i next to a finite one makes the row NaN; a row whose lse_i are all NaN
// or -inf counts as seen by no split (the max ignores NaN). No workspace.
struct CombineParams {
  TensorView out_partial, lse_partial;
  TensorView out, lse;
};

}  // namespace hopattn
