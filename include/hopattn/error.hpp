// The one exception type of the C++ API. Every message names the offending argument and says
// what was expected, e.g. "q: expected dtype bf16 or fp16 or e4m3, got fp32".
#pragma once

#include <stdexcept>
#include <string>

namespace hopattn {

enum class ErrorCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,   // bad shape, dtype, stride, alignment, pointer, length, option mix
  kNotSupported = 2,      // valid request that this build does not implement (yet)
  kUnsupportedDevice = 3, // no GPU, or not sm_90
  kCudaError = 4,         // a CUDA runtime call failed
  kWorkspaceTooSmall = 5,
  kInternal = 6,
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, const std::string& message)
      : std::runtime_error(argument.empty() ? message : argument + ": " + message),
        code_(code), argument_(std::move(argument)) {}
  ErrorCode code() const { return code_; }
  // The argument the error is about ("q", "cu_seqlens_k", "window_left", ...), or "".
  const std::string& argument() const { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

}  // namespace hopattn
