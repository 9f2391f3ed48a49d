// Human-readable table lines and JSON records of the results.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "bench_case.hpp"
#include "runner.hpp"

namespace hopattn_bench {

// Prints one line per case; a header before the first case and whenever direction or dtype
// changes.
class TablePrinter {
 public:
  void print(const Case& c, const CaseResult& r);

 private:
  std::string section_;
};

// Keys: gpu, impl ("hopattn"), kernel, direction, dtype, hdim, causal, seqlen (= seqlen_q),
// batch, nheads, nheads_k, ms (median), tflops, then the rest of the case and timing details.
// A case the library does not support has ms = tflops = null and an "error" message.
nlohmann::ordered_json json_record(const Case& c, const CaseResult& r, const BenchContext& ctx);

// Writes the array of records; throws std::runtime_error when the file cannot be written.
void write_json(const std::string& path, const nlohmann::ordered_json& records);

}  // namespace hopattn_bench
