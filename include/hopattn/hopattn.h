/* C ABI over the C++ entry points, for callers outside C++ (ctypes, Rust, Julia, ...).
 * Every function returns a hopattn_status (0 = success); on failure hopattn_last_error()
 * returns the message of the last error on the calling thread (argument name first).
 * Field meanings are those of hopattn/params.hpp. */
#ifndef HOPATTN_HOPATTN_H_
#define HOPATTN_HOPATTN_H_

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t hopattn_status; /* values of hopattn::ErrorCode */

enum {
  HOPATTN_OK = 0,
  HOPATTN_INVALID_ARGUMENT = 1,
  HOPATTN_NOT_SUPPORTED = 2,
  HOPATTN_UNSUPPORTED_DEVICE = 3,
  HOPATTN_CUDA_ERROR = 4,
  HOPATTN_WORKSPACE_TOO_SMALL = 5,
  HOPATTN_INTERNAL = 6,
};

enum {
  HOPATTN_FLOAT16 = 0,
  HOPATTN_BFLOAT16 = 1,
  HOPATTN_FLOAT8_E4M3 = 2,
  HOPATTN_FLOAT32 = 3,
  HOPATTN_INT32 = 4,
};

typedef struct hopattn_tensor {
  void* data;
  int32_t dtype;
  int32_t rank; /* 0 = not given */
  int64_t shape[4];
  int64_t stride[4]; /* in elements */
} hopattn_tensor;

typedef struct hopattn_fwd_params {
  hopattn_tensor q, k, v, out, lse;
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_q;
  const int32_t* seqused_k;
  int32_t batch_varlen, max_seqlen_q, max_seqlen_k;
  float softmax_scale;
  int32_t causal, window_left, window_right;
  float softcap;
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  hopattn_tensor page_table, cache_seqlens, cache_batch_idx, k_new, v_new;
  int32_t num_splits;
  int32_t pack_gqa;
  /* FP8 block descales (hopattn::Fp8BlockDescale): q (batch, nheads, blocks), k and v
     (batch, nheads_k, blocks) float32; kv_block_rows a multiple of 128. */
  hopattn_tensor q_block_descale, k_block_descale, v_block_descale;
  int32_t q_block_rows, kv_block_rows;
} hopattn_fwd_params;

typedef struct hopattn_bwd_params {
  hopattn_tensor q, k, v, out, lse, dout, dq, dk, dv;
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_q;
  const int32_t* seqused_k;
  int32_t batch_varlen, max_seqlen_q, max_seqlen_k;
  float softmax_scale;
  int32_t causal, window_left, window_right;
  float softcap;
  int32_t deterministic;
} hopattn_bwd_params;

/* Split-KV combine (hopattn::CombineParams): out_partial (num_splits, batch * seqlen, nheads,
   head_dim) and lse_partial (num_splits, batch, nheads, seqlen) float32; out (batch, seqlen,
   nheads, head_dim) float32 / bf16 / fp16; lse (batch, nheads, seqlen) float32 or not given. */
typedef struct hopattn_combine_params {
  hopattn_tensor out_partial, lse_partial, out, lse;
} hopattn_combine_params;

/* Fills *p with the defaults of the C++ structs (no tensors, window -1, num_splits 1). */
void hopattn_fwd_params_init(hopattn_fwd_params* p);
void hopattn_bwd_params_init(hopattn_bwd_params* p);

/* Validates and returns the workspace a run needs, without launching anything. */
hopattn_status hopattn_fwd_workspace_size(const hopattn_fwd_params* p, size_t* bytes);
hopattn_status hopattn_bwd_workspace_size(const hopattn_bwd_params* p, size_t* bytes);

hopattn_status hopattn_fwd(const hopattn_fwd_params* p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);
hopattn_status hopattn_bwd(const hopattn_bwd_params* p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);
/* Needs no workspace. */
hopattn_status hopattn_combine(const hopattn_combine_params* p, cudaStream_t stream);

const char* hopattn_last_error(void);
const char* hopattn_version(void);

#ifdef __cplusplus
}
#endif

#endif /* HOPATTN_HOPATTN_H_ */
