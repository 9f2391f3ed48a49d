// PyTorch operators over the hopattn core library.
//
// This file is glue only: it turns at::Tensors into hopattn::TensorViews, allocates the outputs and
// the workspace from the caching allocator, picks the current stream, and calls plan_* / run_*.
// Argument validation is the core library's job; the checks here cover only what the core cannot
// see through a raw pointer (devices, the dtype/length of int32 and float32 side arrays) or what
// must hold before outputs can be allocated. Every error message starts with the argument's name,
// like the core's.
//
// Error mapping (hopattn::Error::code() -> Python):
//   kInvalidArgument -> ValueError, kNotSupported -> NotImplementedError, else -> RuntimeError.

#include <Python.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hopattn/hopattn.hpp"

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using hopattn::DType;
using hopattn::ErrorCode;
using hopattn::TensorView;

// ---- errors -----------------------------------------------------------------------------------

[[noreturn]] void bad_arg(const std::string& name, const std::string& msg) {
  TORCH_CHECK_VALUE(false, name + ": " + msg);
}

// Runs fn(), rethrowing hopattn::Error as the c10 error type that maps to the right Python
// exception. The message is the core's, verbatim ("arg: what was expected, what was given").
template <class Fn>
void call_core(Fn&& fn) {
  try {
    fn();
  } catch (const hopattn::Error& e) {
    const std::string msg = e.what();
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
        TORCH_CHECK_VALUE(false, msg);
        break;
      case ErrorCode::kNotSupported:
        TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
        break;
      default:
        TORCH_CHECK(false, msg);
    }
  }
}

// ---- tensor conversion ------------------------------------------------------------------------

std::optional<DType> to_core_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat8_e4m3fn: return DType::kFloat8E4M3;
    case at::kFloat: return DType::kFloat32;
    case at::kInt: return DType::kInt32;
    default: return std::nullopt;
  }
}

// Every tensor of a call lives on the device of the first one (q, or out_partial for combine).
void check_device(const Tensor& t, const char* name, const at::Device& device) {
  if (!t.is_cuda())
    bad_arg(name, "expected a CUDA tensor, got a tensor on device '" + t.device().str() + "'");
  if (t.device() != device)
    bad_arg(name, "expected a tensor on " + device.str() + " (where the other inputs are), got " +
                      t.device().str());
}

// "(2, 3, 4)", with std::to_string only: a library built by a compiler wrapper that links its own
// copy of libstdc++ crashed on numeric stream insertion once loaded into a torch process (see
// python/README.md, Troubleshooting), so the error paths here stay clear of iostreams.
std::string shape_str(c10::IntArrayRef sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + (sizes.size() == 1 ? ",)" : ")");
}

TensorView to_view(const Tensor& t, const char* name, const at::Device& device) {
  check_device(t, name, device);
  const std::optional<DType> dt = to_core_dtype(t.scalar_type());
  if (!dt)
    bad_arg(name, std::string("dtype ") + c10::toString(t.scalar_type()) +
                      " is not supported (expected float16, bfloat16, float8_e4m3fn, float32 or int32)");
  if (t.dim() < 1 || t.dim() > 4)
    bad_arg(name, "expected a tensor of 1 to 4 dims, got " + std::to_string(t.dim()) + " dims");
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = *dt;
  v.rank = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  return v;
}

TensorView to_view(const OptTensor& t, const char* name, const at::Device& device) {
  return t.has_value() ? to_view(*t, name, device) : TensorView{};
}

// A (len,) int32 device array that the core receives as a bare pointer.
const int32_t* int32_array(const OptTensor& t, const char* name, const at::Device& device,
                           int64_t len) {
  if (!t.has_value()) return nullptr;
  check_device(*t, name, device);
  if (t->scalar_type() != at::kInt)
    bad_arg(name, std::string("expected dtype int32, got ") + c10::toString(t->scalar_type()));
  if (t->dim() != 1 || t->size(0) != len)
    bad_arg(name, "expected shape (" + std::to_string(len) + ",), got " + shape_str(t->sizes()));
  if (!t->is_contiguous()) bad_arg(name, "must be contiguous");
  return t->data_ptr<int32_t>();
}

