#include "api/validate_shared.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace hopattn::detail {

namespace {

constexpr int64_t kMaxSeqlen = std::numeric_limits<int32_t>::max();

std::string head_dims_list() {
  std::string s;
  for (int d : kHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

void check_head_dim(int64_t d, const char* name) {
  if (d <= 0 || d % 8 != 0 || d > 256)
    fail(name, "head dim must be a positive multiple of 8 up to 256, got " + std::to_string(d));
  for (int hd : kHeadDims)
    if (hd == d) return;
  not_supported(name, "head dim " + std::to_string(d) + " (kernels exist for " + head_dims_list() + ")");
}

void check_varlen_args(const VarlenArgs& vl, const DeviceInfo& dev) {
  if ((vl.cu_seqlens_q == nullptr) != (vl.cu_seqlens_k == nullptr))
    fail(vl.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q",
         "cu_seqlens_q and cu_seqlens_k must be given together");
  if (vl.batch_varlen <= 0)
    fail("batch_varlen", "must be the number of sequences (> 0) with cu_seqlens, got " +
                             std::to_string(vl.batch_varlen));
  if (vl.max_seqlen_q < 0) fail("max_seqlen_q", "must be >= 0, got " + std::to_string(vl.max_seqlen_q));
  if (vl.max_seqlen_k < 0) fail("max_seqlen_k", "must be >= 0, got " + std::to_string(vl.max_seqlen_k));
  check_device_pointer(vl.cu_seqlens_q, "cu_seqlens_q", dev);
  check_device_pointer(vl.cu_seqlens_k, "cu_seqlens_k", dev);
}

}  // namespace

void check_contiguous(const TensorView& t, const char* name) {
  int64_t expect = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] > 1 && t.stride[d] != expect)
      fail(name, "must be contiguous, got stride " + std::to_string(t.stride[d]) + " in dim " +
                     std::to_string(d) + " (expected " + std::to_string(expect) + ")");
    expect *= t.shape[d];
  }
  if (t.numel() > 0 && t.data == nullptr) fail(name, "data pointer is null");
  if (t.numel() > 0 && reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
    fail(name, "must be 4-byte aligned");
}

void check_no_self_overlap(const TensorView& t, const char* name) {
  // Dims of extent > 1 sorted by stride: each stride must step over the previous dim's extent,
  // or two elements share an address and the kernel's writes race. No elements, no overlap.
  if (t.numel() == 0) return;
  int idx[4];
  int n = 0;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] > 1) idx[n++] = i;
  for (int a = 1; a < n; ++a)  // insertion sort of at most 4 dims by stride
    for (int b = a; b > 0 && t.stride[idx[b]] < t.stride[idx[b - 1]]; --b) std::swap(idx[b], idx[b - 1]);
  int64_t span = 1;
  for (int j = 0; j < n; ++j) {
    if (t.stride[idx[j]] < span)
      fail(name, "is an output whose elements overlap in memory (stride " +
                     std::to_string(t.stride[idx[j]]) + " of dim " + std::to_string(idx[j]) +
                     " is smaller than the " + std::to_string(span) + " elements it must step over)");
    span = t.stride[idx[j]] * t.shape[idx[j]];
  }
}

void check_like_q(const TensorView& t, const char* name, const AttnShape& s, int64_t dim) {
  if (s.varlen)
    check_shape(t, name, {s.total_q, s.nheads, dim}, "(total_q, nheads, head_dim)");
  else
    check_shape(t, name, {s.batch, s.seqlen_q, s.nheads, dim}, "(batch, seqlen_q, nheads, head_dim)");
}

void check_like_k(const TensorView& t, const char* name, const AttnShape& s, int64_t dim) {
  if (s.varlen)
    check_shape(t, name, {s.total_k, s.nheads_k, dim}, "(total_k, nheads_k, head_dim)");
  else
    check_shape(t, name, {s.batch, s.seqlen_k, s.nheads_k, dim},
                "(batch, seqlen_k, nheads_k, head_dim)");
}

