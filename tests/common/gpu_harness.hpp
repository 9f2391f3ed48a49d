// Shared helpers of the GPU tests: skip without an sm_90 GPU, checked CUDA calls, device
// buffers that are poisoned (all bits set: NaN in every float format) before each run.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hopattn/hopattn.hpp"
#include "hopattn_ref/numeric.hpp"

namespace hopattn::testing {

#define HT_CUDA_CHECK(expr)                                                               \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);                \
  } while (0)

// Returns an empty string when an sm_90 GPU is present, else why not.
inline std::string why_no_hopper() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return "no CUDA device";
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0) return "device is sm_" + std::to_string(major * 10 + minor) + ", not sm_90";
  return "";
}

#define HT_REQUIRE_HOPPER()                                                   \
  do {                                                                        \
    const std::string why_ = ::hopattn::testing::why_no_hopper();             \
    if (!why_.empty()) GTEST_SKIP() << "GPU test skipped: " << why_;          \
  } while (0)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0 && cudaMalloc(&ptr_, bytes_) != cudaSuccess) {
      ptr_ = nullptr;
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes_) + " bytes failed");
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void poison() const {
    if (bytes_ && cudaMemset(ptr_, 0xFF, bytes_) != cudaSuccess) throw std::runtime_error("poison failed");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Host value -> the dtype's bits, and back.
inline void encode(DType dt, double x, void* dst) {
  switch (dt) {
    case DType::kFloat16: { uint16_t b = ref::to_half_bits(float(x)); std::memcpy(dst, &b, 2); break; }
    case DType::kBFloat16: { uint16_t b = ref::to_bf16_bits(float(x)); std::memcpy(dst, &b, 2); break; }
    case DType::kFloat8E4M3: { uint8_t b = ref::to_e4m3_bits(float(x)); std::memcpy(dst, &b, 1); break; }
    case DType::kFloat32: { float f = float(x); std::memcpy(dst, &f, 4); break; }
    case DType::kInt32: { int32_t i = int32_t(x); std::memcpy(dst, &i, 4); break; }
  }
}

inline double decode(DType dt, const void* src) {
  switch (dt) {
    case DType::kFloat16: { uint16_t b; std::memcpy(&b, src, 2); return ref::from_half_bits(b); }
    case DType::kBFloat16: { uint16_t b; std::memcpy(&b, src, 2); return ref::from_bf16_bits(b); }
    case DType::kFloat8E4M3: { uint8_t b; std::memcpy(&b, src, 1); return ref::from_e4m3_bits(b); }
    case DType::kFloat32: { float f; std::memcpy(&f, src, 4); return f; }
    case DType::kInt32: { int32_t i; std::memcpy(&i, src, 4); return i; }
  }
  return 0;
}

// A strided device tensor of rank 3 or 4 made from a packed host array (row-major over the
// logical shape). Strides are given in elements; the buffer spans the largest offset.
struct DeviceTensor {
  DeviceBuffer buf;
  TensorView view;

  static DeviceTensor make(DType dt, std::vector<int64_t> shape, std::vector<int64_t> stride) {
    DeviceTensor t;
    t.view.dtype = dt;
    t.view.rank = int(shape.size());
    int64_t span = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      t.view.shape[i] = shape[i];
      t.view.stride[i] = stride[i];
      if (shape[i] > 0) span += (shape[i] - 1) * stride[i];
    }
    t.buf = DeviceBuffer(size_t(span) * dtype_size(dt) + 16);
    t.view.data = t.buf.get();
    return t;
  }
  static DeviceTensor contiguous(DType dt, std::vector<int64_t> shape) {
    std::vector<int64_t> stride(shape.size());
    int64_t s = 1;
    for (int i = int(shape.size()) - 1; i >= 0; --i) { stride[i] = s; s *= shape[i]; }
    return make(dt, shape, stride);
  }

  template <class F>
  void for_each_offset(F&& f) const {  // f(packed index, element offset)
    const auto& v = view;
    int64_t idx[4] = {0, 0, 0, 0};
    const int64_t n = v.numel();
    for (int64_t lin = 0; lin < n; ++lin) {
      int64_t rem = lin, off = 0;
      for (int d = v.rank - 1; d >= 0; --d) {
        idx[d] = rem % v.shape[d];
        rem /= v.shape[d];
        off += idx[d] * v.stride[d];
      }
      f(lin, off);
    }
  }

  void upload(const std::vector<double>& host) {
    std::vector<uint8_t> staging(buf.bytes(), 0xFF);
    const int es = dtype_size(view.dtype);
    for_each_offset([&](int64_t lin, int64_t off) { encode(view.dtype, host[lin], &staging[off * es]); });
    if (cudaMemcpy(buf.get(), staging.data(), staging.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("upload failed");
  }
  std::vector<double> download() const {
    std::vector<uint8_t> staging(buf.bytes());
    if (cudaMemcpy(staging.data(), buf.get(), staging.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("download failed");
    std::vector<double> host(view.numel());
    const int es = dtype_size(view.dtype);
    for_each_offset([&](int64_t lin, int64_t off) { host[lin] = decode(view.dtype, &staging[off * es]); });
    return host;
  }
  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> staging(buf.bytes());
    if (cudaMemcpy(staging.data(), buf.get(), staging.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("download failed");
    return staging;
  }
};

inline DeviceBuffer upload_ints(const std::vector<int>& v) {
  DeviceBuffer b(v.size() * sizeof(int32_t) + 16);
  if (cudaMemcpy(b.get(), v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("upload failed");
  return b;
}

}  // namespace hopattn::testing
