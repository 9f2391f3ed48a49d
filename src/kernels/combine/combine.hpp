// Host interface of the split-KV combine kernel: merges attention results computed over
// disjoint key ranges (splits) into the result over all of them. See
// include/hopattn/params.hpp (CombineParams) for the tensors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hopattn/types.hpp"

namespace hopattn::kernels::combine {

struct CombineArgs {
  const float* out_partial = nullptr;  // (splits, batch * seqlen, nheads, head_dim)
  const float* lse_partial = nullptr;  // (splits, batch, nheads, seqlen)
  void* out = nullptr;                 // (batch, seqlen, nheads, head_dim), out_dtype
  float* lse = nullptr;                // (batch, nheads, seqlen), or null
  DType out_dtype = DType::kFloat32;
  int num_splits = 0, batch = 0, seqlen = 0, nheads = 0, head_dim = 0;
  // Strides in elements, of the dims above in order.
  int64_t op_stride[4] = {}, lp_stride[4] = {}, out_stride[4] = {}, lse_stride[3] = {};
};

void launch(const CombineArgs& a, cudaStream_t stream);

}  // namespace hopattn::kernels::combine
