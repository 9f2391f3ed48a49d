// Device-side random normal fill (no cuRAND): every element is a pure function of (seed, index).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hopattn/types.hpp"

namespace hopattn_bench {

// Writes n normal values of standard deviation `stddev`, rounded to dtype (fp16, bf16, e4m3 or fp32;
// e4m3 saturates at +-448), to data.
void fill_random_normal(void* data, hopattn::DType dtype, int64_t n, uint64_t seed,
                        cudaStream_t stream, float stddev = 1.f);

}  // namespace hopattn_bench
