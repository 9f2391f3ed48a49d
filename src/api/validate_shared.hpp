// Checks the forward and the backward share: the q/k/v triple, variable-length arguments and
// the scalar options. Internal to the API layer.
#pragma once

#include <cstdint>

#include "api/validate.hpp"

namespace hopattn::detail {

struct VarlenArgs {
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_q;
  const int32_t* seqused_k;
  int32_t batch_varlen, max_seqlen_q, max_seqlen_k;
};

struct AttnShape {
  bool varlen = false;
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, total_q = 0, total_k = 0;
  int64_t nheads = 0, nheads_k = 0, head_dim = 0, head_dim_v = 0;
};

AttnShape check_qkv(const TensorView& q, const TensorView& k, const TensorView& v,
                    const VarlenArgs& vl, const DeviceInfo& dev);
// t has q's leading dims (batch, seqlen_q or total_q) and nheads heads of size dim.
void check_like_q(const TensorView& t, const char* name, const AttnShape& s, int64_t dim);
// t has k's leading dims and nheads_k heads of size dim.
void check_like_k(const TensorView& t, const char* name, const AttnShape& s, int64_t dim);
void check_contiguous(const TensorView& t, const char* name);
// Outputs only: no two elements may share an address.
void check_no_self_overlap(const TensorView& t, const char* name);
FwdProblem make_problem(const TensorView& q, const AttnShape& s);
void check_scalars(float softmax_scale, const MaskArgs& mask, float softcap, FwdProblem& prob);

}  // namespace hopattn::detail