// A float32 (batch, nheads_k) descale array, also received as a bare pointer. Broadcastable inputs
// (a scalar-like (1, 1) tensor, an expand()ed view) are materialised; keep_alive holds the copy.
const float* descale_array(const OptTensor& t, const char* name, const at::Device& device,
                           int64_t batch, int64_t nheads_k, std::vector<Tensor>& keep_alive) {
  if (!t.has_value()) return nullptr;
  check_device(*t, name, device);
  if (t->scalar_type() != at::kFloat)
    bad_arg(name, std::string("expected dtype float32, got ") + c10::toString(t->scalar_type()));
  if (t->dim() != 2 || (t->size(0) != batch && t->size(0) != 1) ||
      (t->size(1) != nheads_k && t->size(1) != 1))
    bad_arg(name, "expected shape (batch, nheads_k) = (" + std::to_string(batch) + ", " +
                      std::to_string(nheads_k) + "), got " + shape_str(t->sizes()));
  keep_alive.push_back(t->expand({batch, nheads_k}).contiguous());
  return keep_alive.back().data_ptr<float>();
}

int32_t to_i32(int64_t x, const char* name) {
  if (x < INT32_MIN || x > INT32_MAX) bad_arg(name, "does not fit in int32: " + std::to_string(x));
  return static_cast<int32_t>(x);
}

// A descale argument of the FP8 forward: a 2-D (batch, nheads_k) tensor is FlashAttention-3's
// per-(batch, kv head) factor; a 3-D (batch, heads, num_blocks) tensor, as quantize_fp8 returns,
// holds block descales of `block_rows` rows each (0 with a single block: the whole sequence,
// rounded up to a multiple of `round_rows`).
void descale_arg(const OptTensor& t, const char* name, const at::Device& device, int64_t batch,
                 int64_t nheads_k, int64_t block_rows, const char* rows_name, int64_t seqlen,
                 int64_t round_rows, const float** tensor_out, hopattn::TensorView* block_out,
                 int32_t* rows_out, std::vector<Tensor>& keep_alive) {
  if (!t.has_value()) return;
  if (t->dim() != 3) {
    *tensor_out = descale_array(t, name, device, batch, nheads_k, keep_alive);
    return;
  }
  int64_t rows = block_rows;
  if (rows <= 0) {
    if (t->size(2) != 1)
      bad_arg(rows_name, std::string("must be > 0 with a (batch, heads, num_blocks) ") + name + " of " +
                             std::to_string(t->size(2)) + " blocks");
    rows = std::max<int64_t>((seqlen + round_rows - 1) / round_rows * round_rows, 1);
  }
  if (*rows_out != 0 && *rows_out != rows)
    bad_arg(rows_name, "k_descale and v_descale imply different block sizes");
  *rows_out = to_i32(rows, rows_name);
  *block_out = to_view(*t, name, device);
}

Tensor workspace_for(const hopattn::Plan& plan, const at::Device& device) {
  if (plan.workspace_bytes == 0) return Tensor();
  return at::empty({static_cast<int64_t>(plan.workspace_bytes)},
                   at::TensorOptions().dtype(at::kByte).device(device));
}

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

