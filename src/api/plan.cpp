// plan_* (validate, choose a kernel, size the workspace) and run_* (launch only).
#include <algorithm>
#include <cstdint>
#include <string>

#include "api/cuda_check.hpp"
#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "kernels/registry.hpp"

namespace hopattn {

namespace {

using detail::FwdProblem;

kernels::Strides3 row_strides(const TensorView& t, bool varlen) {
  kernels::Strides3 s;
  if (varlen) {  // (total, heads, dim)
    s.row = t.stride[0];
    s.head = t.stride[1];
  } else {  // (batch, seqlen, heads, dim)
    s.batch = t.stride[0];
    s.row = t.stride[1];
    s.head = t.stride[2];
  }
  return s;
}

// The fields FwdParams and BwdParams share (lengths, varlen arrays, resolved options).
template <class Params>
void fill_problem_args(kernels::ProblemArgs& a, const Params& p, const FwdProblem& prob, const DeviceInfo& dev) {
  a.batch = prob.batch;
  // max_seqlen_* can only be bounded by the packed totals on the host (cu_seqlens live on the
  // device); a larger value only adds empty tiles, so clamp it.
  a.seqlen_q = static_cast<int>(std::min<int64_t>(prob.seqlen_q, prob.total_q));
  a.seqlen_k = static_cast<int>(std::min<int64_t>(prob.seqlen_k, prob.total_k));
  a.total_q = static_cast<int>(p.q.shape[0] * (prob.varlen ? 1 : p.q.shape[1]));
  a.total_k = static_cast<int>(p.k.shape[0] * (prob.varlen ? 1 : p.k.shape[1]));
  a.nheads = prob.nheads;
  a.nheads_k = prob.nheads_k;
  a.head_dim = prob.head_dim;
  a.cu_seqlens_q = p.cu_seqlens_q;
  a.cu_seqlens_k = p.cu_seqlens_k;
  a.seqused_q = p.seqused_q;
  a.seqused_k = p.seqused_k;
  a.softmax_scale = prob.softmax_scale;
  a.softcap = prob.softcap;
  a.window_left = prob.window_left;
  a.window_right = prob.window_right;
  a.num_sms = dev.num_sms > 0 ? dev.num_sms : 132;
}

kernels::FwdArgs make_fwd_args(const FwdParams& p, const FwdProblem& prob, const DeviceInfo& dev) {
  kernels::FwdArgs a;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.lse = static_cast<float*>(p.lse.data);
  a.q_stride = row_strides(p.q, prob.varlen);
  a.k_stride = row_strides(p.k, prob.varlen);
  a.v_stride = row_strides(p.v, prob.varlen);
  a.out_stride = row_strides(p.out, prob.varlen);
  if (p.lse.defined()) {
    a.lse_batch_stride = prob.varlen ? 0 : p.lse.stride[0];
    a.lse_head_stride = prob.varlen ? p.lse.stride[0] : p.lse.stride[1];
  }
  fill_problem_args(a, p, prob, dev);
  a.disable_pingpong = p.tuning.disable_pingpong;
  a.disable_lpt = p.tuning.disable_lpt;
  a.disable_cluster = p.tuning.disable_cluster;
  a.l2_section_pairs = p.tuning.l2_section_pairs;
  if (prob.dtype == DType::kFloat8E4M3) {
    const Fp8BlockDescale& bd = p.block_descale;
    a.q_descale = p.q_descale;
    a.k_descale = p.k_descale;
    a.v_descale = p.v_descale;
    a.q_block_descale = static_cast<const float*>(bd.q.data);
    a.k_block_descale = static_cast<const float*>(bd.k.data);
    a.v_block_descale = static_cast<const float*>(bd.v.data);
    a.q_block_rows = bd.q_block_rows;
    a.kv_block_rows = bd.kv_block_rows;
    a.q_num_blocks = bd.q.defined() ? static_cast<int>(bd.q.shape[2]) : 0;
    a.kv_num_blocks = bd.k.defined() ? static_cast<int>(bd.k.shape[2]) : bd.v.defined() ? static_cast<int>(bd.v.shape[2]) : 0;
    a.out_fp16 = prob.out_dtype == DType::kFloat16;
  }
  return a;
}

// Whether the mask hides a large share of the (query, key) pairs, which is when the 128-key
// kernels beat wider key tiles (FwdKernelUse::kMasked): a left window always does; a causal
// or right window does when there are at least half as many queries as keys. Aligned bottom-right,
// a short query block against a long cache (chunked prefill) hides almost nothing.
bool mask_hides_much(const FwdProblem& prob) {
  if (prob.window_left >= 0) return true;
  if (prob.window_right < 0) return false;  // causal is folded into window_right = 0
  return 2 * int64_t(prob.seqlen_q) >= prob.seqlen_k;
}

// The Table 2 ablation kernel that FwdTuning's switches ask for (disable_pingpong is a run-time
// switch of every kernel). Validated here: the two kernel switches do not combine.
kernels::FwdAblation fwd_ablation(const FwdTuning& tuning) {
  if (tuning.disable_intra_wg_overlap && tuning.disable_warp_specialization)
    detail::not_supported("tuning.disable_warp_specialization",
                          "together with tuning.disable_intra_wg_overlap (no such ablation kernel)");
  if (tuning.disable_intra_wg_overlap) return kernels::FwdAblation::kNoIntraWgOverlap;
  if (tuning.disable_warp_specialization) return kernels::FwdAblation::kNoWarpSpecialization;
  return kernels::FwdAblation::kNone;
}

const char* ablation_name(kernels::FwdAblation a) {
  switch (a) {
    case kernels::FwdAblation::kNoIntraWgOverlap: return "the no-overlap ablation kernel";
    case kernels::FwdAblation::kNoWarpSpecialization: return "the no-warp-specialization ablation kernel";
    default: return "a regular (non-ablation) kernel";
  }
}

// FwdTuning::kernel: the compiled kernel of that name, which must serve the problem's dtype, head
// dim and ablation setting (any of a head dim's kernels computes any problem; only speed differs).
const kernels::FwdKernel& forced_fwd_kernel(const FwdProblem& prob, const FwdTuning& tuning) {
  const std::string name = tuning.kernel;
  const kernels::FwdKernel* k = kernels::fwd_kernels();
  while (k->name != nullptr && name != k->name) ++k;
  if (k->name == nullptr) {
    std::string compiled;  // the kernels that could serve this problem, for the message
    for (const kernels::FwdKernel* c = kernels::fwd_kernels(); c->name != nullptr; ++c)
      if (c->dtype == prob.dtype && c->head_dim == prob.head_dim)
        compiled += (compiled.empty() ? "" : ", ") + std::string(c->name);
    detail::fail("tuning.kernel", "no compiled forward kernel is named '" + name + "' (for this problem: " +
                                      (compiled.empty() ? std::string("none") : compiled) + ")");
  }
  if (k->dtype != prob.dtype || k->head_dim != prob.head_dim)
    detail::fail("tuning.kernel", "'" + name + "' is a " + dtype_name(k->dtype) + " head dim " +
                                      std::to_string(k->head_dim) + " kernel; the problem is " +
                                      dtype_name(prob.dtype) + " head dim " + std::to_string(prob.head_dim));
  if (k->ablation != fwd_ablation(tuning))
    detail::fail("tuning.kernel", "'" + name + "' is " + ablation_name(k->ablation) +
                                      ", but the tuning switches select " + ablation_name(fwd_ablation(tuning)));
  return *k;
}

const kernels::FwdKernel& choose_fwd_kernel(const FwdProblem& prob, const FwdParams& p) {
  const FwdTuning& tuning = p.tuning;
  const kernels::FwdAblation ablation = fwd_ablation(tuning);
  const char* switch_name = ablation == kernels::FwdAblation::kNoWarpSpecialization
                                ? "tuning.disable_warp_specialization"
                                : "tuning.disable_intra_wg_overlap";
  if (prob.dtype == DType::kFloat8E4M3) {
    if (prob.head_dim != 64 && prob.head_dim != 128 && prob.head_dim != 256)
      detail::not_supported("q", "e4m3 forward for head dim " + std::to_string(prob.head_dim) +
                                     " (FP8 kernels exist for head dims 64, 128, 256)");
    if (ablation != kernels::FwdAblation::kNone)
      detail::not_supported(switch_name, "the ablation kernels are bf16 head dim 128 only");
  }
  const kernels::FwdKernel* k =
      tuning.kernel != nullptr
          ? &forced_fwd_kernel(prob, tuning)
          : kernels::find_fwd_kernel(prob.dtype, prob.head_dim, ablation, prob.seqlen_k, mask_hides_much(prob));
  if (k == nullptr && ablation != kernels::FwdAblation::kNone)
    detail::not_supported(switch_name, std::string(ablation_name(ablation)) + " exists for bf16 head dim 128 only");
  if (k == nullptr)
    detail::not_supported("q", std::string("forward for ") + dtype_name(prob.dtype) + " head dim " +
                                   std::to_string(prob.head_dim) + " (no such kernel in this build)");
  const Fp8BlockDescale& bd = p.block_descale;
  if ((bd.k.defined() || bd.v.defined()) && bd.kv_block_rows % k->block_n != 0)
    detail::fail("block_descale.kv_block_rows", "must be a multiple of " + std::to_string(k->block_n) +
                                                    " (the FP8 kernel's key tile), got " +
                                                    std::to_string(bd.kv_block_rows));
  return *k;
}

kernels::BwdArgs make_bwd_args(const BwdParams& p, const FwdProblem& prob, const DeviceInfo& dev) {
  kernels::BwdArgs a;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.dout = p.dout.data;
  a.lse = static_cast<const float*>(p.lse.data);
  a.dq = p.dq.data;
  a.dk = p.dk.data;
  a.dv = p.dv.data;
  a.q_stride = row_strides(p.q, prob.varlen);
  a.k_stride = row_strides(p.k, prob.varlen);
  a.v_stride = row_strides(p.v, prob.varlen);
  a.out_stride = row_strides(p.out, prob.varlen);
  a.dout_stride = row_strides(p.dout, prob.varlen);
  a.dq_stride = row_strides(p.dq, prob.varlen);
  a.dk_stride = row_strides(p.dk, prob.varlen);
  a.dv_stride = row_strides(p.dv, prob.varlen);
  a.lse_batch_stride = prob.varlen ? 0 : p.lse.stride[0];
  a.lse_head_stride = prob.varlen ? p.lse.stride[0] : p.lse.stride[1];
  fill_problem_args(a, p, prob, dev);
  a.deterministic = p.deterministic;
  a.l2_section_pairs = p.tuning.l2_section_pairs;
  a.lag_dq_min_steps = p.tuning.lag_dq_min_steps;
  a.dq_convert_sms = p.tuning.dq_convert_sms;
  a.split_tail_tiles = p.tuning.split_tail_tiles;
  a.dq_from_stored_ds = p.tuning.dq_from_stored_ds;
  return a;
}

const kernels::BwdKernel& choose_bwd_kernel(const FwdProblem& prob, const kernels::BwdArgs& args) {
  const kernels::BwdKernel* k =
      kernels::find_bwd_kernel(prob.dtype, prob.head_dim, kernels::is_dense_bwd_problem(args));
  if (k == nullptr)
    detail::not_supported("q", std::string("backward for ") + dtype_name(prob.dtype) + " head dim " +
                                   std::to_string(prob.head_dim) + " (no such kernel in this build)");
  return *k;
}

void check_workspace(const Plan& plan, void* workspace, size_t bytes) {
  if (bytes < plan.workspace_bytes)
    throw Error(ErrorCode::kWorkspaceTooSmall, "workspace",
                "needs " + std::to_string(plan.workspace_bytes) + " bytes, got " + std::to_string(bytes));
  if (plan.workspace_bytes > 0 && workspace == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "workspace", "is null but the plan needs " +
                                                              std::to_string(plan.workspace_bytes) + " bytes");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    throw Error(ErrorCode::kInvalidArgument, "workspace", "must be 16-byte aligned");
}

// A plan for kernel k of the nullptr-terminated list `kernels`.
template <class Kernel>
Plan make_plan(const DeviceInfo& dev, const Kernel& k, const Kernel* kernels, size_t workspace_bytes) {
  Plan plan;
  plan.device = dev;
  plan.kernel = k.name;
  plan.kernel_id = static_cast<int32_t>(&k - kernels);
  plan.workspace_bytes = workspace_bytes;
  return plan;
}

// The kernel a plan names in `kernels`, or an error when the id is not one of them.
template <class Kernel>
const Kernel& planned_kernel(const Plan& plan, const Kernel* kernels, const char* planner) {
  int num_kernels = 0;
  while (kernels[num_kernels].name != nullptr) ++num_kernels;
  if (plan.kernel_id < 0 || plan.kernel_id >= num_kernels)
    throw Error(ErrorCode::kInvalidArgument, "plan", std::string("was not made by ") + planner + " (kernel id " +
                                                         std::to_string(plan.kernel_id) + ")");
  return kernels[plan.kernel_id];
}

}  // namespace

Plan plan_fwd(const FwdParams& p, const DeviceInfo& dev) {
  const FwdProblem prob = detail::validate_fwd(p, dev);
  const kernels::FwdKernel& k = choose_fwd_kernel(prob, p);
  const kernels::FwdArgs args = make_fwd_args(p, prob, dev);
  Plan plan = make_plan(dev, k, kernels::fwd_kernels(), k.workspace_bytes(args));
  plan.ctas_per_cluster = k.ctas_per_cluster(args);
  return plan;
}

void run_fwd(const Plan& plan, const FwdParams& p, void* workspace, size_t workspace_bytes,
             cudaStream_t stream) {
  check_workspace(plan, workspace, workspace_bytes);
  // Re-deriving the problem is host arithmetic only (pointer attributes are not re-queried:
  // the plan's DeviceInfo is used with queried = false) and keeps run() graph-capture safe.
  DeviceInfo dev = plan.device;
  dev.queried = false;
  const FwdProblem prob = detail::validate_fwd(p, dev);
  if (prob.empty()) return;
  const kernels::FwdKernel& k = planned_kernel(plan, kernels::fwd_kernels(), "plan_fwd");
  if (k.dtype != prob.dtype || k.head_dim != prob.head_dim ||
      k.ablation != fwd_ablation(p.tuning))
    throw Error(ErrorCode::kInvalidArgument, "plan", "was made for other parameters (" +
                                                         std::string(k.name) + ")");
  k.launch(make_fwd_args(p, prob, dev), workspace, stream);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

Plan plan_bwd(const BwdParams& p, const DeviceInfo& dev) {
  const FwdProblem prob = detail::validate_bwd(p, dev);
  const kernels::BwdArgs args = make_bwd_args(p, prob, dev);
  const kernels::BwdKernel& k = choose_bwd_kernel(prob, args);
  return make_plan(dev, k, kernels::bwd_kernels(), k.workspace_bytes(args));
}

void run_bwd(const Plan& plan, const BwdParams& p, void* workspace, size_t workspace_bytes,
             cudaStream_t stream) {
  check_workspace(plan, workspace, workspace_bytes);
  DeviceInfo dev = plan.device;
  dev.queried = false;
  const FwdProblem prob = detail::validate_bwd(p, dev);
  // No query rows still means dK = dV = 0 to write (the kernels do that); no heads or batch
  // entries means nothing at all.
  if (prob.batch == 0 || prob.nheads == 0) return;
  const kernels::BwdKernel& k = planned_kernel(plan, kernels::bwd_kernels(), "plan_bwd");
  const kernels::BwdArgs args = make_bwd_args(p, prob, dev);
  // A dense kernel has no mask or softcap code: a plan for one must not run a problem with them.
  if (k.dtype != prob.dtype || k.head_dim != prob.head_dim || (k.dense && !kernels::is_dense_bwd_problem(args)))
    throw Error(ErrorCode::kInvalidArgument, "plan", "was made for other parameters (" +
                                                         std::string(k.name) + ")");
  if (workspace_bytes < k.workspace_bytes(args))
    throw Error(ErrorCode::kWorkspaceTooSmall, "workspace", "was sized for other parameters");
  k.launch(args, workspace, stream);
  HOPATTN_CUDA_CHECK(cudaGetLastError());
}

void fwd(const FwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Plan plan = plan_fwd(p, query_device());
  run_fwd(plan, p, workspace, workspace_bytes, stream);
}

void bwd(const BwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Plan plan = plan_bwd(p, query_device());
  run_bwd(plan, p, workspace, workspace_bytes, stream);
}

}  // namespace hopattn
