// run_fwd is CUDA-graph safe: captured into a graph and replayed, it gives bitwise the eager
// result (no allocation, no host synchronisation, the scheduler's counter reset is a graph node).
// Causal runs the counter-claimed schedule; unmasked (6 query blocks at d128) the 2-CTA cluster
// launch (cudaLaunchKernelEx with a cluster attribute, fixed stride).
#include <gtest/gtest.h>

#include <vector>

#include "common/gpu_harness.hpp"
#include "hopattn_ref/numeric.hpp"

namespace hopattn::testing {
namespace {

void expect_captured_run_matches_eager(bool causal) {
  const int B = 2, S = 700, H = 4, D = 128;
  DeviceTensor q = DeviceTensor::contiguous(DType::kBFloat16, {B, S, H, D});
  DeviceTensor k = DeviceTensor::contiguous(DType::kBFloat16, {B, S, H, D});
  DeviceTensor v = DeviceTensor::contiguous(DType::kBFloat16, {B, S, H, D});
  DeviceTensor out = DeviceTensor::contiguous(DType::kBFloat16, {B, S, H, D});
  DeviceTensor lse = DeviceTensor::contiguous(DType::kFloat32, {B, H, S});
  std::vector<double> host(size_t(B) * S * H * D);
  ref::fill_random(host, 11);
  q.upload(host);
  ref::fill_random(host, 12);
  k.upload(host);
  ref::fill_random(host, 13);
  v.upload(host);

  FwdParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out.view;
  p.lse = lse.view;
  p.mask.causal = causal;
  Plan plan;
  try {
    plan = plan_fwd(p, query_device());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotSupported) GTEST_SKIP() << e.what();
    FAIL() << e.what();
  }
  EXPECT_EQ(plan.ctas_per_cluster, causal ? 1 : 2) << plan.kernel;  // the launch this test is about
  DeviceBuffer ws(plan.workspace_bytes);
  cudaStream_t stream;
  HT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  out.buf.poison();  // also the padding bytes, so raw buffers compare equal across runs
  lse.buf.poison();
  HT_CUDA_CHECK(cudaDeviceSynchronize());  // the poison runs on the legacy stream
  run_fwd(plan, p, ws.get(), ws.bytes(), stream);
  HT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto eager_out = out.raw();
  const auto eager_lse = lse.raw();

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  HT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  run_fwd(plan, p, ws.get(), ws.bytes(), stream);
  HT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  HT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    out.buf.poison();
    lse.buf.poison();
    HT_CUDA_CHECK(cudaDeviceSynchronize());
    HT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    HT_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(out.raw() == eager_out) << "replay " << replay << ": out differs from eager";
    EXPECT_TRUE(lse.raw() == eager_lse) << "replay " << replay << ": lse differs from eager";
  }
  HT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  HT_CUDA_CHECK(cudaGraphDestroy(graph));
  HT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(FwdGraph, CapturedRunMatchesEager) {
  HT_REQUIRE_HOPPER();
  expect_captured_run_matches_eager(/*causal=*/true);
}

TEST(FwdGraph, CapturedClusterRunMatchesEager) {
  HT_REQUIRE_HOPPER();
  expect_captured_run_matches_eager(/*causal=*/false);
}

}  // namespace
}  // namespace hopattn::testing