cudaStream_t current_stream(const at::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

at::Device device_of_first(const Tensor& t, const char* name) {
  if (!t.is_cuda())
    bad_arg(name, "expected a CUDA tensor, got a tensor on device '" + t.device().str() + "'");
  return t.device();
}

// ---- forward ----------------------------------------------------------------------------------

struct FwdArgs {
  Tensor q, k, v;
  OptTensor cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double softmax_scale = 0.0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  OptTensor q_descale, k_descale, v_descale;
  OptTensor page_table, cache_seqlens, cache_batch_idx, k_new, v_new;
  int64_t num_splits = 1;
  bool pack_gqa = false;
  int64_t q_block_rows = 0, kv_block_rows = 0;  // for 3-D (block) descales
};


std::tuple<Tensor, Tensor> run_forward(const FwdArgs& a) {
  const at::Device device = device_of_first(a.q, "q");
  const c10::cuda::CUDAGuard guard(device);

  hopattn::FwdParams p;
  p.q = to_view(a.q, "q", device);
  p.k = to_view(a.k, "k", device);
  p.v = to_view(a.v, "v", device);

  const bool varlen = a.cu_seqlens_q.has_value() || a.cu_seqlens_k.has_value();
  int64_t batch = a.q.size(0);
  if (varlen) {
    const OptTensor& cu = a.cu_seqlens_q.has_value() ? a.cu_seqlens_q : a.cu_seqlens_k;
    const char* cu_name = a.cu_seqlens_q.has_value() ? "cu_seqlens_q" : "cu_seqlens_k";
    if (cu->dim() != 1 || cu->size(0) < 1)
      bad_arg(cu_name, "expected shape (batch + 1,), got " + shape_str(cu->sizes()));
    batch = cu->size(0) - 1;
    p.batch_varlen = to_i32(batch, cu_name);
    p.cu_seqlens_q = int32_array(a.cu_seqlens_q, "cu_seqlens_q", device, batch + 1);
    p.cu_seqlens_k = int32_array(a.cu_seqlens_k, "cu_seqlens_k", device, batch + 1);
  }
  p.seqused_q = int32_array(a.seqused_q, "seqused_q", device, batch);
  p.seqused_k = int32_array(a.seqused_k, "seqused_k", device, batch);
  p.max_seqlen_q = to_i32(a.max_seqlen_q, "max_seqlen_q");
  p.max_seqlen_k = to_i32(a.max_seqlen_k, "max_seqlen_k");

  p.softmax_scale = static_cast<float>(a.softmax_scale);
  p.mask.causal = a.causal;
  p.mask.window_left = to_i32(a.window_left, "window_left");
  p.mask.window_right = to_i32(a.window_right, "window_right");
  p.softcap = static_cast<float>(a.softcap);

  std::vector<Tensor> keep_alive;
  const int64_t nheads_k = a.k.dim() >= 2 ? a.k.size(-2) : 0;
  {
    const bool dense = a.q.dim() == 4 && a.k.dim() == 4;
    const int64_t seqlen_q = dense ? a.q.size(1) : 0, seqlen_k = dense ? a.k.size(1) : 0;
    hopattn::Fp8BlockDescale& bd = p.block_descale;
    constexpr int64_t kKeyTile = 128;  // FP8 K/V scale blocks cover whole key tiles
    descale_arg(a.q_descale, "q_descale", device, batch, nheads_k, a.q_block_rows, "q_block_rows", seqlen_q, 1,
                &p.q_descale, &bd.q, &bd.q_block_rows, keep_alive);
    descale_arg(a.k_descale, "k_descale", device, batch, nheads_k, a.kv_block_rows, "kv_block_rows", seqlen_k,
                kKeyTile, &p.k_descale, &bd.k, &bd.kv_block_rows, keep_alive);
    descale_arg(a.v_descale, "v_descale", device, batch, nheads_k, a.kv_block_rows, "kv_block_rows", seqlen_k,
                kKeyTile, &p.v_descale, &bd.v, &bd.kv_block_rows, keep_alive);
  }

  p.page_table = to_view(a.page_table, "page_table", device);
  p.cache_seqlens = to_view(a.cache_seqlens, "cache_seqlens", device);
  p.cache_batch_idx = to_view(a.cache_batch_idx, "cache_batch_idx", device);
  p.k_new = to_view(a.k_new, "k_new", device);
  p.v_new = to_view(a.v_new, "v_new", device);
  p.num_splits = to_i32(a.num_splits, "num_splits");
  p.pack_gqa = a.pack_gqa;

  // Outputs: out like q with v's head dim (bf16 for e4m3 inputs), lse float32 (batch, nheads,
  // seqlen_q), or (nheads, total_q) for varlen. When q's rank does not fit the layout, nothing is
  // allocated and the planner reports the shape error in its own words.
  Tensor out, lse;
  if (a.q.dim() == (varlen ? 3 : 4)) {
    const at::ScalarType out_dtype =
        a.q.scalar_type() == at::kFloat8_e4m3fn ? at::kBFloat16 : a.q.scalar_type();
    std::vector<int64_t> out_shape = a.q.sizes().vec();
    out_shape.back() = a.v.size(-1);
    out = at::empty(out_shape, a.q.options().dtype(out_dtype));
    const auto f32 = a.q.options().dtype(at::kFloat);
    lse = varlen ? at::empty({a.q.size(1), a.q.size(0)}, f32)
                 : at::empty({a.q.size(0), a.q.size(2), a.q.size(1)}, f32);
    p.out = to_view(out, "out", device);
    p.lse = to_view(lse, "lse", device);
  }

  call_core([&] {
    const hopattn::Plan plan = hopattn::plan_fwd(p, hopattn::query_device());
    TORCH_CHECK(out.defined(), "q: planned a forward with no output, shape " + shape_str(a.q.sizes()));
    Tensor ws = workspace_for(plan, device);
    hopattn::run_fwd(plan, p, data_or_null(ws), plan.workspace_bytes, current_stream(device));
  });
  return {out, lse};
}

std::tuple<Tensor, Tensor> fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                               const OptTensor& seqused_q, const OptTensor& seqused_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale,
                               bool causal, int64_t window_left, int64_t window_right,
                               double softcap, const OptTensor& q_descale,
                               const OptTensor& k_descale, const OptTensor& v_descale,
                               const OptTensor& page_table, const OptTensor& cache_seqlens,
                               const OptTensor& cache_batch_idx, const OptTensor& k_new,
                               const OptTensor& v_new, int64_t num_splits, bool pack_gqa,
                               bool /*deterministic: used by the backward only*/, int64_t q_block_rows,
                               int64_t kv_block_rows) {
  // Appending to the cache writes into k and v, which this op's schema declares read-only.
  if (k_new.has_value() || v_new.has_value())
    bad_arg(k_new.has_value() ? "k_new" : "v_new",
            "appending to a KV cache writes k and v: use hopattn::fwd_kvcache");
  FwdArgs a;
  a.q = q, a.k = k, a.v = v;
  a.cu_seqlens_q = cu_seqlens_q, a.cu_seqlens_k = cu_seqlens_k;
  a.seqused_q = seqused_q, a.seqused_k = seqused_k;
  a.max_seqlen_q = max_seqlen_q, a.max_seqlen_k = max_seqlen_k;
  a.softmax_scale = softmax_scale, a.causal = causal;
  a.window_left = window_left, a.window_right = window_right, a.softcap = softcap;
  a.q_descale = q_descale, a.k_descale = k_descale, a.v_descale = v_descale;
  a.page_table = page_table, a.cache_seqlens = cache_seqlens, a.cache_batch_idx = cache_batch_idx;
  a.num_splits = num_splits, a.pack_gqa = pack_gqa;
  a.q_block_rows = q_block_rows, a.kv_block_rows = kv_block_rows;
  return run_forward(a);
}

