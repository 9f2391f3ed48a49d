// query_device(): the current device's properties, cached per device so that planning a call
// costs no driver round trip after the first one.
#include <array>
#include <mutex>

#include "api/cuda_check.hpp"
#include "hopattn/api.hpp"

namespace hopattn {

DeviceInfo query_device() {
  int device = -1;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    throw Error(ErrorCode::kUnsupportedDevice, "device",
                std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  constexpr int kMaxDevices = 64;
  static std::array<DeviceInfo, kMaxDevices> cache{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= 0 && device < kMaxDevices && cache[device].queried) return cache[device];
  DeviceInfo info;
  info.device = device;
  HOPATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  HOPATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  HOPATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device));
  HOPATTN_CUDA_CHECK(cudaDeviceGetAttribute(&info.max_smem_per_block_optin,
                                            cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  info.queried = true;
  if (device >= 0 && device < kMaxDevices) cache[device] = info;
  return info;
}

}  // namespace hopattn
