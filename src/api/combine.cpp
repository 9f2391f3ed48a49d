// plan_combine / run_combine: validation and launch of the split-KV combine kernel
// (kernels/combine/combine.cu).
#include <cstdint>
#include <string>
#include <utility>

#include "api/validate.hpp"
#include "api/validate_shared.hpp"
#include "hopattn/api.hpp"
#include "kernels/combine/combine.hpp"

namespace hopattn {

namespace detail {

namespace {

// The bytes a view may touch, [first, last) (any stride signs); empty for a tensor without elements.
std::pair<uintptr_t, uintptr_t> byte_span(const TensorView& t) {
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return {0, 0};
    const int64_t reach = (t.shape[i] - 1) * t.stride[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.data);
  const int64_t es = dtype_size(t.dtype);
  return {base + lo * es, base + (hi + 1) * es};
}

// An output sharing memory with an input: the kernel reads every split of a row before it
// writes the row's output, but not in an order that makes every overlap safe (lse is written
// before the columns' pass re-reads lse_partial), so none is accepted.
void check_disjoint(const TensorView& out, const char* name, const TensorView& in, const char* in_name) {
  const auto [a0, a1] = byte_span(out);
  const auto [b0, b1] = byte_span(in);
  if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1)
    fail(name, std::string("must not share memory with ") + in_name + " (an in-place merge is not supported)");
}

// The tensors of CombineParams (params.hpp): out_partial fixes the splits, rows, heads and head
// dim; out splits the rows into (batch, seqlen); lse_partial and lse follow.
kernels::combine::CombineArgs validate_combine_args(const CombineParams& p, const DeviceInfo& dev) {
  check_device(dev);
  require_defined(p.out_partial, "out_partial");
  require_defined(p.lse_partial, "lse_partial");
  require_defined(p.out, "out");
  check_dtype(p.out_partial, "out_partial", {DType::kFloat32});
  check_dtype(p.lse_partial, "lse_partial", {DType::kFloat32});
  check_dtype(p.out, "out", {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  check_rank(p.out_partial, "out_partial", 4, "(num_splits, batch * seqlen, nheads, head_dim)");
  check_rank(p.lse_partial, "lse_partial", 4, "(num_splits, batch, nheads, seqlen)");
  check_rank(p.out, "out", 4, "(batch, seqlen, nheads, head_dim)");
  const int64_t splits = p.out_partial.shape[0], rows = p.out_partial.shape[1];
  const int64_t H = p.out_partial.shape[2], D = p.out_partial.shape[3];
  const int64_t B = p.out.shape[0], S = p.out.shape[1];
  const std::pair<const TensorView*, const char*> inputs[] = {
      {&p.out_partial, "out_partial"}, {&p.lse_partial, "lse_partial"}, {&p.out, "out"}};
  for (const auto& [t, name] : inputs)
    for (int i = 0; i < 4; ++i)
      if (t->shape[i] < 0) fail(name, "sizes must be >= 0, got " + shape_str(*t));
  if (splits < 1) fail("out_partial", "needs at least one split, got " + shape_str(p.out_partial));
  // Bounded before any product: the kernel's indices are int (dims) and int64 (offsets).
  for (int64_t x : {splits, rows, H, D, B, S})
    if (x > INT32_MAX) fail("out_partial", "too large for the combine kernel: dims must fit in int32, got out_partial " +
                                               shape_str(p.out_partial) + " and out " + shape_str(p.out));
  if (B * S != rows)
    fail("out", "batch * seqlen (" + std::to_string(B) + " * " + std::to_string(S) + " = " +
                    std::to_string(B * S) + ") must equal dim 1 of out_partial (num_splits, batch * seqlen, nheads, "
                    "head_dim), got " + shape_str(p.out_partial));
  check_shape(p.out, "out", {B, S, H, D}, "(batch, seqlen, nheads, head_dim) with out_partial's heads and head dim");
  check_shape(p.lse_partial, "lse_partial", {splits, B, H, S}, "(num_splits, batch, nheads, seqlen)");
  if (p.lse.defined()) {
    check_dtype(p.lse, "lse", {DType::kFloat32});
    check_shape(p.lse, "lse", {B, H, S}, "(batch, nheads, seqlen)");
    check_no_self_overlap(p.lse, "lse");
  }
  check_no_self_overlap(p.out, "out");
  const int64_t pairs = rows * H;  // one warp each; < 2^62 after the bounds above
  if (pairs / 4 >= INT32_MAX) fail("out_partial", "too large for the combine kernel's grid: " + shape_str(p.out_partial));
  // The kernel runs whenever a (row, head) pair exists: it reads lse_partial and writes lse even
  // when the head dim is 0, and reads out_partial and writes out when it is not.
  auto check_data = [&](const TensorView& t, const char* name, bool read_or_written) {
    if (!read_or_written) return;
    if (t.data == nullptr) fail(name, "data is null");
    check_device_pointer(t.data, name, dev);
  };
  check_data(p.lse_partial, "lse_partial", pairs > 0);
  check_data(p.out_partial, "out_partial", pairs > 0 && D > 0);
  check_data(p.out, "out", pairs > 0 && D > 0);
  if (p.lse.defined()) check_data(p.lse, "lse", pairs > 0);
  check_disjoint(p.out, "out", p.out_partial, "out_partial");
  check_disjoint(p.out, "out", p.lse_partial, "lse_partial");
  if (p.lse.defined()) {
    check_disjoint(p.lse, "lse", p.lse_partial, "lse_partial");
    check_disjoint(p.lse, "lse", p.out_partial, "out_partial");
    check_disjoint(p.lse, "lse", p.out, "out");
  }

  kernels::combine::CombineArgs a;
  a.out_partial = static_cast<const float*>(p.out_partial.data);
  a.lse_partial = static_cast<const float*>(p.lse_partial.data);
  a.out = p.out.data;
  a.lse = p.lse.defined() ? static_cast<float*>(p.lse.data) : nullptr;
  a.out_dtype = p.out.dtype;
  a.num_splits = int(splits);
  a.batch = int(B);
  a.seqlen = int(S);
  a.nheads = int(H);
  a.head_dim = int(D);
  for (int i = 0; i < 4; ++i) {
    a.op_stride[i] = p.out_partial.stride[i];
    a.lp_stride[i] = p.lse_partial.stride[i];
    a.out_stride[i] = p.out.stride[i];
  }
  if (p.lse.defined())
    for (int i = 0; i < 3; ++i) a.lse_stride[i] = p.lse.stride[i];
  return a;
}

}  // namespace

}  // namespace detail

Plan plan_combine(const CombineParams& p, const DeviceInfo& dev) {
  detail::validate_combine_args(p, dev);
  Plan plan;
  plan.device = dev;
  plan.kernel = "combine";
  plan.workspace_bytes = 0;
  return plan;
}

void run_combine(const Plan& plan, const CombineParams& p, cudaStream_t stream) {
  if (plan.kernel != "combine")
    throw Error(ErrorCode::kInvalidArgument, "plan", "was not made by plan_combine (kernel " + plan.kernel + ")");
  DeviceInfo dev = plan.device;
  dev.queried = false;  // plan_combine checked where the pointers live; here only their shapes and nulls
  kernels::combine::launch(detail::validate_combine_args(p, dev), stream);
}

void combine(const CombineParams& p, cudaStream_t stream) {
  const Plan plan = plan_combine(p, query_device());
  run_combine(plan, p, stream);
}

}  // namespace hopattn
