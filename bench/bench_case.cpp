#include "bench_case.hpp"

#include <algorithm>
#include <stdexcept>

namespace hopattn_bench {

const char* direction_name(Direction d) { return d == Direction::kFwd ? "fwd" : "bwd"; }

Direction parse_direction(const std::string& name) {
  if (name == "fwd") return Direction::kFwd;
  if (name == "bwd") return Direction::kBwd;
  throw std::invalid_argument("direction: expected fwd or bwd, got '" + name + "'");
}

const char* dtype_label(hopattn::DType t) {
  switch (t) {
    case hopattn::DType::kFloat16: return "fp16";
    case hopattn::DType::kBFloat16: return "bf16";
    case hopattn::DType::kFloat8E4M3: return "e4m3";
    case hopattn::DType::kFloat32: return "fp32";
    case hopattn::DType::kInt32: return "int32";
  }
  return "?";
}

hopattn::DType parse_dtype(const std::string& name) {
  if (name == "bf16") return hopattn::DType::kBFloat16;
  if (name == "fp16") return hopattn::DType::kFloat16;
  if (name == "e4m3") return hopattn::DType::kFloat8E4M3;
  throw std::invalid_argument("dtype: expected bf16, fp16 or e4m3, got '" + name + "'");
}

namespace {

bool is_paper_causal(const Case& c) {
  return c.causal && c.seqlen_q == c.seqlen_k && c.window_left < 0;
}

// Keys visible to row i: [i + shift - window_left, i + shift + window_right] clipped to
// [0, seqlen_k), shift = seqlen_k - seqlen_q; -1 bounds are open.
double count_visible_pairs(const Case& c) {
  const int64_t shift = c.seqlen_k - c.seqlen_q;
  const int64_t right = c.causal ? 0 : c.window_right;
  double pairs = 0;
  for (int64_t i = 0; i < c.seqlen_q; ++i) {
    const int64_t lo = c.window_left >= 0 ? std::max<int64_t>(0, i + shift - c.window_left) : 0;
    const int64_t hi =
        right >= 0 ? std::min<int64_t>(c.seqlen_k - 1, i + shift + right) : c.seqlen_k - 1;
    if (hi >= lo) pairs += static_cast<double>(hi - lo + 1);
  }
  return pairs;
}

}  // namespace

double attended_pairs(const Case& c) {
  const double full = static_cast<double>(c.seqlen_q) * static_cast<double>(c.seqlen_k);
  const bool masked = c.causal || c.window_left >= 0 || c.window_right >= 0;
  if (!masked) return full;
  if (is_paper_causal(c)) return full / 2;
  return count_visible_pairs(c);
}

double case_flops(const Case& c) {
  const double fwd = 2.0 * attended_pairs(c) * static_cast<double>(c.hdim + c.hdim_v) *
                     static_cast<double>(c.nheads) * static_cast<double>(c.batch);
  return c.direction == Direction::kFwd ? fwd : 2.5 * fwd;
}

std::vector<Case> grid_cases(const GridSpec& spec) {
  std::vector<Case> cases;
  for (hopattn::DType dtype : spec.dtypes)
    for (Direction dir : spec.directions)
      for (int hdim : spec.hdims)
        for (bool causal : spec.causal)
          for (int seqlen : spec.seqlens) {
            if (hdim <= 0 || hdim > spec.hidden)  // d192: hidden / 192 = 10 heads, as bench/peers.py
              throw std::invalid_argument("hdims: " + std::to_string(hdim) + " is not in [1, hidden size " +
                                          std::to_string(spec.hidden) + "]");
            if (seqlen <= 0 || spec.tokens % seqlen != 0)
              throw std::invalid_argument("seqlens: " + std::to_string(seqlen) +
                                          " does not divide " + std::to_string(spec.tokens) +
                                          " tokens");
            Case c;
            c.direction = dir;
            c.dtype = dtype;
            c.batch = spec.tokens / seqlen;
            c.seqlen_q = c.seqlen_k = seqlen;
            c.nheads = c.nheads_k = spec.hidden / hdim;
            c.hdim = c.hdim_v = hdim;
            c.causal = causal;
            cases.push_back(c);
          }
  return cases;
}

std::vector<Case> table2_cases(hopattn::DType dtype, const std::vector<std::string>& variants) {
  std::vector<Case> cases;
  for (const std::string& name : variants) {
    Case c;
    c.direction = Direction::kFwd;
    c.dtype = dtype;
    c.batch = 4;
    c.seqlen_q = c.seqlen_k = 8448;
    c.nheads = c.nheads_k = 16;
    c.hdim = c.hdim_v = 128;
    c.causal = false;
    c.variant = find_fwd_variant(name).name;
    cases.push_back(c);
  }
  return cases;
}

const std::vector<FwdVariant>& fwd_variants() {
  static const std::vector<FwdVariant> variants = {
      {"default", "the kernel the planner picks", {}},
      {"no-pingpong", "consumer warpgroups issue GEMMs without the pingpong token",
       [](hopattn::FwdParams& p) { p.tuning.disable_pingpong = true; }},
      {"no-intra-overlap", "each GEMM waited for before the softmax (Algorithm 1 consumer)",
       [](hopattn::FwdParams& p) { p.tuning.disable_intra_wg_overlap = true; }},
      {"no-warp-specialization", "no producer warpgroup: a consumer thread issues the loads (no pingpong)",
       [](hopattn::FwdParams& p) { p.tuning.disable_warp_specialization = true; }},
      {"ws-128-key-tile", "the warp-specialized kernel with no-warp-specialization's 128 x 128 tile, no cluster",
       [](hopattn::FwdParams& p) {
         p.tuning.kernel = "fwd_sm90_bf16_hd128_masked";
         p.tuning.disable_cluster = true;
       }},
      {"no-cluster", "one CTA per tile instead of 2-CTA clusters with K/V multicast",
       [](hopattn::FwdParams& p) { p.tuning.disable_cluster = true; }},
      {"no-pingpong-no-overlap", "neither technique",
       [](hopattn::FwdParams& p) {
         p.tuning.disable_pingpong = true;
         p.tuning.disable_intra_wg_overlap = true;
       }},
  };
  return variants;
}

const FwdVariant& find_fwd_variant(const std::string& name) {
  for (const FwdVariant& v : fwd_variants())
    if (v.name == name) return v;
  throw std::invalid_argument("variant: unknown '" + name + "', expected one of " +
                              fwd_variant_names());
}

std::string fwd_variant_names() {
  std::string names;
  for (const FwdVariant& v : fwd_variants()) names += (names.empty() ? "" : ", ") + v.name;
  return names;
}

}  // namespace hopattn_bench