AttnShape check_qkv(const TensorView& q, const TensorView& k, const TensorView& v,
                    const VarlenArgs& vl, const DeviceInfo& dev) {
  require_defined(q, "q");
  require_defined(k, "k");
  require_defined(v, "v");
  check_dtype(q, "q", {DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3});
  check_same_dtype(k, "k", q, "q");
  check_same_dtype(v, "v", q, "q");

  AttnShape s;
  s.varlen = vl.cu_seqlens_q != nullptr || vl.cu_seqlens_k != nullptr;
  const int rank = s.varlen ? 3 : 4;
  const char* q_layout = s.varlen ? "(total_q, nheads, head_dim)" : "(batch, seqlen_q, nheads, head_dim)";
  const char* k_layout = s.varlen ? "(total_k, nheads_k, head_dim)" : "(batch, seqlen_k, nheads_k, head_dim)";
  check_rank(q, "q", rank, q_layout);
  check_rank(k, "k", rank, k_layout);
  check_rank(v, "v", rank, k_layout);
  for (const auto* t : {&q, &k, &v})
    for (int i = 0; i < t->rank; ++i)
      if (t->shape[i] < 0)
        fail(t == &q ? "q" : t == &k ? "k" : "v", "negative size in shape " + shape_str(*t));

  s.nheads = q.shape[rank - 2];
  s.nheads_k = k.shape[rank - 2];
  s.head_dim = q.shape[rank - 1];
  s.head_dim_v = v.shape[rank - 1];
  if (s.varlen) {
    check_varlen_args(vl, dev);
    s.batch = vl.batch_varlen;
    s.total_q = q.shape[0];
    s.total_k = k.shape[0];
    s.seqlen_q = vl.max_seqlen_q;
    s.seqlen_k = vl.max_seqlen_k;
    if (v.shape[0] != s.total_k)
      fail("v", "expected total_k = " + std::to_string(s.total_k) + " rows like k, got " + shape_str(v));
  } else {
    s.batch = q.shape[0];
    s.seqlen_q = q.shape[1];
    s.seqlen_k = k.shape[1];
    s.total_q = s.batch * s.seqlen_q;
    s.total_k = s.batch * s.seqlen_k;
    if (k.shape[0] != s.batch) fail("k", "batch " + std::to_string(k.shape[0]) + " differs from q's " + std::to_string(s.batch));
    if (v.shape[0] != s.batch || v.shape[1] != s.seqlen_k)
      fail("v", "expected (batch, seqlen_k) = (" + std::to_string(s.batch) + ", " +
                    std::to_string(s.seqlen_k) + ") like k, got " + shape_str(v));
  }
  if (s.seqlen_q > kMaxSeqlen || s.seqlen_k > kMaxSeqlen || s.total_q > kMaxSeqlen || s.total_k > kMaxSeqlen)
    fail("q", "sequence lengths must fit in int32");
  if (vl.seqused_q) check_device_pointer(vl.seqused_q, "seqused_q", dev);
  if (vl.seqused_k) check_device_pointer(vl.seqused_k, "seqused_k", dev);

  check_head_dim(s.head_dim, "q");
  if (k.shape[rank - 1] != s.head_dim)
    fail("k", "head dim " + std::to_string(k.shape[rank - 1]) + " differs from q's " + std::to_string(s.head_dim));
  if (s.head_dim_v != s.head_dim)
    not_supported("v", "head_dim_v (" + std::to_string(s.head_dim_v) + ") != head_dim (" +
                           std::to_string(s.head_dim) + ")");
  if (v.shape[rank - 2] != s.nheads_k)
    fail("v", "nheads_k " + std::to_string(v.shape[rank - 2]) + " differs from k's " + std::to_string(s.nheads_k));
  if (s.nheads_k <= 0 || s.nheads <= 0)
    fail(s.nheads <= 0 ? "q" : "k", "number of heads must be positive");
  if (s.nheads % s.nheads_k != 0)
    fail("k", "nheads (" + std::to_string(s.nheads) + ") must be a multiple of nheads_k (" +
                  std::to_string(s.nheads_k) + ")");

  check_memory_layout(q, "q");
  check_memory_layout(k, "k");
  check_memory_layout(v, "v");
  check_device_pointer(q.data, "q", dev);
  check_device_pointer(k.data, "k", dev);
  check_device_pointer(v.data, "v", dev);
  return s;
}

FwdProblem make_problem(const TensorView& q, const AttnShape& s) {
  FwdProblem prob;
  prob.total_q = s.total_q;
  prob.total_k = s.total_k;
  prob.dtype = q.dtype;
  prob.varlen = s.varlen;
  prob.batch = static_cast<int>(s.batch);
  prob.seqlen_q = static_cast<int>(s.seqlen_q);
  prob.seqlen_k = static_cast<int>(s.seqlen_k);
  prob.nheads = static_cast<int>(s.nheads);
  prob.nheads_k = static_cast<int>(s.nheads_k);
  prob.head_dim = static_cast<int>(s.head_dim);
  prob.head_dim_v = static_cast<int>(s.head_dim_v);
  return prob;
}

void check_scalars(float softmax_scale, const MaskArgs& mask, float softcap, FwdProblem& prob) {
  if (!std::isfinite(softmax_scale) || softmax_scale < 0.f)
    fail("softmax_scale", "must be finite and >= 0 (0 means 1/sqrt(head_dim)), got " +
                              std::to_string(softmax_scale));
  prob.softmax_scale = softmax_scale != 0.f ? softmax_scale : 1.f / std::sqrt(float(prob.head_dim));
  if (!std::isfinite(softcap) || softcap < 0.f)
    fail("softcap", "must be >= 0 (0 disables), got " + std::to_string(softcap));
  prob.softcap = softcap;
  if (mask.window_left < -1)
    fail("window_left", "must be >= 0, or -1 for unbounded, got " + std::to_string(mask.window_left));
  if (mask.window_right < -1)
    fail("window_right", "must be >= 0, or -1 for unbounded, got " + std::to_string(mask.window_right));
  if (mask.causal && mask.window_right > 0)
    fail("window_right", "must be 0 or -1 when causal=true (causal means window_right = 0), got " +
                             std::to_string(mask.window_right));
  prob.causal = mask.causal;
  prob.window_left = mask.window_left;
  prob.window_right = mask.causal ? 0 : mask.window_right;
  // A window wider than any sequence is no window (bottom-right alignment: every key is within
  // window_left of every row once window_left >= seqlen_k, and within window_right once
  // window_right >= seqlen_q). Normalising here keeps the kernel's index arithmetic in range.
  const int64_t max_k = prob.varlen ? prob.total_k : prob.seqlen_k;
  const int64_t max_q = prob.varlen ? prob.total_q : prob.seqlen_q;
  if (prob.window_left >= max_k) prob.window_left = -1;
  if (prob.window_right >= max_q) prob.window_right = -1;
}

}  // namespace hopattn::detail