std::tuple<Tensor, Tensor> fwd_kvcache(
    const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const OptTensor& k_new,
    const OptTensor& v_new, const OptTensor& cache_seqlens, const OptTensor& cache_batch_idx,
    const OptTensor& page_table, const OptTensor& q_descale, const OptTensor& k_descale,
    const OptTensor& v_descale, double softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, int64_t num_splits, bool pack_gqa) {
  FwdArgs a;
  a.q = q, a.k = k_cache, a.v = v_cache;
  a.k_new = k_new, a.v_new = v_new;
  a.cache_seqlens = cache_seqlens, a.cache_batch_idx = cache_batch_idx, a.page_table = page_table;
  a.q_descale = q_descale, a.k_descale = k_descale, a.v_descale = v_descale;
  a.softmax_scale = softmax_scale, a.causal = causal;
  a.window_left = window_left, a.window_right = window_right, a.softcap = softcap;
  a.num_splits = num_splits, a.pack_gqa = pack_gqa;
  return run_forward(a);
}

// ---- backward ---------------------------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> bwd(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    const Tensor& lse, const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
    const OptTensor& seqused_q, const OptTensor& seqused_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, double softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, bool deterministic) {
  const at::Device device = device_of_first(q, "q");
  const c10::cuda::CUDAGuard guard(device);

  hopattn::BwdParams p;
  p.q = to_view(q, "q", device);
  p.k = to_view(k, "k", device);
  p.v = to_view(v, "v", device);
  p.out = to_view(out, "out", device);
  p.lse = to_view(lse, "lse", device);
  p.dout = to_view(dout, "dout", device);

  const bool varlen = cu_seqlens_q.has_value() || cu_seqlens_k.has_value();
  int64_t batch = q.size(0);
  if (varlen) {
    const OptTensor& cu = cu_seqlens_q.has_value() ? cu_seqlens_q : cu_seqlens_k;
    const char* cu_name = cu_seqlens_q.has_value() ? "cu_seqlens_q" : "cu_seqlens_k";
    if (cu->dim() != 1 || cu->size(0) < 1)
      bad_arg(cu_name, "expected shape (batch + 1,), got " + shape_str(cu->sizes()));
    batch = cu->size(0) - 1;
    p.batch_varlen = to_i32(batch, cu_name);
    p.cu_seqlens_q = int32_array(cu_seqlens_q, "cu_seqlens_q", device, batch + 1);
    p.cu_seqlens_k = int32_array(cu_seqlens_k, "cu_seqlens_k", device, batch + 1);
  }
  p.seqused_q = int32_array(seqused_q, "seqused_q", device, batch);
  p.seqused_k = int32_array(seqused_k, "seqused_k", device, batch);
  p.max_seqlen_q = to_i32(max_seqlen_q, "max_seqlen_q");
  p.max_seqlen_k = to_i32(max_seqlen_k, "max_seqlen_k");
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.mask.causal = causal;
  p.mask.window_left = to_i32(window_left, "window_left");
  p.mask.window_right = to_i32(window_right, "window_right");
  p.softcap = static_cast<float>(softcap);
  p.deterministic = deterministic;

  // Gradients have the shapes and dtypes of their inputs, in contiguous memory. The kernels never
  // touch rows past seqused_q (dq) or seqused_k (dk, dv); their gradient is zero, and it must be
  // written here: a padded batch's garbage rows would flow on into the weight gradients (x^T dK).
  const auto grad_like = [](const Tensor& x, bool zero) {
    return zero ? at::zeros(x.sizes(), x.options()) : at::empty(x.sizes(), x.options());
  };
  const Tensor dq = grad_like(q, seqused_q.has_value());
  const Tensor dk = grad_like(k, seqused_k.has_value());
  const Tensor dv = grad_like(v, seqused_k.has_value());
  p.dq = to_view(dq, "dq", device);
  p.dk = to_view(dk, "dk", device);
  p.dv = to_view(dv, "dv", device);

  call_core([&] {
    const hopattn::Plan plan = hopattn::plan_bwd(p, hopattn::query_device());
    Tensor ws = workspace_for(plan, device);
    hopattn::run_bwd(plan, p, data_or_null(ws), plan.workspace_bytes, current_stream(device));
  });
  return {dq, dk, dv};
}

