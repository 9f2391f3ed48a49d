#include <cuda_runtime_api.h>

#include <cstdint>

#include "api/validate.hpp"

namespace hopattn::detail {

void fail(const std::string& arg, const std::string& msg) {
  throw Error(ErrorCode::kInvalidArgument, arg, msg);
}

void not_supported(const std::string& arg, const std::string& msg) {
  throw Error(ErrorCode::kNotSupported, arg, msg + " (not supported yet)");
}

std::string shape_str(const TensorView& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + ")";
}

void require_defined(const TensorView& t, const char* name) {
  if (!t.defined()) fail(name, "is required but was not given (rank 0)");
  if (t.rank < 0 || t.rank > 4) fail(name, "rank must be 1..4, got " + std::to_string(t.rank));
}

void check_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string list;
  for (DType d : allowed) list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
  fail(name, "expected dtype " + list + ", got " + dtype_name(t.dtype));
}

void check_same_dtype(const TensorView& t, const char* name, const TensorView& ref,
                      const char* ref_name) {
  if (t.dtype != ref.dtype)
    fail(name, std::string("expected the dtype of ") + ref_name + " (" + dtype_name(ref.dtype) +
                   "), got " + dtype_name(t.dtype));
}

void check_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank)
    fail(name, "expected a rank-" + std::to_string(rank) + " tensor " + layout + ", got shape " +
                   shape_str(t));
}

void check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> expected,
                 const char* layout) {
  bool ok = static_cast<int>(expected.size()) == t.rank;
  int i = 0;
  for (int64_t e : expected) ok = ok && (i < t.rank && t.shape[i++] == e);
  if (ok) return;
  std::string msg = "expected shape (";
  i = 0;
  for (int64_t e : expected) msg += (i++ ? ", " : "") + std::to_string(e);
  fail(name, msg + ") " + layout + ", got " + shape_str(t));
}

void check_memory_layout(const TensorView& t, const char* name) {
  const int64_t esize = dtype_size(t.dtype);
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) fail(name, "negative size in shape " + shape_str(t));
    if (t.stride[i] < 0) fail(name, "negative stride in dim " + std::to_string(i));
  }
  if (t.numel() == 0) return;
  if (t.data == nullptr) fail(name, "data pointer is null");
  if (t.rank >= 2 && t.stride[t.rank - 1] != 1 && t.shape[t.rank - 1] > 1)
    fail(name, "last dim must be contiguous (stride 1), got stride " +
                   std::to_string(t.stride[t.rank - 1]));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    fail(name, "base pointer must be 16-byte aligned (TMA), got address % 16 = " +
                   std::to_string(reinterpret_cast<uintptr_t>(t.data) % 16));
  for (int i = 0; i + 1 < t.rank; ++i) {
    if (t.shape[i] > 1 && (t.stride[i] * esize) % 16 != 0)
      fail(name, "stride of dim " + std::to_string(i) + " must be a multiple of 16 bytes (TMA), got " +
                     std::to_string(t.stride[i]) + " elements of " + std::to_string(esize) + " bytes");
  }
}

void check_device_pointer(const void* ptr, const char* name, const DeviceInfo& dev) {
  if (!dev.queried || ptr == nullptr) return;
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(name, "is not a CUDA pointer (cudaPointerGetAttributes failed)");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    fail(name, "must be device memory, got a host pointer");
  if (attr.device != dev.device)
    fail(name, "lives on device " + std::to_string(attr.device) + " but the call runs on device " +
                   std::to_string(dev.device));
}

void check_device(const DeviceInfo& dev) {
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    throw Error(ErrorCode::kUnsupportedDevice, "device",
                "hopattn kernels need a Hopper GPU (sm_90); device " + std::to_string(dev.device) +
                    " is sm_" + std::to_string(dev.cc_major) + std::to_string(dev.cc_minor));
}

}  // namespace hopattn::detail
