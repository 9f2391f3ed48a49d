// The C ABI: converts the C structs to the C++ ones and every exception to a status code plus
// a thread-local message.
#include <string>

#include "hopattn/api.hpp"
#include "hopattn/hopattn.h"

namespace {

thread_local std::string g_last_error;

hopattn::TensorView to_view(const hopattn_tensor& t) {
  hopattn::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<hopattn::DType>(t.dtype);
  v.rank = t.rank;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = t.shape[i];
    v.stride[i] = t.stride[i];
  }
  return v;
}

// The fields the forward and backward structs share, in both languages under the same names.
template <class Cpp, class C>
void copy_common(Cpp& p, const C& c) {
  p.q = to_view(c.q);
  p.k = to_view(c.k);
  p.v = to_view(c.v);
  p.out = to_view(c.out);
  p.lse = to_view(c.lse);
  p.cu_seqlens_q = c.cu_seqlens_q;
  p.cu_seqlens_k = c.cu_seqlens_k;
  p.seqused_q = c.seqused_q;
  p.seqused_k = c.seqused_k;
  p.batch_varlen = c.batch_varlen;
  p.max_seqlen_q = c.max_seqlen_q;
  p.max_seqlen_k = c.max_seqlen_k;
  p.softmax_scale = c.softmax_scale;
  p.mask = {c.causal != 0, c.window_left, c.window_right};
  p.softcap = c.softcap;
}

hopattn::FwdParams to_cpp(const hopattn_fwd_params& c) {
  hopattn::FwdParams p;
  copy_common(p, c);
  p.q_descale = c.q_descale;
  p.k_descale = c.k_descale;
  p.v_descale = c.v_descale;
  p.block_descale.q = to_view(c.q_block_descale);
  p.block_descale.k = to_view(c.k_block_descale);
  p.block_descale.v = to_view(c.v_block_descale);
  p.block_descale.q_block_rows = c.q_block_rows;
  p.block_descale.kv_block_rows = c.kv_block_rows;
  p.page_table = to_view(c.page_table);
  p.cache_seqlens = to_view(c.cache_seqlens);
  p.cache_batch_idx = to_view(c.cache_batch_idx);
  p.k_new = to_view(c.k_new);
  p.v_new = to_view(c.v_new);
  p.num_splits = c.num_splits;
  p.pack_gqa = c.pack_gqa != 0;
  return p;
}

hopattn::BwdParams to_cpp(const hopattn_bwd_params& c) {
  hopattn::BwdParams p;
  copy_common(p, c);
  p.dout = to_view(c.dout);
  p.dq = to_view(c.dq);
  p.dk = to_view(c.dk);
  p.dv = to_view(c.dv);
  p.deterministic = c.deterministic != 0;
  return p;
}

// Runs f, turning exceptions into a status and the thread's last-error message.
template <class F>
hopattn_status guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return HOPATTN_OK;
  } catch (const hopattn::Error& e) {
    g_last_error = e.what();
    return static_cast<hopattn_status>(e.code());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return HOPATTN_INTERNAL;
  } catch (...) {
    g_last_error = "unknown exception";
    return HOPATTN_INTERNAL;
  }
}

template <class P>
hopattn_status null_params(const P* p) {
  if (p != nullptr) return HOPATTN_OK;
  g_last_error = "params: null pointer";
  return HOPATTN_INVALID_ARGUMENT;
}

}  // namespace

extern "C" {

void hopattn_fwd_params_init(hopattn_fwd_params* p) {
  if (p == nullptr) return;
  *p = hopattn_fwd_params{};
  p->window_left = -1;
  p->window_right = -1;
  p->num_splits = 1;
}

void hopattn_bwd_params_init(hopattn_bwd_params* p) {
  if (p == nullptr) return;
  *p = hopattn_bwd_params{};
  p->window_left = -1;
  p->window_right = -1;
}

hopattn_status hopattn_fwd_workspace_size(const hopattn_fwd_params* p, size_t* bytes) {
  if (hopattn_status s = null_params(p)) return s;
  return guarded([&] {
    const hopattn::Plan plan = hopattn::plan_fwd(to_cpp(*p), hopattn::query_device());
    if (bytes) *bytes = plan.workspace_bytes;
  });
}

hopattn_status hopattn_bwd_workspace_size(const hopattn_bwd_params* p, size_t* bytes) {
  if (hopattn_status s = null_params(p)) return s;
  return guarded([&] {
    const hopattn::Plan plan = hopattn::plan_bwd(to_cpp(*p), hopattn::query_device());
    if (bytes) *bytes = plan.workspace_bytes;
  });
}

hopattn_status hopattn_fwd(const hopattn_fwd_params* p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (hopattn_status s = null_params(p)) return s;
  return guarded([&] { hopattn::fwd(to_cpp(*p), workspace, workspace_bytes, stream); });
}

hopattn_status hopattn_bwd(const hopattn_bwd_params* p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (hopattn_status s = null_params(p)) return s;
  return guarded([&] { hopattn::bwd(to_cpp(*p), workspace, workspace_bytes, stream); });
}

hopattn_status hopattn_combine(const hopattn_combine_params* p, cudaStream_t stream) {
  if (hopattn_status s = null_params(p)) return s;
  return guarded([&] {
    hopattn::CombineParams c;
    c.out_partial = to_view(p->out_partial);
    c.lse_partial = to_view(p->lse_partial);
    c.out = to_view(p->out);
    c.lse = to_view(p->lse);
    hopattn::combine(c, stream);
  });
}

const char* hopattn_last_error(void) { return g_last_error.c_str(); }

const char* hopattn_version(void) { return hopattn::version(); }

}  // extern "C"
