// The C++ entry points. Each operation is validate -> plan -> run:
//   * plan_*() validates every argument (throws hopattn::Error naming the argument), picks the
//     kernel and says how much workspace the run needs. It does not touch device memory.
//   * run_*() only launches kernels on the given stream: no allocation, no host synchronisation,
//     so it can be captured in a CUDA graph. Scratch memory is the caller's workspace.
// The one-call forms (fwd(), bwd(), combine()) plan and run back to back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "hopattn/error.hpp"
#include "hopattn/params.hpp"
#include "hopattn/types.hpp"

namespace hopattn {

// The current CUDA device's properties (cached per device). Throws kUnsupportedDevice when
// there is no CUDA device.
DeviceInfo query_device();

// What the planner chose. Opaque to callers apart from the fields below.
struct Plan {
  size_t workspace_bytes = 0;
  std::string kernel;  // human-readable name of the chosen kernel, for logs and benchmarks
  int32_t kernel_id = -1;
  int32_t num_splits = 1;
  int32_t num_ctas = 0;
  int32_t ctas_per_cluster = 1;  // forward: 2 where the kernel runs in 2-CTA clusters with K/V multicast
  DeviceInfo device;
};

Plan plan_fwd(const FwdParams& p, const DeviceInfo& dev);
void run_fwd(const Plan& plan, const FwdParams& p, void* workspace, size_t workspace_bytes,
             cudaStream_t stream);

Plan plan_bwd(const BwdParams& p, const DeviceInfo& dev);
void run_bwd(const Plan& plan, const BwdParams& p, void* workspace, size_t workspace_bytes,
             cudaStream_t stream);

Plan plan_combine(const CombineParams& p, const DeviceInfo& dev);
void run_combine(const Plan& plan, const CombineParams& p, cudaStream_t stream);

// Convenience: query_device + plan + run. workspace may be null when the plan needs none.
void fwd(const FwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
void bwd(const BwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
void combine(const CombineParams& p, cudaStream_t stream);

// Library version string, e.g. "0.1.0".
const char* version();

}  // namespace hopattn
