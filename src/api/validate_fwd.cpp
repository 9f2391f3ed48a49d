// Validation of the forward call (and of the tensors the backward shares with it).
#include <cmath>
#include <string>

#include "api/validate.hpp"
#include "api/validate_shared.hpp"

namespace hopattn::detail {

namespace {

void check_lse(const TensorView& lse, const AttnShape& s) {
  if (!lse.defined()) return;
  check_dtype(lse, "lse", {DType::kFloat32});
  if (s.varlen)
    check_shape(lse, "lse", {s.nheads, s.total_q}, "(nheads, total_q)");
  else
    check_shape(lse, "lse", {s.batch, s.nheads, s.seqlen_q}, "(batch, nheads, seqlen_q)");
  check_contiguous(lse, "lse");
}

// One block-descale tensor: (batch, heads, ceil(seqlen / block_rows)) float32, contiguous.
void check_block_descale(const TensorView& t, const char* name, const char* rows_name, int32_t block_rows,
                         int64_t batch, int64_t heads, int64_t seqlen, const char* heads_name,
                         const DeviceInfo& dev) {
  if (!t.defined()) return;
  if (block_rows <= 0) fail(rows_name, "must be > 0 when " + std::string(name) + " is given, got " + std::to_string(block_rows));
  check_dtype(t, name, {DType::kFloat32});
  const int64_t blocks = (seqlen + block_rows - 1) / block_rows;
  const std::string layout = std::string("(batch, ") + heads_name + ", ceil(seqlen / " + rows_name + "))";
  check_shape(t, name, {batch, heads, blocks}, layout.c_str());
  check_contiguous(t, name);
  check_device_pointer(t.data, name, dev);
}

void check_fp8_args(const FwdParams& p, const AttnShape& s, DType dtype, const DeviceInfo& dev) {
  const Fp8BlockDescale& bd = p.block_descale;
  const bool any_descale = p.q_descale || p.k_descale || p.v_descale;
  const bool any_block = bd.q.defined() || bd.k.defined() || bd.v.defined();
  const char* first_block = bd.q.defined() ? "block_descale.q" : bd.k.defined() ? "block_descale.k" : "block_descale.v";
  if (any_descale && dtype != DType::kFloat8E4M3)
    fail(p.q_descale ? "q_descale" : p.k_descale ? "k_descale" : "v_descale",
         std::string("descale factors apply to e4m3 inputs only, q is ") + dtype_name(dtype));
  if (any_block && dtype != DType::kFloat8E4M3)
    fail(first_block, std::string("descale factors apply to e4m3 inputs only, q is ") + dtype_name(dtype));
  if (dtype != DType::kFloat8E4M3) return;
  if (any_block && s.varlen) not_supported(first_block, "block descales with variable-length inputs");
  check_block_descale(bd.q, "block_descale.q", "block_descale.q_block_rows", bd.q_block_rows, s.batch, s.nheads,
                      s.seqlen_q, "nheads", dev);
  check_block_descale(bd.k, "block_descale.k", "block_descale.kv_block_rows", bd.kv_block_rows, s.batch,
                      s.nheads_k, s.seqlen_k, "nheads_k", dev);
  check_block_descale(bd.v, "block_descale.v", "block_descale.kv_block_rows", bd.kv_block_rows, s.batch,
                      s.nheads_k, s.seqlen_k, "nheads_k", dev);
}

void check_kv_cache_args(const FwdParams& p) {
  if (p.page_table.defined()) not_supported("page_table", "paged KV cache");
  if (p.cache_seqlens.defined()) not_supported("cache_seqlens", "KV-cache decoding");
  if (p.cache_batch_idx.defined()) not_supported("cache_batch_idx", "KV-cache batch indexing");
  if (p.k_new.defined() || p.v_new.defined())
    not_supported(p.k_new.defined() ? "k_new" : "v_new", "appending new K/V to a cache");
  if (p.num_splits < 0) fail("num_splits", "must be >= 0 (0 = heuristic), got " + std::to_string(p.num_splits));
  if (p.num_splits > 1) not_supported("num_splits", "split-KV (num_splits > 1)");
  if (p.pack_gqa) not_supported("pack_gqa", "GQA packing");
}

}  // namespace

FwdProblem validate_fwd(const FwdParams& p, const DeviceInfo& dev) {
  check_device(dev);
  check_kv_cache_args(p);  // first: a paged cache's leading dim is not q's batch
  if (p.tuning.l2_section_pairs < 0)
    fail("tuning.l2_section_pairs", "must be >= 0 (0 = the library's rule), got " +
                                        std::to_string(p.tuning.l2_section_pairs));
  const VarlenArgs vl{p.cu_seqlens_q, p.cu_seqlens_k, p.seqused_q, p.seqused_k,
                      p.batch_varlen, p.max_seqlen_q, p.max_seqlen_k};
  AttnShape s = check_qkv(p.q, p.k, p.v, vl, dev);

  FwdProblem prob = make_problem(p.q, s);
  require_defined(p.out, "out");
  if (prob.dtype == DType::kFloat8E4M3)
    check_dtype(p.out, "out", {DType::kBFloat16, DType::kFloat16});
  else
    check_same_dtype(p.out, "out", p.q, "q");
  prob.out_dtype = p.out.dtype;
  check_like_q(p.out, "out", s, s.head_dim_v);
  check_memory_layout(p.out, "out");
  check_no_self_overlap(p.out, "out");
  check_device_pointer(p.out.data, "out", dev);
  check_lse(p.lse, s);
  check_device_pointer(p.lse.data, "lse", dev);
  prob.has_lse = p.lse.defined();

  check_scalars(p.softmax_scale, p.mask, p.softcap, prob);
  check_fp8_args(p, s, prob.dtype, dev);
  check_device_pointer(p.q_descale, "q_descale", dev);
  check_device_pointer(p.k_descale, "k_descale", dev);
  check_device_pointer(p.v_descale, "v_descale", dev);
  return prob;
}

}  // namespace hopattn::detail
