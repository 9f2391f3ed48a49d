// Device-side random normal fill (no cuRAND): every element is a pure function of (seed, index).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hopattn/types.hpp"

namespace hopattn_bench {

// Writes n standard-normal values, rounded to dtype (fp16, bf16, e4m3 or fp32), to data.
void fill_random_normal(void* data, hopattn::DType dtype, int64_t n, uint64_t seed,
                        cudaStream_t stream);

}  // namespace hopattn_bench