// ---- combine ----------------------------------------------------------------------------------

// out_partial (num_splits, batch, seqlen, nheads, head_dim) has one dim more than a TensorView
// holds; (batch, seqlen) are merged into one dim for the core, which is a view whenever the two
// dims are laid out one after the other (otherwise a copy).
Tensor fold_batch_seqlen(const Tensor& t) {
  if (t.dim() != 5) return t;
  return t.reshape({t.size(0), t.size(1) * t.size(2), t.size(3), t.size(4)});
}

std::tuple<Tensor, Tensor> combine(const Tensor& out_partial, const Tensor& lse_partial,
                                   std::optional<at::ScalarType> out_dtype) {
  const at::Device device = device_of_first(out_partial, "out_partial");
  const c10::cuda::CUDAGuard guard(device);
  if (out_partial.dim() < 2 || out_partial.dim() > 5)
    bad_arg("out_partial", "expected (num_splits, batch, seqlen, nheads, head_dim), got shape " +
                               shape_str(out_partial.sizes()));
  if (lse_partial.dim() < 2)
    bad_arg("lse_partial", "expected (num_splits, batch, nheads, seqlen), got shape " +
                               shape_str(lse_partial.sizes()));

  // out drops the split dim of out_partial, lse that of lse_partial.
  const Tensor out = at::empty(out_partial.sizes().slice(1),
                               out_partial.options().dtype(out_dtype.value_or(out_partial.scalar_type())));
  const Tensor lse = at::empty(lse_partial.sizes().slice(1), lse_partial.options().dtype(at::kFloat));

  hopattn::CombineParams p;
  const Tensor op4 = fold_batch_seqlen(out_partial);
  p.out_partial = to_view(op4, "out_partial", device);
  p.lse_partial = to_view(lse_partial, "lse_partial", device);
  p.out = to_view(out, "out", device);
  p.lse = to_view(lse, "lse", device);

  call_core([&] {
    const hopattn::Plan plan = hopattn::plan_combine(p, hopattn::query_device());
    hopattn::run_combine(plan, p, current_stream(device));
  });
  return {out, lse};
}

// ---- quantize (e4m3, per-block scales, optional incoherent processing) ------------------------

