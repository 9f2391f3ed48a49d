// Host interface of the quantization kernels (bf16/fp16 -> e4m3 with per-block scales and
// optional incoherent processing). See include/hopattn/quantize.hpp for the semantics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "hopattn/types.hpp"

namespace hopattn::kernels::quant {

struct QuantArgs {
  const void* in = nullptr;
  DType in_dtype = DType::kBFloat16;
  uint8_t* out = nullptr;
  float* descale = nullptr;  // (batch, nheads, num_blocks), contiguous
  int64_t in_stride_b = 0, in_stride_s = 0, in_stride_h = 0;   // elements
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;
  int batch = 0, seqlen = 0, nheads = 0, head_dim = 0;
  int block_rows = 0;  // effective rows per scale (>= 1)
  int num_blocks = 0;
  bool hadamard = false;
  uint64_t seed = 0;
};

size_t workspace_bytes(const QuantArgs& a);  // the per-block amax accumulators
void launch(const QuantArgs& a, void* workspace, cudaStream_t stream);

}  // namespace hopattn::kernels::quant
