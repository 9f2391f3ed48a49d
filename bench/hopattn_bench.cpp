// hopattn-bench: times the hopattn kernels with CUDA events.
//
//   hopattn-bench --grid [--hdims 64,128,256] [--seqlens ...] [--directions fwd,bwd]
//                 [--dtypes bf16,fp16,e4m3]                        the paper's grid
//   hopattn-bench --table2 [--variant default,...] [--dtype bf16]   the Table 2 ablation shape
//   hopattn-bench [--batch --seqlen-q --seqlen-k --nheads --nheads-k --hdim --hdim-v --causal
//                  --window-left --window-right --softcap --dtype --direction]  one shape
//   common: --warmup --reps --seed --qk-std --device --json out.json
//   variants of each shape, timed in 3 rounds of rotated order (median of the rounds):
//          --kernels a,b  --variant default,no-pingpong  --l2-section-pairs 0,16  --lag-dq-min-steps 2,3
//
// Exit status: 0 when every case ran or was reported "not supported"; 1 on any other library
// or CUDA error (results so far are still written to --json); 2 on bad command-line values.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_case.hpp"
#include "cuda_util.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "report.hpp"
#include "runner.hpp"

namespace hopattn_bench {
namespace {

struct CliOptions {
  // Modes.
  bool grid = false;
  bool table2 = false;
  // --grid
  std::vector<int> hdims{64, 128, 256};
  std::vector<int> seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<std::string> directions{"fwd", "bwd"};
  std::vector<std::string> dtypes{"bf16"};
  // --table2
  std::vector<std::string> variants;  // empty: all
  // Single shape (dtype also applies to --table2).
  int64_t batch = 4;
  int64_t seqlen_q = 4096;
  int64_t seqlen_k = 0;  // 0: seqlen_q
  int64_t nheads = 16;
  int64_t nheads_k = 0;  // 0: nheads
  int64_t hdim = 128;
  int64_t hdim_v = 0;    // 0: hdim
  bool causal = false;
  int32_t window_left = -1;
  int32_t window_right = -1;
  float softcap = 0.f;
  bool deterministic = false;
  std::string dtype = "bf16";
  std::string direction = "fwd";
  // Common: forward experiments, each value a separate case run right after the others of its
  // shape (an A/B in one process, no rebuild).
  std::vector<std::string> kernels;        // empty: the dispatcher's choice
  std::vector<int32_t> l2_section_pairs;  // empty: sized from the L2 cache
  std::vector<int32_t> lag_dq_min_steps;  // empty: the library's rule
  std::vector<int32_t> dq_convert_sms;    // empty: the library's rule
  std::vector<int32_t> split_tail_tiles;  // empty: the library's rule
  std::vector<int32_t> dq_from_stored_ds;  // empty: the library's rule
  TimingOptions timing;
  uint64_t seed = 0x5eedu;
  float qk_std = 1.f;
  int device = 0;
  std::string json_path;
};

void add_options(CLI::App& app, CliOptions& o) {
  CLI::Option* grid = app.add_flag("--grid", o.grid, "Run the FlashAttention-3 paper's grid");
  CLI::Option* table2 =
      app.add_flag("--table2", o.table2, "Run the paper's Table 2 ablation shape (4x8448x16x128)");
  grid->excludes(table2);

  app.add_option("--hdims", o.hdims, "Grid head dims")->delimiter(',')->needs(grid)
      ->capture_default_str();
  app.add_option("--seqlens", o.seqlens, "Grid sequence lengths (must divide 16384)")
      ->delimiter(',')->needs(grid)->capture_default_str();
  app.add_option("--directions", o.directions, "Grid directions")->delimiter(',')->needs(grid)
      ->check(CLI::IsMember({"fwd", "bwd"}))->capture_default_str();
  app.add_option("--dtypes", o.dtypes, "Grid dtypes")->delimiter(',')->needs(grid)
      ->check(CLI::IsMember({"bf16", "fp16", "e4m3"}))->capture_default_str();
  app.add_option("--variant", o.variants,
                 "Forward variants to time: with --table2 (default: all) or per single shape (default: "
                 "default); one of: " + fwd_variant_names())
      ->delimiter(',')->excludes(grid);

  const std::vector<CLI::Option*> single = {
      app.add_option("--batch", o.batch, "Batch size")->capture_default_str(),
      app.add_option("--seqlen-q", o.seqlen_q, "Query length")->capture_default_str(),
      app.add_option("--seqlen-k", o.seqlen_k, "Key length (0: = seqlen-q)")->capture_default_str(),
      app.add_option("--nheads", o.nheads, "Query heads")->capture_default_str(),
      app.add_option("--nheads-k", o.nheads_k, "Key/value heads (0: = nheads)")
          ->capture_default_str(),
      app.add_option("--hdim", o.hdim, "Head dim of q and k")->capture_default_str(),
      app.add_option("--hdim-v", o.hdim_v, "Head dim of v (0: = hdim)")->capture_default_str(),
      app.add_flag("--causal", o.causal, "Causal mask (bottom-right aligned)"),
      app.add_option("--window-left", o.window_left, "Sliding window left (-1: unbounded)")
          ->capture_default_str(),
      app.add_option("--window-right", o.window_right, "Sliding window right (-1: unbounded)")
          ->capture_default_str(),
      app.add_option("--softcap", o.softcap, "Score soft-capping (0: off)")->capture_default_str(),
      app.add_flag("--deterministic", o.deterministic, "Deterministic backward"),
      app.add_option("--direction", o.direction, "fwd, bwd or both")
          ->check(CLI::IsMember({"fwd", "bwd", "both"}))->capture_default_str(),
  };
  for (CLI::Option* opt : single) {
    opt->excludes(grid);
    opt->excludes(table2);
  }
  app.add_option("--dtype", o.dtype, "Data type (single shape and --table2)")
      ->check(CLI::IsMember({"bf16", "fp16", "e4m3"}))->excludes(grid)->capture_default_str();

  app.add_option("--kernels", o.kernels,
                 "Forward: time each of these compiled kernels (names as in the kernel column) per shape")
      ->delimiter(',');
  app.add_option("--l2-section-pairs", o.l2_section_pairs,
                 "Time each of these L2 section sizes ((batch, head) pairs; 0: the library's rule)")
      ->delimiter(',')->check(CLI::Range(0, 1 << 30));
  app.add_option("--lag-dq-min-steps", o.lag_dq_min_steps,
                 "Backward: time each of these dQ-lag thresholds (steps per key tile; 0: the library's rule)")
      ->delimiter(',')->check(CLI::Range(0, 1 << 30));
  app.add_option("--dq-convert-sms", o.dq_convert_sms,
                 "Backward: time each of these counts of SMs converting dQ during the main kernel (-1: none, "
                 "after it; 0: the library's rule)")
      ->delimiter(',')->check(CLI::Range(-1, 1 << 30));
  app.add_option("--split-tail-tiles", o.split_tail_tiles,
                 "Backward: time each of these counts of last key tiles handed out as two halves (-1: none; 0: "
                 "the library's rule)")
      ->delimiter(',')->check(CLI::Range(-1, 1 << 30));
  app.add_option("--stored-ds", o.dq_from_stored_ds,
                 "Backward: time each of these dQ forms (1: from a stored dS where supported, -1: dQ partials "
                 "added in the workspace; 0: the library's rule)")
      ->delimiter(',')->check(CLI::Range(-1, 1));
  app.add_option("--warmup", o.timing.warmup, "Untimed launches before timing")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--reps", o.timing.reps, "Timed launches (the median is reported)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-warmup-ms", o.timing.min_warmup_ms,
                 "More warm-up launches where --warmup of them take less than this (ms)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--min-time-ms", o.timing.min_timed_ms,
                 "More timed launches where --reps of them take less than this (ms)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the random inputs")->capture_default_str();
  app.add_option("--qk-std", o.qk_std,
                 "Standard deviation of Q's and K's entries (large: scores jump past the max-free "
                 "softmax's lag, timing the forward's score recompute)")
      ->check(CLI::Range(1e-3f, 1e3f))
      ->capture_default_str();
  app.add_option("--device", o.device, "CUDA device ordinal")->capture_default_str();
  app.add_option("--json", o.json_path, "Write the records (a JSON array) to this file");
}

void require_positive(int64_t value, const char* name) {
  if (value <= 0)
    throw std::invalid_argument(std::string(name) + ": must be > 0, got " + std::to_string(value));
}

std::vector<Case> single_shape_cases(const CliOptions& o) {
  require_positive(o.batch, "--batch");
  require_positive(o.seqlen_q, "--seqlen-q");
  require_positive(o.nheads, "--nheads");
  require_positive(o.hdim, "--hdim");
  Case c;
  c.dtype = parse_dtype(o.dtype);
  c.batch = o.batch;
  c.seqlen_q = o.seqlen_q;
  c.seqlen_k = o.seqlen_k > 0 ? o.seqlen_k : o.seqlen_q;
  c.nheads = o.nheads;
  c.nheads_k = o.nheads_k > 0 ? o.nheads_k : o.nheads;
  c.hdim = o.hdim;
  c.hdim_v = o.hdim_v > 0 ? o.hdim_v : o.hdim;
  c.causal = o.causal;
  c.window_left = o.window_left;
  c.window_right = o.window_right;
  c.softcap = o.softcap;
  c.deterministic = o.deterministic;
  std::vector<Case> cases;
  for (Direction d : {Direction::kFwd, Direction::kBwd}) {
    if (o.direction != "both" && o.direction != direction_name(d)) continue;
    c.direction = d;
    cases.push_back(c);
  }
  return cases;
}

// One case per (kernel, variant, L2 section) of --kernels x --variant x --l2-section-pairs for each
// forward case (a --table2 case keeps its own variant), and
// per (L2 section, lag threshold, dQ-converting SMs) for each backward case: the variants of one
// shape, one group each (run_all times a group's variants in rotated order).
std::vector<std::vector<Case>> expand_experiments(const std::vector<Case>& cases, const CliOptions& o) {
  const std::vector<std::string> no_kernel{""};  // the dispatcher's choice
  const std::vector<std::string>& kernels = o.kernels.empty() ? no_kernel : o.kernels;
  const std::vector<int32_t> library_rule{0};  // 0 means the library's rule for every numeric knob
  const std::vector<int32_t>& sections = o.l2_section_pairs.empty() ? library_rule : o.l2_section_pairs;
  const std::vector<int32_t>& lags = o.lag_dq_min_steps.empty() ? library_rule : o.lag_dq_min_steps;
  const std::vector<int32_t>& converts = o.dq_convert_sms.empty() ? library_rule : o.dq_convert_sms;
  const std::vector<int32_t>& splits = o.split_tail_tiles.empty() ? library_rule : o.split_tail_tiles;
  const std::vector<int32_t>& stored = o.dq_from_stored_ds.empty() ? library_rule : o.dq_from_stored_ds;
  std::vector<std::vector<Case>> out;
  for (const Case& c : cases) {
    std::vector<Case>& group = out.emplace_back();
    const std::vector<std::string> own_variant{c.variant};
    const bool variants_here = c.direction == Direction::kFwd && !o.table2 && !o.variants.empty();
    for (const std::string& k : c.direction == Direction::kFwd ? kernels : no_kernel)
      for (const std::string& variant : variants_here ? o.variants : own_variant)
        for (int32_t s : sections)
          for (int32_t lag : c.direction == Direction::kBwd ? lags : library_rule)
            for (int32_t conv : c.direction == Direction::kBwd ? converts : library_rule)
              for (int32_t split : c.direction == Direction::kBwd ? splits : library_rule)
                for (int32_t sds : c.direction == Direction::kBwd ? stored : library_rule) {
                  Case v = c;
                  v.kernel = k;
                  v.variant = find_fwd_variant(variant).name;
                  v.l2_section_pairs = s;
                  v.lag_dq_min_steps = lag;
                  v.dq_convert_sms = conv;
                  v.split_tail_tiles = split;
                  v.dq_from_stored_ds = sds;
                  group.push_back(v);
                }
  }
  return out;
}

// Rounds in which the variants of one shape are timed, each round starting one variant later.
// The first case a process times runs faster than the next ones (up to 7% at bwd d64 causal 4k
// on an H200, clocks: perf-log session 22), which a fixed order would give to one variant.
constexpr int kVariantRounds = 3;

// One result from a variant's rounds: the median of the rounds' medians.
CaseResult combine_rounds(const std::vector<CaseResult>& rounds) {
  CaseResult r = rounds.front();
  if (!r.supported) return r;
  std::vector<double> medians;
  for (const CaseResult& x : rounds) {
    medians.push_back(x.timing.median_ms);
    r.timing.min_ms = std::min(r.timing.min_ms, x.timing.min_ms);
    r.timing.max_ms = std::max(r.timing.max_ms, x.timing.max_ms);
  }
  std::sort(medians.begin(), medians.end());
  r.timing.median_ms = medians[medians.size() / 2];
  r.timing.reps = r.timing.reps * static_cast<int>(rounds.size());
  r.tflops = r.timing.median_ms > 0 ? r.flops / (r.timing.median_ms * 1e9) : 0.0;
  return r;
}

// The results of one group in its own order: a single case timed once; several variants in
// kVariantRounds rotated rounds.
std::vector<CaseResult> time_group(const std::vector<Case>& group, const BenchContext& ctx) {
  const size_t n = group.size();
  if (n == 1) return {run_case(group.front(), ctx)};
  std::vector<std::vector<CaseResult>> rounds(n);
  for (int round = 0; round < kVariantRounds; ++round)
    for (size_t i = 0; i < n; ++i) {
      const size_t v = (i + static_cast<size_t>(round)) % n;
      rounds[v].push_back(run_case(group[v], ctx));
    }
  std::vector<CaseResult> out;
  for (const std::vector<CaseResult>& r : rounds) out.push_back(combine_rounds(r));
  return out;
}

std::vector<Case> build_cases(const CliOptions& o) {
  if (o.table2) {
    std::vector<std::string> names = o.variants;
    if (names.empty())
      for (const FwdVariant& v : fwd_variants()) names.push_back(v.name);
    return table2_cases(parse_dtype(o.dtype), names);
  }
  if (!o.grid) return single_shape_cases(o);
  GridSpec spec;
  spec.hdims = o.hdims;
  spec.seqlens = o.seqlens;
  spec.directions.clear();
  for (const std::string& d : o.directions) spec.directions.push_back(parse_direction(d));
  spec.dtypes.clear();
  for (const std::string& t : o.dtypes) spec.dtypes.push_back(parse_dtype(t));
  return grid_cases(spec);
}

// Expects o.device to be the current device already.
BenchContext make_context(const CliOptions& o, cudaStream_t stream) {
  cudaDeviceProp prop{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
  BenchContext ctx;
  ctx.device = hopattn::query_device();
  ctx.gpu_name = prop.name;
  ctx.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  ctx.stream = stream;
  ctx.timing = o.timing;
  ctx.seed = o.seed;
  ctx.qk_std = o.qk_std;
  std::printf("# %s (sm_%d%d, %d SMs, L2 %.0f MiB), hopattn %s; %d warm-up (>= %.0f ms) + %d timed "
              "launches (>= %.0f ms), median; inputs rotated so > 2x L2 is touched between reuses\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              static_cast<double>(prop.l2CacheSize) / (1 << 20), hopattn::version(),
              o.timing.warmup, o.timing.min_warmup_ms, o.timing.reps, o.timing.min_timed_ms);
  if (o.qk_std != 1.f)
    std::printf("# Q and K entries N(0, %g^2) (--qk-std), V N(0, 1)\n", static_cast<double>(o.qk_std));
  std::fflush(stdout);
  return ctx;
}

void print_table2_reference() {
  std::printf("# paper, Table 2 (H100 SXM5, fp16): FlashAttention-3 %.3f ms, %.0f TFLOP/s\n",
              kTable2PaperMs, kTable2PaperTflops);
}

// Runs every case; on a fatal error the records so far are still written, then it rethrows.
void run_all(const std::vector<std::vector<Case>>& groups, const BenchContext& ctx, const std::string& json_path) {
  TablePrinter table;
  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  try {
    for (const std::vector<Case>& group : groups) {
      const std::vector<CaseResult> results = time_group(group, ctx);
      for (size_t i = 0; i < group.size(); ++i) {
        table.print(group[i], results[i]);
        records.push_back(json_record(group[i], results[i], ctx));
      }
    }
  } catch (...) {
    if (!json_path.empty() && !records.empty()) {
      write_json(json_path, records);
      std::fprintf(stderr, "partial results (%zu records) written to %s\n", records.size(),
                   json_path.c_str());
    }
    throw;
  }
  if (!json_path.empty()) {
    write_json(json_path, records);
    std::printf("# %zu records written to %s\n", records.size(), json_path.c_str());
  }
}

int run(const CliOptions& o) {
  std::vector<std::vector<Case>> cases;
  try {
    cases = expand_experiments(build_cases(o), o);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    BENCH_CUDA_CHECK(cudaSetDevice(o.device));
    const Stream stream;
    const BenchContext ctx = make_context(o, stream.get());
    run_all(cases, ctx, o.json_path);
    if (o.table2) print_table2_reference();
    return 0;
  } catch (const hopattn::Error& e) {
    std::fprintf(stderr, "hopattn error [%s]: %s\n", hopattn::error_code_name(e.code()), e.what());
  } catch (const CudaError& e) {
    std::fprintf(stderr, "CUDA error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

}  // namespace
}  // namespace hopattn_bench

int main(int argc, char** argv) {
  hopattn_bench::CliOptions options;
  CLI::App app{"hopattn-bench: times hopattn attention kernels with CUDA events"};
  hopattn_bench::add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  return hopattn_bench::run(options);
}
