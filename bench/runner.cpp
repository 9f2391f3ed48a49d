#include "runner.hpp"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "cuda_util.hpp"
#include "fill.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"

namespace hopattn_bench {

namespace {

using hopattn::DType;

// e4m3 inputs write a 16-bit output (bf16, as FlashAttention-3 does); others keep their dtype.
DType out_dtype(DType in) { return in == DType::kFloat8E4M3 ? DType::kBFloat16 : in; }

struct Elements {
  int64_t q, k, v, out, lse;
};

Elements element_counts(const Case& c) {
  return {c.batch * c.seqlen_q * c.nheads * c.hdim, c.batch * c.seqlen_k * c.nheads_k * c.hdim,
          c.batch * c.seqlen_k * c.nheads_k * c.hdim_v, c.batch * c.seqlen_q * c.nheads * c.hdim_v,
          c.batch * c.nheads * c.seqlen_q};
}

size_t bytes_of(int64_t elements, DType t) {
  return static_cast<size_t>(elements) * static_cast<size_t>(hopattn::dtype_size(t));
}

// One set of device tensors: forward inputs/outputs, plus dout and the gradients for backward.
struct BufferSet {
  DeviceBuffer q, k, v, out, lse;
  DeviceBuffer dout, dq, dk, dv;
  DeviceBuffer descales;  // e4m3: q, k and v descales, (batch, nheads_k) each, all 1
};

uint64_t tensor_seed(uint64_t base, int set, int tensor) {
  return base + 0x100000001b3ull * static_cast<uint64_t>(set * 16 + tensor + 1);
}

DeviceBuffer random_normal_buffer(int64_t n, DType t, uint64_t seed, cudaStream_t stream, float stddev = 1.f) {
  DeviceBuffer b(bytes_of(n, t));
  fill_random_normal(b.get(), t, n, seed, stream, stddev);
  return b;
}

BufferSet allocate_set(const Case& c, int set, const BenchContext& ctx) {
  const Elements n = element_counts(c);
  const DType od = out_dtype(c.dtype);
  BufferSet b;
  b.q = random_normal_buffer(n.q, c.dtype, tensor_seed(ctx.seed, set, 0), ctx.stream, ctx.qk_std);
  b.k = random_normal_buffer(n.k, c.dtype, tensor_seed(ctx.seed, set, 1), ctx.stream, ctx.qk_std);
  b.v = random_normal_buffer(n.v, c.dtype, tensor_seed(ctx.seed, set, 2), ctx.stream);
  b.out = DeviceBuffer(bytes_of(n.out, od));  // written by the forward
  b.lse = DeviceBuffer(bytes_of(n.lse, DType::kFloat32));
  if (c.dtype == DType::kFloat8E4M3) {
    // FlashAttention-3's FP8 callers pass per-(batch, kv head) descales, and bench/peers.py does:
    // timed without them, the kernels would skip the descale loads that every real call makes.
    const std::vector<float> ones(static_cast<size_t>(3 * c.batch * c.nheads_k), 1.f);
    b.descales = DeviceBuffer(ones.size() * sizeof(float));
    BENCH_CUDA_CHECK(cudaMemcpy(b.descales.get(), ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  if (c.direction == Direction::kBwd) {
    b.dout = random_normal_buffer(n.out, od, tensor_seed(ctx.seed, set, 3), ctx.stream);
    b.dq = DeviceBuffer(bytes_of(n.q, c.dtype));
    b.dk = DeviceBuffer(bytes_of(n.k, c.dtype));
    b.dv = DeviceBuffer(bytes_of(n.v, c.dtype));
  }
  return b;
}

hopattn::TensorView view(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) {
  return hopattn::make_contiguous_view(b.get(), t, shape);
}

hopattn::MaskArgs mask_of(const Case& c) {
  hopattn::MaskArgs m;
  m.causal = c.causal;
  m.window_left = c.window_left;
  m.window_right = c.window_right;
  return m;
}

hopattn::FwdParams make_fwd_params(const Case& c, const BufferSet& b) {
  hopattn::FwdParams p;
  p.q = view(b.q, c.dtype, {c.batch, c.seqlen_q, c.nheads, c.hdim});
  p.k = view(b.k, c.dtype, {c.batch, c.seqlen_k, c.nheads_k, c.hdim});
  p.v = view(b.v, c.dtype, {c.batch, c.seqlen_k, c.nheads_k, c.hdim_v});
  p.out = view(b.out, out_dtype(c.dtype), {c.batch, c.seqlen_q, c.nheads, c.hdim_v});
  p.lse = view(b.lse, DType::kFloat32, {c.batch, c.nheads, c.seqlen_q});
  p.mask = mask_of(c);
  p.softcap = c.softcap;
  if (c.dtype == DType::kFloat8E4M3) {
    const float* descales = static_cast<const float*>(b.descales.get());
    const int64_t per_tensor = c.batch * c.nheads_k;
    p.q_descale = descales;
    p.k_descale = descales + per_tensor;
    p.v_descale = descales + 2 * per_tensor;
  }
  const FwdVariant& variant = find_fwd_variant(c.variant);
  if (variant.apply) variant.apply(p);
  if (!c.kernel.empty()) p.tuning.kernel = c.kernel.c_str();  // c outlives p
  p.tuning.l2_section_pairs = c.l2_section_pairs;
  return p;
}

hopattn::BwdParams make_bwd_params(const Case& c, const BufferSet& b) {
  const hopattn::FwdParams f = make_fwd_params(c, b);
  hopattn::BwdParams p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.lse = f.lse;
  p.dout = view(b.dout, out_dtype(c.dtype), {c.batch, c.seqlen_q, c.nheads, c.hdim_v});
  p.dq = view(b.dq, c.dtype, {c.batch, c.seqlen_q, c.nheads, c.hdim});
  p.dk = view(b.dk, c.dtype, {c.batch, c.seqlen_k, c.nheads_k, c.hdim});
  p.dv = view(b.dv, c.dtype, {c.batch, c.seqlen_k, c.nheads_k, c.hdim_v});
  p.mask = f.mask;
  p.softcap = f.softcap;
  p.deterministic = c.deterministic;
  p.tuning.l2_section_pairs = c.l2_section_pairs;
  p.tuning.lag_dq_min_steps = c.lag_dq_min_steps;
  p.tuning.dq_convert_sms = c.dq_convert_sms;
  p.tuning.split_tail_tiles = c.split_tail_tiles;
  p.tuning.dq_from_stored_ds = c.dq_from_stored_ds;
  return p;
}

CaseResult not_supported(const std::string& why) {
  CaseResult r;
  r.supported = false;
  r.message = why;
  return r;
}

hopattn::Error not_supported_error(const std::string& message) {
  return hopattn::Error(hopattn::ErrorCode::kNotSupported, "", message);
}

CaseResult timed_result(const Case& c, const hopattn::Plan& plan, const TimingResult& t) {
  CaseResult r;
  r.supported = true;
  r.kernel = plan.kernel;
  r.timing = t;
  r.flops = case_flops(c);
  r.tflops = t.median_ms > 0 ? r.flops / (t.median_ms * 1e9) : 0.0;
  return r;
}

CaseResult time_fwd(const Case& c, const std::vector<BufferSet>& sets, const BenchContext& ctx) {
  std::vector<hopattn::FwdParams> params;
  for (const BufferSet& b : sets) params.push_back(make_fwd_params(c, b));
  // One plan serves every set: the sets differ only in their (equally aligned) pointers.
  const hopattn::Plan plan = hopattn::plan_fwd(params.front(), ctx.device);
  const DeviceBuffer workspace(plan.workspace_bytes);
  const int nsets = static_cast<int>(sets.size());
  const TimingResult t = time_launches(
      [&](int i) {
        hopattn::run_fwd(plan, params[static_cast<size_t>(i % nsets)], workspace.get(),
                         workspace.bytes(), ctx.stream);
      },
      nsets, ctx.timing, ctx.stream);
  return timed_result(c, plan, t);
}

hopattn::Plan plan_fwd_for_bwd(const hopattn::FwdParams& p, const BenchContext& ctx) {
  try {
    return hopattn::plan_fwd(p, ctx.device);
  } catch (const hopattn::Error& e) {
    if (e.code() != hopattn::ErrorCode::kNotSupported) throw;
    throw not_supported_error(std::string("forward (needed for O and LSE): ") + e.what());
  }
}

CaseResult time_bwd(const Case& c, const std::vector<BufferSet>& sets, const BenchContext& ctx) {
  std::vector<hopattn::FwdParams> fwd;
  std::vector<hopattn::BwdParams> bwd;
  for (const BufferSet& b : sets) {
    fwd.push_back(make_fwd_params(c, b));
    bwd.push_back(make_bwd_params(c, b));
  }
  const hopattn::Plan fwd_plan = plan_fwd_for_bwd(fwd.front(), ctx);
  const hopattn::Plan bwd_plan = hopattn::plan_bwd(bwd.front(), ctx.device);
  const DeviceBuffer workspace(std::max(fwd_plan.workspace_bytes, bwd_plan.workspace_bytes));
  for (const hopattn::FwdParams& p : fwd)  // O and LSE of every set, untimed
    hopattn::run_fwd(fwd_plan, p, workspace.get(), workspace.bytes(), ctx.stream);
  BENCH_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  const int nsets = static_cast<int>(sets.size());
  const TimingResult t = time_launches(
      [&](int i) {
        hopattn::run_bwd(bwd_plan, bwd[static_cast<size_t>(i % nsets)], workspace.get(),
                         workspace.bytes(), ctx.stream);
      },
      nsets, ctx.timing, ctx.stream);
  return timed_result(c, bwd_plan, t);
}

}  // namespace

size_t buffer_set_bytes(const Case& c) {
  const Elements n = element_counts(c);
  const DType od = out_dtype(c.dtype);
  size_t bytes = bytes_of(n.q + n.k + n.v, c.dtype) + bytes_of(n.out, od) +
                 bytes_of(n.lse, DType::kFloat32);
  if (c.direction == Direction::kBwd)
    bytes += bytes_of(n.out, od) + bytes_of(n.q + n.k + n.v, c.dtype);  // dout, dq, dk, dv
  return bytes;
}

int buffer_set_count(size_t set_bytes, size_t l2_bytes) {
  if (set_bytes == 0 || set_bytes > l2_bytes) return 1;
  const size_t n = 2 * l2_bytes / set_bytes + 1;  // n * set_bytes > 2 * l2_bytes
  return static_cast<int>(std::min<size_t>(n, kMaxBufferSets));
}

CaseResult run_case(const Case& c, const BenchContext& ctx) {
  if (c.direction == Direction::kBwd && c.dtype == DType::kFloat8E4M3)
    return not_supported("e4m3 has no backward (FP8 is forward-only)");
  try {
    const int nsets = buffer_set_count(buffer_set_bytes(c), ctx.l2_bytes);
    std::vector<BufferSet> sets;
    sets.reserve(static_cast<size_t>(nsets));
    for (int s = 0; s < nsets; ++s) sets.push_back(allocate_set(c, s, ctx));
    return c.direction == Direction::kFwd ? time_fwd(c, sets, ctx) : time_bwd(c, sets, ctx);
  } catch (const hopattn::Error& e) {
    // A --kernels name that does not fit this shape (another head dim, dtype or ablation
    // setting) skips the case like an unsupported one: the lists apply to every shape of a grid.
    const bool forced_misfit = !c.kernel.empty() && e.argument() == "tuning.kernel";
    if (e.code() != hopattn::ErrorCode::kNotSupported && !forced_misfit) throw;
    return not_supported(e.what());
  }
}

}  // namespace hopattn_bench