std::tuple<Tensor, Tensor> quantize_fp8(const Tensor& x, int64_t block_rows, bool hadamard, int64_t seed) {
  const at::Device device = device_of_first(x, "x");
  const c10::cuda::CUDAGuard guard(device);
  if (x.dim() != 4) bad_arg("x", "expected (batch, seqlen, nheads, head_dim), got shape " + shape_str(x.sizes()));
  const int64_t nb = hopattn::quantize_num_blocks(x.size(1), static_cast<int32_t>(block_rows));
  const Tensor out = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
  const Tensor descale = at::empty({x.size(0), x.size(2), nb}, x.options().dtype(at::kFloat));
  hopattn::QuantizeParams p;
  p.in = to_view(x, "x", device);
  p.out = to_view(out, "out", device);
  p.descale = to_view(descale, "descale", device);
  p.block_rows = static_cast<int32_t>(block_rows);
  p.hadamard = hadamard;
  p.seed = static_cast<uint64_t>(seed);
  call_core([&] {
    const hopattn::Plan plan = hopattn::plan_quantize(p, hopattn::query_device());
    Tensor ws = workspace_for(plan, device);
    hopattn::run_quantize(plan, p, data_or_null(ws), plan.workspace_bytes, current_stream(device));
  });
  return {out, descale};
}

}  // namespace

// ---- registration -----------------------------------------------------------------------------

TORCH_LIBRARY(hopattn, m) {
  // Fake (meta) kernels and autograd formulas are registered from Python, in this module.
  m.set_python_module("hopattn._ops");
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, "
      "Tensor? seqused_q=None, Tensor? seqused_k=None, int max_seqlen_q=0, int max_seqlen_k=0, "
      "float softmax_scale=0.0, bool causal=False, int window_left=-1, int window_right=-1, "
      "float softcap=0.0, Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
      "Tensor? page_table=None, Tensor? cache_seqlens=None, Tensor? cache_batch_idx=None, "
      "Tensor? k_new=None, Tensor? v_new=None, int num_splits=1, bool pack_gqa=False, "
      "bool deterministic=False, int q_block_rows=0, int kv_block_rows=0) -> (Tensor out, Tensor lse)");
  m.def(
      "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k_new=None, "
      "Tensor? v_new=None, Tensor? cache_seqlens=None, Tensor? cache_batch_idx=None, "
      "Tensor? page_table=None, Tensor? q_descale=None, Tensor? k_descale=None, "
      "Tensor? v_descale=None, float softmax_scale=0.0, bool causal=False, int window_left=-1, "
      "int window_right=-1, float softcap=0.0, int num_splits=0, bool pack_gqa=False) "
      "-> (Tensor out, Tensor lse)");
  m.def(
      "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, Tensor? seqused_q=None, "
      "Tensor? seqused_k=None, int max_seqlen_q=0, int max_seqlen_k=0, float softmax_scale=0.0, "
      "bool causal=False, int window_left=-1, int window_right=-1, float softcap=0.0, "
      "bool deterministic=False) -> (Tensor dq, Tensor dk, Tensor dv)");
  m.def(
      "combine(Tensor out_partial, Tensor lse_partial, ScalarType? out_dtype=None) "
      "-> (Tensor out, Tensor lse)");
  m.def("quantize_fp8(Tensor x, int block_rows=0, bool hadamard=False, int seed=0) "
        "-> (Tensor out, Tensor descale)");
}

TORCH_LIBRARY_IMPL(hopattn, CUDA, m) {
  m.impl("fwd", &fwd);
  m.impl("fwd_kvcache", &fwd_kvcache);
  m.impl("bwd", &bwd);
  m.impl("combine", &combine);
  m.impl("quantize_fp8", &quantize_fp8);
}

// CPU tensors reach the same kernels so that the error names the argument on the wrong device
// rather than being the dispatcher's generic "could not run with arguments from the CPU backend".
TORCH_LIBRARY_IMPL(hopattn, CPU, m) {
  m.impl("fwd", &fwd);
  m.impl("fwd_kvcache", &fwd_kvcache);
  m.impl("bwd", &bwd);
  m.impl("combine", &combine);
}

// ---- Python module ----------------------------------------------------------------------------
// Importing hopattn._C loads the library above (the operators appear under torch.ops.hopattn).

namespace {

PyObject* py_core_version(PyObject*, PyObject*) { return PyUnicode_FromString(hopattn::version()); }

PyMethodDef kMethods[] = {
    {"core_version", py_core_version, METH_NOARGS, "Version of the linked libhopattn core."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "_C", "hopattn operators (registered under torch.ops.hopattn)", -1,
    kMethods, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&kModule); }
