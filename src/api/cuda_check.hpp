// Every CUDA runtime call in the library goes through HOPATTN_CUDA_CHECK: a failure becomes a
// hopattn::Error(kCudaError) naming the call and the file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hopattn/error.hpp"

#define HOPATTN_CUDA_CHECK(expr)                                                          \
  do {                                                                                    \
    cudaError_t hopattn_err_ = (expr);                                                    \
    if (hopattn_err_ != cudaSuccess) {                                                    \
      throw ::hopattn::Error(::hopattn::ErrorCode::kCudaError, "",                        \
                             std::string(#expr) + " failed: " +                           \
                                 cudaGetErrorString(hopattn_err_) + " (" + __FILE__ +     \
                                 ":" + std::to_string(__LINE__) + ")");                   \
    }                                                                                     \
  } while (0)
