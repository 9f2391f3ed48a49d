// Argument validation shared by every entry point. Each check throws hopattn::Error whose
// message starts with the argument's name and says what was expected and what was given.
// validate_fwd/validate_bwd return the problem in normalised form for the planner.
#pragma once

#include <initializer_list>
#include <string>

#include "hopattn/error.hpp"
#include "hopattn/params.hpp"
#include "hopattn/types.hpp"

namespace hopattn::detail {

[[noreturn]] void fail(const std::string& arg, const std::string& msg);
[[noreturn]] void not_supported(const std::string& arg, const std::string& msg);

std::string shape_str(const TensorView& t);
void require_defined(const TensorView& t, const char* name);
void check_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
void check_same_dtype(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name);
void check_rank(const TensorView& t, const char* name, int rank, const char* layout);
void check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> expected,
                 const char* layout);
// Non-negative sizes, contiguous last dim, 16-byte aligned base and strides (what TMA needs),
// non-null data when the tensor is not empty.
void check_memory_layout(const TensorView& t, const char* name);
// When dev.queried: the pointer must be device (or managed) memory of that device.
void check_device_pointer(const void* ptr, const char* name, const DeviceInfo& dev);
void check_device(const DeviceInfo& dev);

// The forward problem after validation, with defaults resolved.
struct FwdProblem {
  DType dtype = DType::kBFloat16;      // of q, k, v
  DType out_dtype = DType::kBFloat16;
  int batch = 0, seqlen_q = 0, seqlen_k = 0;  // for varlen: batch_varlen and the max lengths
  int64_t total_q = 0, total_k = 0;           // rows of the packed q / k (dense: batch * seqlen)
  int nheads = 0, nheads_k = 0, head_dim = 0, head_dim_v = 0;
  bool varlen = false;
  float softmax_scale = 0.f;
  bool causal = false;
  int window_left = -1, window_right = -1;  // after folding causal in
  float softcap = 0.f;
  bool has_lse = false;
  bool empty() const { return batch == 0 || seqlen_q == 0 || total_q == 0 || nheads == 0; }
};

FwdProblem validate_fwd(const FwdParams& p, const DeviceInfo& dev);
FwdProblem validate_bwd(const BwdParams& p, const DeviceInfo& dev);

// Head dims a 16-bit kernel may be instantiated for (the set a build compiles is a subset).
constexpr int kHeadDims[] = {64, 96, 128, 192, 256};

}  // namespace hopattn::detail
