// Plain data types of the public API: dtypes and a strided tensor view.
// Nothing here depends on CUDA headers, so CPU-only callers (the reference, tests, tools)
// can include it without the toolkit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace hopattn {

enum class DType : int32_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat8E4M3 = 2,
  kFloat32 = 3,
  kInt32 = 4,
};

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat8E4M3: return 1;
    case DType::kFloat32: return 4;
    case DType::kInt32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t);

// A view of a device tensor of rank <= 4. Shapes and strides are in elements (not bytes), the
// way PyTorch reports them. The library never owns or frees the memory.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kBFloat16;
  int32_t rank = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> stride{};

  bool defined() const { return rank > 0; }
  int64_t numel() const {
    if (rank == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

// Builds a view with row-major contiguous strides (the common case in C++ callers and tests).
TensorView make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape);

// What the dispatcher and the validator need to know of the GPU that will run the call.
// Filled from the current device by query_device(); tests may pass a made-up one.
struct DeviceInfo {
  int device = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
  int max_smem_per_block_optin = 0;
  // True when filled from a real device by query_device(): only then are pointers checked to be
  // device memory (CPU tests pass made-up DeviceInfos with host buffers).
  bool queried = false;
};

}  // namespace hopattn
