// What one benchmark case is, how many FLOPs it does, and the case lists of the modes
// (the paper's grid, the Table 2 ablation shape).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hopattn/params.hpp"
#include "hopattn/types.hpp"

namespace hopattn_bench {

enum class Direction { kFwd, kBwd };

const char* direction_name(Direction d);             // "fwd", "bwd"
Direction parse_direction(const std::string& name);  // throws std::invalid_argument
const char* dtype_label(hopattn::DType t);            // "bf16", "fp16", "e4m3", ...
hopattn::DType parse_dtype(const std::string& name);  // bf16 | fp16 | e4m3

// One timed configuration. Dense BSHD tensors; q (batch, seqlen_q, nheads, hdim),
// k (batch, seqlen_k, nheads_k, hdim), v (batch, seqlen_k, nheads_k, hdim_v).
struct Case {
  Direction direction = Direction::kFwd;
  hopattn::DType dtype = hopattn::DType::kBFloat16;
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t nheads = 0;
  int64_t nheads_k = 0;
  int64_t hdim = 0;
  int64_t hdim_v = 0;
  bool causal = false;
  int32_t window_left = -1;   // -1: unbounded
  int32_t window_right = -1;  // -1: unbounded (causal forces 0)
  float softcap = 0.f;
  bool deterministic = false;        // backward only
  std::string variant = "default";  // a name from fwd_variants()
  // Experiments: a forced forward kernel name (FwdTuning; empty: the dispatcher's choice) and
  // the L2 section size of the tile order (FwdTuning / BwdTuning; 0: the library's rule).
  std::string kernel;
  int32_t l2_section_pairs = 0;
  int32_t lag_dq_min_steps = 0;  // backward: BwdTuning::lag_dq_min_steps (0: the library's rule)
  int32_t split_tail_tiles = 0;  // backward: BwdTuning::split_tail_tiles (0: the library's rule)
  int32_t dq_from_stored_ds = 0;  // backward: BwdTuning::dq_from_stored_ds (0: the library's rule)
  int32_t dq_convert_sms = 0;    // backward: BwdTuning::dq_convert_sms (0: the library's rule)
};

// Number of (query row, key) score pairs one (batch, head) computes under the case's mask.
// Unmasked: seqlen_q * seqlen_k. Causal with seqlen_q == seqlen_k and no window:
// seqlen^2 / 2 (the paper's convention, so numbers compare with its figures and the peers).
// Any other mask: the exact count of visible pairs (bottom-right aligned, as the API defines).
double attended_pairs(const Case& c);

// Forward: 2 matmuls, 2 FLOPs per multiply-add: 2 * pairs * (hdim + hdim_v) * nheads * batch
// (= 4 * pairs * hdim * nheads * batch when hdim_v == hdim). Backward: 2.5 x forward.
double case_flops(const Case& c);

// The FlashAttention-3 paper's grid (section 4.1): batch * seqlen = 16384 tokens,
// hidden 2048 (nheads = 2048 / hdim), for every combination of the listed values.
struct GridSpec {
  std::vector<int> hdims{64, 128, 256};
  std::vector<int> seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<bool> causal{false, true};
  std::vector<Direction> directions{Direction::kFwd, Direction::kBwd};
  std::vector<hopattn::DType> dtypes{hopattn::DType::kBFloat16};
  int64_t tokens = 16384;
  int64_t hidden = 2048;
};
std::vector<Case> grid_cases(const GridSpec& spec);  // throws std::invalid_argument

// The paper's Table 2 ablation shape: batch 4, seqlen 8448, 16 heads, hdim 128, non-causal,
// forward. (The paper measured fp16; the dtype is the caller's.) One case per variant.
std::vector<Case> table2_cases(hopattn::DType dtype, const std::vector<std::string>& variants);

// ---- Kernel variants (the Table 2 ablation hook) -------------------------------------------
// A variant edits the forward parameters before planning, e.g. to turn off an optimisation.
// ADD A VARIANT = ADD ONE LINE to the list in bench_case.cpp, e.g.
//   {"no-lpt", "tiles in plain order", [](hopattn::FwdParams& p) { p.tuning.disable_lpt = true; }},
// The switches are FwdParams::tuning (benchmarks only).
struct FwdVariant {
  std::string name;
  std::string description;
  std::function<void(hopattn::FwdParams&)> apply;  // empty: parameters unchanged
};
const std::vector<FwdVariant>& fwd_variants();
const FwdVariant& find_fwd_variant(const std::string& name);  // throws std::invalid_argument
std::string fwd_variant_names();                              // "default, ..." for --help

// Reference row of the paper's Table 2 (H100 SXM5, fp16) for the default kernel.
constexpr double kTable2PaperMs = 3.538;
constexpr double kTable2PaperTflops = 661.0;

}  // namespace hopattn_bench
