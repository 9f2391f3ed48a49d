// Validation of the backward call: the forward's tensors plus dout and the three gradients.
#include "api/validate.hpp"
#include "api/validate_shared.hpp"

namespace hopattn::detail {

FwdProblem validate_bwd(const BwdParams& p, const DeviceInfo& dev) {
  check_device(dev);
  const VarlenArgs vl{p.cu_seqlens_q, p.cu_seqlens_k, p.seqused_q, p.seqused_k,
                      p.batch_varlen, p.max_seqlen_q, p.max_seqlen_k};
  AttnShape s = check_qkv(p.q, p.k, p.v, vl, dev);
  FwdProblem prob = make_problem(p.q, s);
  if (prob.dtype == DType::kFloat8E4M3) not_supported("q", "e4m3 backward");
  prob.out_dtype = prob.dtype;

  struct Named { const TensorView* t; const char* name; bool like_q; int64_t dim; };
  const Named grads[] = {{&p.out, "out", true, s.head_dim_v}, {&p.dout, "dout", true, s.head_dim_v},
                         {&p.dq, "dq", true, s.head_dim},     {&p.dk, "dk", false, s.head_dim},
                         {&p.dv, "dv", false, s.head_dim_v}};
  for (const Named& g : grads) {
    require_defined(*g.t, g.name);
    check_same_dtype(*g.t, g.name, p.q, "q");
    if (g.like_q) check_like_q(*g.t, g.name, s, g.dim);
    else check_like_k(*g.t, g.name, s, g.dim);
    check_memory_layout(*g.t, g.name);
    if (g.t != &p.out && g.t != &p.dout) check_no_self_overlap(*g.t, g.name);
    check_device_pointer(g.t->data, g.name, dev);
  }
  require_defined(p.lse, "lse");
  check_dtype(p.lse, "lse", {DType::kFloat32});
  if (s.varlen) check_shape(p.lse, "lse", {s.nheads, s.total_q}, "(nheads, total_q)");
  else check_shape(p.lse, "lse", {s.batch, s.nheads, s.seqlen_q}, "(batch, nheads, seqlen_q)");
  check_contiguous(p.lse, "lse");
  check_device_pointer(p.lse.data, "lse", dev);
  prob.has_lse = true;
  check_scalars(p.softmax_scale, p.mask, p.softcap, prob);
  if (p.tuning.l2_section_pairs < 0)
    fail("tuning.l2_section_pairs",
         "must be >= 0 (0 = the library's rule), got " + std::to_string(p.tuning.l2_section_pairs));
  if (p.tuning.lag_dq_min_steps < 0)
    fail("tuning.lag_dq_min_steps",
         "must be >= 0 (0 = the library's rule), got " + std::to_string(p.tuning.lag_dq_min_steps));
  if (p.tuning.dq_convert_sms < -1)
    fail("tuning.dq_convert_sms", "must be >= -1 (-1 = after the main kernel, 0 = the library's rule), got " +
                                      std::to_string(p.tuning.dq_convert_sms));
  if (p.tuning.split_tail_tiles < -1)
    fail("tuning.split_tail_tiles", "must be >= -1 (-1 = none, 0 = the library's rule), got " +
                                        std::to_string(p.tuning.split_tail_tiles));
  if (p.tuning.dq_from_stored_ds < -1 || p.tuning.dq_from_stored_ds > 1)
    fail("tuning.dq_from_stored_ds", "must be -1 (never), 0 (the library's rule) or 1 (where supported), got " +
                                         std::to_string(p.tuning.dq_from_stored_ds));
  return prob;
}

}  // namespace hopattn::detail
