#include "report.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace hopattn_bench {

namespace {

std::string mask_label(const Case& c) {
  std::string s;
  if (c.window_left >= 0 || c.window_right >= 0)
    s = "win(" + std::to_string(c.window_left) + "," +
        std::to_string(c.causal ? 0 : c.window_right) + ")";
  else
    s = c.causal ? "causal" : "none";
  if (c.softcap > 0) s += "+cap";
  return s;
}

std::string pair_label(int64_t a, int64_t b) {
  return a == b ? std::to_string(a) : std::to_string(a) + "/" + std::to_string(b);
}

}  // namespace

void TablePrinter::print(const Case& c, const CaseResult& r) {
  const std::string section = std::string(direction_name(c.direction)) + " " + dtype_label(c.dtype);
  if (section != section_) {
    section_ = section;
    std::printf("\n%-3s %-4s %4s %-12s %11s %5s %7s %9s %8s  %s\n", "dir", "type", "hdim", "mask",
                "seqlen", "batch", "nheads", "ms", "TFLOP/s", "kernel");
  }
  std::printf("%-3s %-4s %4s %-12s %11s %5lld %7s ", direction_name(c.direction),
              dtype_label(c.dtype), pair_label(c.hdim, c.hdim_v).c_str(), mask_label(c).c_str(),
              pair_label(c.seqlen_q, c.seqlen_k).c_str(), static_cast<long long>(c.batch),
              pair_label(c.nheads, c.nheads_k).c_str());
  std::string variant = c.variant == "default" ? "" : " [" + c.variant + "]";
  if (c.l2_section_pairs > 0) variant += " [l2 section " + std::to_string(c.l2_section_pairs) + "]";
  if (c.lag_dq_min_steps > 0) variant += " [lag " + std::to_string(c.lag_dq_min_steps) + "]";
  if (c.dq_convert_sms != 0) variant += " [dq convert " + std::to_string(c.dq_convert_sms) + "]";
  if (c.split_tail_tiles != 0) variant += " [split tail " + std::to_string(c.split_tail_tiles) + "]";
  if (c.dq_from_stored_ds != 0) variant += " [stored dS " + std::to_string(c.dq_from_stored_ds) + "]";
  if (r.supported)
    std::printf("%9.4f %8.1f  %s%s\n", r.timing.median_ms, r.tflops, r.kernel.c_str(),
                variant.c_str());
  else
    std::printf("not supported: %s\n", r.message.c_str());
  std::fflush(stdout);
}

nlohmann::ordered_json json_record(const Case& c, const CaseResult& r, const BenchContext& ctx) {
  nlohmann::ordered_json j;
  j["gpu"] = ctx.gpu_name;
  j["impl"] = "hopattn";
  j["kernel"] = r.supported ? nlohmann::ordered_json(r.kernel) : nlohmann::ordered_json(nullptr);
  j["direction"] = direction_name(c.direction);
  j["dtype"] = dtype_label(c.dtype);
  j["hdim"] = c.hdim;
  j["causal"] = c.causal;
  j["seqlen"] = c.seqlen_q;
  j["batch"] = c.batch;
  j["nheads"] = c.nheads;
  j["nheads_k"] = c.nheads_k;
  j["ms"] = r.supported ? nlohmann::ordered_json(r.timing.median_ms) : nlohmann::ordered_json(nullptr);
  j["tflops"] = r.supported ? nlohmann::ordered_json(r.tflops) : nlohmann::ordered_json(nullptr);
  j["seqlen_k"] = c.seqlen_k;
  j["hdim_v"] = c.hdim_v;
  j["window_left"] = c.window_left;
  j["window_right"] = c.window_right;
  j["softcap"] = c.softcap;
  j["variant"] = c.variant;
  j["l2_section_pairs"] = c.l2_section_pairs;  // 0: the library's rule
  j["lag_dq_min_steps"] = c.lag_dq_min_steps;  // 0: the library's rule
  j["dq_convert_sms"] = c.dq_convert_sms;      // 0: the library's rule
  j["split_tail_tiles"] = c.split_tail_tiles;  // 0: the library's rule
  j["dq_from_stored_ds"] = c.dq_from_stored_ds;  // 0: the library's rule
  j["qk_std"] = ctx.qk_std;                      // 1: Q and K entries N(0, 1)
  if (c.direction == Direction::kBwd) j["deterministic"] = c.deterministic;
  if (r.supported) {
    j["flops"] = r.flops;
    j["min_ms"] = r.timing.min_ms;
    j["max_ms"] = r.timing.max_ms;
    j["reps"] = r.timing.reps;
    j["buffer_sets"] = r.timing.buffer_sets;
  } else {
    j["error"] = r.message;
  }
  return j;
}

void write_json(const std::string& path, const nlohmann::ordered_json& records) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("--json: cannot open '" + path + "' for writing");
  f << records.dump(2) << "\n";
  if (!f) throw std::runtime_error("--json: error writing '" + path + "'");
}

}  // namespace hopattn_bench
