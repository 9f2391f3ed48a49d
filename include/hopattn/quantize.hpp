// Quantization to e4m3 for the FP8 forward: one scale per block of rows of one head, and
// optional incoherent processing (the FlashAttention-3 paper, section 3.3): each row x becomes
// x * diag(s) * H / sqrt(d), with H the Sylvester-Hadamard matrix (H[i][j] = (-1)^popcount(i&j))
// and s random signs from a seed. Apply the same seed to Q and K: (QM)(KM)^T = Q K^T, so
// attention is unchanged while outliers are spread over the row. V is quantized without it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hopattn/api.hpp"
#include "hopattn/types.hpp"

namespace hopattn {

struct QuantizeParams {
  TensorView in;       // (batch, seqlen, nheads, head_dim), fp16 or bf16
  TensorView out;      // same shape, e4m3 (written)
  TensorView descale;  // (batch, nheads, num_blocks) fp32 (written): in ~= out * descale
  int32_t block_rows = 0;  // rows per scale; 0 = one scale per (batch, head)
  bool hadamard = false;   // incoherent processing (head_dim must be 64, 128 or 256)
  uint64_t seed = 0;       // of the random signs
};

// The random sign of column `col` for `seed`: +1 or -1. Part of the contract, so that callers
// can reproduce the rotation (e.g. to rotate a query computed elsewhere).
constexpr float incoherence_sign(uint64_t seed, int col) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(col) + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z & 1) ? -1.f : 1.f;
}

// Number of scale blocks along the sequence for a given seqlen and block_rows.
constexpr int64_t quantize_num_blocks(int64_t seqlen, int32_t block_rows) {
  return block_rows <= 0 ? 1 : (seqlen + block_rows - 1) / block_rows;
}

Plan plan_quantize(const QuantizeParams& p, const DeviceInfo& dev);
void run_quantize(const Plan& plan, const QuantizeParams& p, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream);
void quantize(const QuantizeParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace hopattn
