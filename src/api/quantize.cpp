// plan_quantize / run_quantize: validation and dispatch of the e4m3 quantization kernels.
#include "hopattn/quantize.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "api/cuda_check.hpp"
#include "api/validate.hpp"
#include "api/validate_shared.hpp"
#include "kernels/quant/quantize.hpp"

namespace hopattn {

namespace {

kernels::quant::QuantArgs validate_quantize(const QuantizeParams& p, const DeviceInfo& dev) {
  using namespace detail;
  check_device(dev);
  require_defined(p.in, "in");
  require_defined(p.out, "out");
  require_defined(p.descale, "descale");
  check_dtype(p.in, "in", {DType::kBFloat16, DType::kFloat16});
  check_dtype(p.out, "out", {DType::kFloat8E4M3});
  check_dtype(p.descale, "descale", {DType::kFloat32});
  check_rank(p.in, "in", 4, "(batch, seqlen, nheads, head_dim)");
  const int64_t B = p.in.shape[0], S = p.in.shape[1], H = p.in.shape[2], D = p.in.shape[3];
  if (D <= 0 || D % 32 != 0 || D > 256)
    fail("in", "head dim must be a multiple of 32 up to 256, got " + std::to_string(D));
  if (p.hadamard && (D & (D - 1)) != 0)
    not_supported("hadamard", "incoherent processing for head dim " + std::to_string(D) +
                                  " (needs a power of two: 64, 128, 256)");
  if (p.block_rows < 0) fail("block_rows", "must be >= 0 (0 = one scale per head), got " + std::to_string(p.block_rows));
  check_shape(p.out, "out", {B, S, H, D}, "(batch, seqlen, nheads, head_dim) like in");
  const int64_t nb = quantize_num_blocks(S, p.block_rows);
  check_shape(p.descale, "descale", {B, H, nb}, "(batch, nheads, num_blocks)");
  check_memory_layout(p.in, "in");
  check_memory_layout(p.out, "out");
  check_no_self_overlap(p.out, "out");
  check_contiguous(p.descale, "descale");
  check_device_pointer(p.in.data, "in", dev);
  check_device_pointer(p.out.data, "out", dev);
  check_device_pointer(p.descale.data, "descale", dev);
  if (B * S > INT32_MAX) fail("in", "batch * seqlen must fit in int32");

  kernels::quant::QuantArgs a;
  a.in = p.in.data;
  a.in_dtype = p.in.dtype;
  a.out = static_cast<uint8_t*>(p.out.data);
  a.descale = static_cast<float*>(p.descale.data);
  a.in_stride_b = p.in.stride[0];
  a.in_stride_s = p.in.stride[1];
  a.in_stride_h = p.in.stride[2];
  a.out_stride_b = p.out.stride[0];
  a.out_stride_s = p.out.stride[1];
  a.out_stride_h = p.out.stride[2];
  a.batch = int(B);
  a.seqlen = int(S);
  a.nheads = int(H);
  a.head_dim = int(D);
  a.block_rows = p.block_rows > 0 ? p.block_rows : int(std::max<int64_t>(S, 1));
  a.num_blocks = int(nb);
  a.hadamard = p.hadamard;
  a.seed = p.seed;
  return a;
}

}  // namespace

Plan plan_quantize(const QuantizeParams& p, const DeviceInfo& dev) {
  const kernels::quant::QuantArgs a = validate_quantize(p, dev);
  Plan plan;
  plan.device = dev;
  plan.kernel = p.hadamard ? "quantize_e4m3_hadamard" : "quantize_e4m3";
  plan.workspace_bytes = kernels::quant::workspace_bytes(a);
  return plan;
}

void run_quantize(const Plan& plan, const QuantizeParams& p, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  DeviceInfo dev = plan.device;
  dev.queried = false;
  const kernels::quant::QuantArgs a = validate_quantize(p, dev);
  if (workspace_bytes < kernels::quant::workspace_bytes(a) || (workspace == nullptr && a.batch * a.nheads > 0))
    throw Error(ErrorCode::kWorkspaceTooSmall, "workspace",
                "needs " + std::to_string(kernels::quant::workspace_bytes(a)) + " bytes, got " +
                    std::to_string(workspace_bytes));
  kernels::quant::launch(a, workspace, stream);
}

void quantize(const QuantizeParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  run_quantize(plan_quantize(p, query_device()), p, workspace, workspace_bytes, stream);
}

}  // namespace hopattn
