// Runs one benchmark case: allocates and fills the buffer sets, plans, times, and reports
// "not supported" instead of failing when the library declines the case.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench_case.hpp"
#include "hopattn/types.hpp"
#include "timing.hpp"

namespace hopattn_bench {

struct BenchContext {
  hopattn::DeviceInfo device;
  std::string gpu_name;
  size_t l2_bytes = 0;
  cudaStream_t stream = nullptr;
  TimingOptions timing;
  uint64_t seed = 0x5eedu;
  // Standard deviation of Q's and K's entries (V's stay N(0, 1)). Large values make scores jump
  // by more than the max-free softmax's lag, which times the forward's rare score recompute.
  float qk_std = 1.f;
};

struct CaseResult {
  bool supported = false;
  std::string message;  // why not, when !supported
  std::string kernel;   // Plan::kernel of the timed call
  TimingResult timing;
  double flops = 0;
  double tflops = 0;
};

// Bytes one buffer set touches per call (inputs and outputs of the timed direction).
size_t buffer_set_bytes(const Case& c);

// How many buffer sets to rotate through so that the bytes touched between two uses of the
// same set exceed 2 x L2: 1 when one set is already larger than L2, capped at kMaxBufferSets.
constexpr int kMaxBufferSets = 256;
int buffer_set_count(size_t set_bytes, size_t l2_bytes);

// Throws hopattn::Error (other than kNotSupported) and CudaError; both are fatal to the run.
CaseResult run_case(const Case& c, const BenchContext& ctx);

}  // namespace hopattn_bench
