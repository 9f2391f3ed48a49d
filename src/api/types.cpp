#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "hopattn/types.hpp"

namespace hopattn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat32: return "fp32";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotSupported: return "not supported";
    case ErrorCode::kUnsupportedDevice: return "unsupported device";
    case ErrorCode::kCudaError: return "CUDA error";
    case ErrorCode::kWorkspaceTooSmall: return "workspace too small";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

TensorView make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  if (t.rank > 4) throw Error(ErrorCode::kInvalidArgument, "shape", "rank must be at most 4");
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

const char* version() { return HOPATTN_VERSION; }

}  // namespace hopattn
