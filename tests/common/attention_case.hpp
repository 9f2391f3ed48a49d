// The attention problem of one GPU test case (forward or backward): shape, options, and how its
// device tensors are laid out; plus the helpers that turn it into a reference Problem and
// strided device inputs.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "hopattn_ref/numeric.hpp"
#include "hopattn_ref/reference.hpp"

namespace hopattn::testing {

struct AttnCase {
  DType dtype = DType::kBFloat16;
  int head_dim = 128;
  int batch = 2, seqlen_q = 256, seqlen_k = 256, nheads = 4, nheads_k = 4;
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  float softmax_scale = 0.f;
  std::vector<int> varlen_q, varlen_k;  // non-empty: variable length with these lengths
  int row_pad = 0;                      // extra elements per row: non-contiguous seq/batch strides
  bool deterministic = false;           // backward only: ordered dQ accumulation
  bool no_overlap = false;              // forward only: the Table 2 ablation kernel (bf16 d128)
  bool no_pingpong = false;             // forward only: FwdTuning::disable_pingpong (Table 2)
  bool no_ws = false;                   // forward only: FwdTuning::disable_warp_specialization (Table 2)
  bool no_cluster = false;              // forward only: FwdTuning::disable_cluster
  std::string force_kernel;             // forward only: FwdTuning::kernel (empty: the dispatcher's)
  int l2_section_pairs = 0;             // Fwd/BwdTuning::l2_section_pairs (tiles per L2 section)
  int lag_dq_min_steps = 0;             // backward only: BwdTuning::lag_dq_min_steps
  int dq_convert_sms = 0;               // backward only: BwdTuning::dq_convert_sms (-1: after the main kernel)
  int split_tail_tiles = 0;             // backward only: BwdTuning::split_tail_tiles (-1: none)
  int dq_from_stored_ds = 0;            // backward only: BwdTuning::dq_from_stored_ds (1: where supported)
  int max_ctas = 0;                     // forward only: > 0 plans for this many SMs, so that each
                                        // persistent CTA runs many tiles of a small problem
  // K rows at positions < gain_keys of each sequence are multiplied by key_gain (apply_key_gain):
  // the forward visits key blocks last to first, so the scores of the blocks it reaches last jump
  // above the row offsets it kept (OnlineSoftmax's max-free blocks: lift and recompute paths).
  int gain_keys = 0;
  float key_gain = 1.f;

  std::string name() const {
    std::ostringstream os;
    os << dtype_name(dtype) << "_d" << head_dim << "_b" << batch << "_q" << seqlen_q << "_k" << seqlen_k
       << "_h" << nheads << "x" << nheads_k;
    if (causal) os << "_causal";
    if (window_left >= 0 || window_right >= 0) os << "_win" << window_left << "_" << window_right;
    if (softcap > 0) os << "_softcap";
    if (softmax_scale != 0) os << "_scale";
    if (!varlen_q.empty()) os << "_varlen" << varlen_q.size();
    if (row_pad) os << "_strided";
    if (deterministic) os << "_det";
    if (no_overlap) os << "_nooverlap";
    if (no_pingpong) os << "_nopingpong";
    if (no_ws) os << "_nows";
    if (no_cluster) os << "_nocluster";
    if (!force_kernel.empty()) os << "_run_" << force_kernel;
    if (l2_section_pairs > 0) os << "_l2sec" << l2_section_pairs;
    if (lag_dq_min_steps > 0) os << "_lag" << lag_dq_min_steps;
    if (dq_convert_sms != 0) os << "_dqconv" << dq_convert_sms;
    if (split_tail_tiles != 0) os << "_split" << split_tail_tiles;
    if (dq_from_stored_ds != 0) os << "_storedds" << (dq_from_stored_ds > 0 ? "on" : "off");
    if (max_ctas > 0) os << "_ctas" << max_ctas;
    if (gain_keys) os << "_gain" << int(key_gain) << "below" << gain_keys;
    std::string s = os.str();
    for (char& ch : s)
      if (ch == '-') ch = 'm';  // test names: letters, digits and '_' only
    return s;
  }
  bool varlen() const { return !varlen_q.empty(); }
};

// GoogleTest prints parameters in failure messages and CTest listings: use the readable name.
inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name(); }

inline ref::Problem make_problem(const AttnCase& c) {
  ref::Problem p = c.varlen()
                       ? ref::varlen_problem(c.varlen_q, c.varlen_k, c.nheads, c.nheads_k, c.head_dim)
                       : ref::dense_problem(c.batch, c.seqlen_q, c.seqlen_k, c.nheads, c.nheads_k, c.head_dim);
  p.mask.causal = c.causal;
  p.mask.window_left = c.window_left;
  p.mask.window_right = c.window_right;
  p.softcap = c.softcap;
  p.softmax_scale = c.softmax_scale;
  return p;
}

// Multiplies the first c.gain_keys keys of every sequence of a packed (rows, nheads_k, dim) K by
// c.key_gain (a power of two keeps 16-bit values exact).
inline void apply_key_gain(const AttnCase& c, const ref::Problem& prob, std::vector<double>& k) {
  for (int b = 0; b < prob.batch; ++b)
    for (int j = 0; j < std::min(c.gain_keys, prob.seqlen_k(b)); ++j)
      for (int hd = 0; hd < c.nheads_k * c.head_dim; ++hd)
        k[(size_t(prob.cu_seqlens_k[b] + j) * c.nheads_k) * c.head_dim + hd] *= c.key_gain;
}

// Device tensor for a (rows..., heads, dim) input with optional row padding.
inline DeviceTensor make_input(const AttnCase& c, DType dt, int64_t lead0, int64_t lead1, int64_t heads, int64_t dim) {
  const int64_t row = heads * dim + c.row_pad;
  if (c.varlen()) return DeviceTensor::make(dt, {lead0, heads, dim}, {row, dim, 1});
  return DeviceTensor::make(dt, {lead0, lead1, heads, dim}, {lead1 * row + c.row_pad * 8, row, dim, 1});
}

// For a varlen case: uploads cu_seqlens and sets the params' varlen fields (FwdParams or
// BwdParams). The returned buffers must outlive the run.
struct VarlenArrays {
  DeviceBuffer cu_q, cu_k;
};
template <class Params>
VarlenArrays set_varlen(Params& p, const ref::Problem& prob) {
  VarlenArrays a;
  a.cu_q = upload_ints(prob.cu_seqlens_q);
  a.cu_k = upload_ints(prob.cu_seqlens_k);
  p.cu_seqlens_q = static_cast<const int32_t*>(a.cu_q.get());
  p.cu_seqlens_k = static_cast<const int32_t*>(a.cu_k.get());
  p.batch_varlen = prob.batch;
  for (int b = 0; b < prob.batch; ++b) {
    p.max_seqlen_q = std::max(p.max_seqlen_q, prob.seqlen_q(b));
    p.max_seqlen_k = std::max(p.max_seqlen_k, prob.seqlen_k(b));
  }
  return a;
}

inline std::vector<double> random_input(size_t n, uint64_t seed, DType dt) {
  std::vector<double> v(n);
  ref::fill_random(v, seed);
  for (double& x : v) x = ref::round_to(dt, x);  // the reference sees exactly the kernel's inputs
  return v;
}

}  // namespace hopattn::testing
