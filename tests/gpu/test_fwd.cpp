// Forward kernel against the float64 reference, over the coverage list of the forward issue:
// dtypes, head dims, causal / window / softcap, seqlen_q != seqlen_k, ragged lengths down to 1,
// GQA/MQA, variable length with empty sequences, non-contiguous strides. Every case poisons the
// outputs first, uses the shared accuracy rule (2x the error of naive attention in the input
// dtype, NaN/inf positions equal, LSE to a few float32 ULPs) and checks run-to-run determinism.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/gpu_harness.hpp"
#include "common/random_cases.hpp"
#include "hopattn_ref/accuracy.hpp"
#include "hopattn_ref/numeric.hpp"
#include "hopattn_ref/reference.hpp"

namespace hopattn::testing {
namespace {

using FwdCase = AttnCase;

class FwdTest : public ::testing::TestWithParam<FwdCase> {};

TEST_P(FwdTest, MatchesFloat64Reference) {
  HT_REQUIRE_HOPPER();
  const FwdCase c = GetParam();
  const ref::Problem prob = make_problem(c);
  const int tq = prob.total_q(), tk = prob.total_k();
  const uint64_t seed = std::hash<std::string>{}(c.name());
  const auto q = random_input(size_t(tq) * c.nheads * c.head_dim, seed + 1, c.dtype);
  auto k = random_input(size_t(tk) * c.nheads_k * c.head_dim, seed + 2, c.dtype);
  apply_key_gain(c, prob, k);
  const auto v = random_input(size_t(tk) * c.nheads_k * c.head_dim, seed + 3, c.dtype);

  const int64_t B = c.varlen() ? tq : c.batch, Sq = c.varlen() ? 0 : c.seqlen_q;
  const int64_t Bk = c.varlen() ? tk : c.batch, Sk = c.varlen() ? 0 : c.seqlen_k;
  DeviceTensor dq = make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim);
  DeviceTensor dk = make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim);
  DeviceTensor dv = make_input(c, c.dtype, Bk, Sk, c.nheads_k, c.head_dim);
  DeviceTensor dout = make_input(c, c.dtype, B, Sq, c.nheads, c.head_dim);
  DeviceTensor dlse = c.varlen() ? DeviceTensor::contiguous(DType::kFloat32, {c.nheads, tq})
                                 : DeviceTensor::contiguous(DType::kFloat32, {c.batch, c.nheads, c.seqlen_q});
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);

  FwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.lse = dlse.view;
  p.softmax_scale = c.softmax_scale;
  p.mask = {c.causal, c.window_left, c.window_right};
  p.softcap = c.softcap;
  p.tuning.disable_intra_wg_overlap = c.no_overlap;
  p.tuning.disable_pingpong = c.no_pingpong;
  p.tuning.disable_warp_specialization = c.no_ws;
  p.tuning.disable_cluster = c.no_cluster;
  if (!c.force_kernel.empty()) p.tuning.kernel = c.force_kernel.c_str();
  p.tuning.l2_section_pairs = c.l2_section_pairs;
  VarlenArrays varlen_arrays;
  if (c.varlen()) varlen_arrays = set_varlen(p, prob);

  Plan plan;
  try {
    DeviceInfo dev = query_device();
    if (c.max_ctas > 0) dev.num_sms = c.max_ctas;  // the plan keeps it for run_fwd
    plan = plan_fwd(p, dev);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotSupported) GTEST_SKIP() << "not in this build: " << e.what();
    if (std::string(e.what()).find("no compiled forward kernel") != std::string::npos)
      GTEST_SKIP() << "forced kernel not in this build: " << e.what();
    FAIL() << e.what();
  }
  DeviceBuffer ws(plan.workspace_bytes);
  auto run = [&] {
    dout.buf.poison();
    dlse.buf.poison();
    run_fwd(plan, p, ws.get(), ws.bytes(), nullptr);
    HT_CUDA_CHECK(cudaDeviceSynchronize());
  };
  run();
  const auto out = dout.download();
  const auto lse = dlse.download();
  const auto out_raw = dout.raw();
  const auto lse_raw = dlse.raw();

  const ref::FwdResult want = ref::forward(prob, q, k, v);
  const ref::FwdResult lowp = ref::forward_lowp(prob, q, k, v, c.dtype);
  const auto cmp = ref::compare(out, want.out, lowp.out);
  EXPECT_TRUE(cmp.ok) << "out: " << cmp.describe();
  const auto want_lse = c.varlen() ? want.lse : ref::lse_packed_to_dense(prob, want.lse);
  const double lse_tol = ref::lse_abs_tol(c.softcap, c.head_dim, ref::max_score_l1(prob, q, k));
  const auto cmp_lse = ref::compare_lse(lse, want_lse, lse_tol);
  EXPECT_TRUE(cmp_lse.ok) << "lse: " << cmp_lse.describe();

  run();  // determinism: the same bits again
  EXPECT_TRUE(dout.raw() == out_raw) << "out differs between two runs";
  EXPECT_TRUE(dlse.raw() == lse_raw) << "lse differs between two runs";
}

std::vector<FwdCase> coverage() {
  std::vector<FwdCase> cases;
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    for (int d : {64, 96, 128, 192, 256}) {
      FwdCase c;
      c.dtype = dt;
      c.head_dim = d;
      cases.push_back(c);                                    // plain
      FwdCase cc = c; cc.causal = true; cases.push_back(cc);  // causal
      if (dt == DType::kBFloat16) {
        FwdCase r = c; r.batch = 1; r.seqlen_q = 300; r.seqlen_k = 517; r.causal = true; cases.push_back(r);
        FwdCase r2 = c; r2.batch = 2; r2.seqlen_q = 517; r2.seqlen_k = 129; r2.causal = true; cases.push_back(r2);
        FwdCase g = c; g.nheads = 8; g.nheads_k = 2; g.seqlen_q = 200; g.seqlen_k = 333; cases.push_back(g);
      }
    }
  }
  FwdCase base;
  auto add = [&](auto&& edit) { FwdCase c = base; edit(c); cases.push_back(c); };
  add([](FwdCase& c) { c.seqlen_q = 1; c.seqlen_k = 1; });
  add([](FwdCase& c) { c.seqlen_q = 1; c.seqlen_k = 1000; c.causal = true; });
  add([](FwdCase& c) { c.seqlen_q = 77; c.seqlen_k = 13; });
  add([](FwdCase& c) { c.seqlen_q = 1000; c.seqlen_k = 10; c.causal = true; });  // rows with no key
  add([](FwdCase& c) { c.nheads = 8; c.nheads_k = 1; c.seqlen_q = 190; });    // MQA
  add([](FwdCase& c) { c.window_left = 100; c.window_right = 30; c.seqlen_q = 500; c.seqlen_k = 700; });
  add([](FwdCase& c) { c.window_left = 64; c.causal = true; c.seqlen_q = 600; c.seqlen_k = 600; });
  add([](FwdCase& c) { c.window_left = -1; c.window_right = 0; c.seqlen_q = 333; });
  add([](FwdCase& c) { c.softcap = 30.f; c.seqlen_q = 300; });
  add([](FwdCase& c) { c.softcap = 5.f; c.causal = true; c.head_dim = 64; });
  add([](FwdCase& c) { c.softmax_scale = 0.5f; c.seqlen_q = 130; });
  // Large scales make row maxima jump by more than OnlineSoftmax::kMaxLag across many key blocks
  // (scores' std ~ 2^5 in the exp2 domain at d128, scale 1), so warps mix kept and moved maxima:
  // short-key, default, masked d64 and d256 kernels.
  add([](FwdCase& c) { c.softmax_scale = 1.f; c.seqlen_q = 200; c.seqlen_k = 1500; });
  add([](FwdCase& c) { c.softmax_scale = 0.3f; c.seqlen_q = 150; c.seqlen_k = 2500; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.softmax_scale = 1.f; c.head_dim = 64; c.seqlen_q = 1000; c.seqlen_k = 1000; c.causal = true; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.softmax_scale = 0.3f; c.head_dim = 256; c.seqlen_q = 300; c.seqlen_k = 1200; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.row_pad = 64; c.seqlen_q = 190; c.seqlen_k = 257; });
  add([](FwdCase& c) { c.row_pad = 8; c.causal = true; c.nheads = 6; c.nheads_k = 3; });
  add([](FwdCase& c) { c.varlen_q = {100, 0, 257, 1}; c.varlen_k = {64, 5, 300, 0}; });
  add([](FwdCase& c) { c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; });
  add([](FwdCase& c) { c.varlen_q = {300, 45}; c.varlen_k = {300, 800}; c.nheads = 8; c.nheads_k = 2; c.window_left = 50; c.head_dim = 64; });
  add([](FwdCase& c) { c.batch = 3; c.seqlen_q = 1024; c.seqlen_k = 1024; c.causal = true; c.nheads = 2; c.nheads_k = 2; });
  // Past the staged-epilogue kernels' key limits (manifest.cmake: 4096 at d128, 2048 at d96; every
  // shorter d96 / d128 case above runs the staged ones): d128 problems whose mask hides much
  // (causal with seqlen_q >= seqlen_k / 2, any left window) run the masked 128-key kernel, the
  // others the 176-key default kernel (causal chunked prefill, ragged last block, GQA, fp16,
  // varlen); d96 its default.
  add([](FwdCase& c) { c.seqlen_q = 130; c.seqlen_k = 4200; c.causal = true; c.nheads = 2; c.nheads_k = 1; });
  add([](FwdCase& c) { c.seqlen_q = 2200; c.seqlen_k = 4200; c.causal = true; c.nheads = 2; c.nheads_k = 1; });
  add([](FwdCase& c) { c.seqlen_q = 200; c.seqlen_k = 4500; c.window_left = 300; c.window_right = 40; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.seqlen_q = 300; c.seqlen_k = 4200; c.nheads = 4; c.nheads_k = 2; });
  add([](FwdCase& c) { c.dtype = DType::kFloat16; c.seqlen_q = 129; c.seqlen_k = 4113; c.nheads = 2; c.nheads_k = 1; });
  add([](FwdCase& c) { c.varlen_q = {100, 7, 260}; c.varlen_k = {4200, 50, 5000}; c.nheads = 4; c.nheads_k = 1; });
  add([](FwdCase& c) { c.head_dim = 96; c.seqlen_q = 70; c.seqlen_k = 2200; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.head_dim = 96; c.dtype = DType::kFloat16; c.varlen_q = {129, 40}; c.varlen_k = {2300, 100}; c.causal = true; c.nheads = 4; c.nheads_k = 2; });
  // d64: causal or left-windowed problems up to 1024 keys run the masked two-warpgroup kernel
  // (ragged, GQA, fp16, varlen, softcap); 1025 keys go back to the three-warpgroup default.
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 1000; c.seqlen_k = 1000; c.causal = true; c.nheads = 4; c.nheads_k = 2; });
  add([](FwdCase& c) { c.head_dim = 64; c.dtype = DType::kFloat16; c.seqlen_q = 700; c.seqlen_k = 1024; c.causal = true; c.softcap = 30.f; });
  add([](FwdCase& c) { c.head_dim = 64; c.varlen_q = {513, 1, 900}; c.varlen_k = {513, 64, 1000}; c.window_left = 100; c.window_right = 0; c.nheads = 2; c.nheads_k = 1; });
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 1025; c.seqlen_k = 1025; c.causal = true; c.nheads = 2; c.nheads_k = 2; });
  add([](FwdCase& c) { c.head_dim = 64; c.force_kernel = "fwd_sm90_bf16_hd64_masked"; c.seqlen_q = 333; c.seqlen_k = 2100; });
  // Narrow first blocks (FwdTraits::kNarrowFirstBlock, d64 and d192): warpgroups whose rows see
  // no key past the first half of their tile's first block, by a right window or a bottom-right
  // causal shift; the first keys scaled up, so that blocks after the narrow one (which sets the
  // rows' first maxima) lift the offsets or recompute their scores.
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 1500; c.seqlen_k = 1500; c.window_right = 30; c.nheads = 2; c.nheads_k = 1; });
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 900; c.seqlen_k = 1000; c.causal = true; c.gain_keys = 500; c.key_gain = 8.f; });
  add([](FwdCase& c) { c.head_dim = 192; c.seqlen_q = 1000; c.seqlen_k = 1000; c.causal = true; c.gain_keys = 500; c.key_gain = 64.f; c.nheads = 2; c.nheads_k = 2; });
  // The Table 2 ablation kernel (no intra-warpgroup overlap, the default 176-key d128 tile) serves
  // every length and mask: ragged causal and windowed.
  add([](FwdCase& c) { c.no_overlap = true; c.seqlen_q = 300; c.seqlen_k = 517; c.causal = true; });
  add([](FwdCase& c) { c.no_overlap = true; c.seqlen_q = 190; c.seqlen_k = 2200; c.window_left = 200; c.window_right = 10; });
  // The ablation kernel without warp specialization (bf16 d128; a consumer thread issues the
  // loads, tiles in a fixed stride): dense with several tiles per CTA and 66 key blocks per tile,
  // ragged causal whose last tile's second warpgroup idles, GQA with a window, varlen with an
  // empty sequence, and keys scaled up where the walk reaches them last.
  add([](FwdCase& c) { c.no_ws = true; c.seqlen_q = 256; c.seqlen_k = 8448; c.nheads = 2; c.nheads_k = 2; c.max_ctas = 3; });
  add([](FwdCase& c) { c.no_ws = true; c.seqlen_q = 300; c.seqlen_k = 517; c.causal = true; c.max_ctas = 2; });
  add([](FwdCase& c) { c.no_ws = true; c.seqlen_q = 190; c.seqlen_k = 2200; c.nheads = 8; c.nheads_k = 2; c.window_left = 200; c.window_right = 10; });
  add([](FwdCase& c) { c.no_ws = true; c.varlen_q = {129, 300, 17, 250}; c.varlen_k = {400, 300, 260, 0}; c.causal = true; c.max_ctas = 2; });
  add([](FwdCase& c) { c.no_ws = true; c.seqlen_q = 200; c.seqlen_k = 600; c.gain_keys = 200; c.key_gain = 64.f; });
  // FwdTuning::disable_cluster on a problem that would run in 2-CTA clusters.
  add([](FwdCase& c) { c.no_cluster = true; c.head_dim = 256; c.seqlen_q = 512; c.seqlen_k = 700; c.max_ctas = 3; });
  // Without the pingpong token (Table 2's other switch): the two- and three-warpgroup kernels.
  add([](FwdCase& c) { c.no_pingpong = true; c.seqlen_q = 300; c.seqlen_k = 517; c.causal = true; });
  add([](FwdCase& c) { c.no_pingpong = true; c.head_dim = 64; c.seqlen_q = 1000; c.seqlen_k = 1100; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.no_pingpong = true; c.no_overlap = true; c.varlen_q = {129, 300, 17}; c.varlen_k = {200, 300, 1}; c.causal = true; });
  add([](FwdCase& c) { c.no_pingpong = true; c.head_dim = 256; c.seqlen_q = 200; c.seqlen_k = 500; c.window_left = 100; });
  // Experiment knobs (FwdTuning): each d128 kernel forced onto problems the dispatcher gives
  // another one, and L2 sections smaller than the heads (the tile order changes, not the result).
  add([](FwdCase& c) { c.force_kernel = "fwd_sm90_bf16_hd128_staged"; c.seqlen_q = 300; c.seqlen_k = 4500; c.causal = true; });
  // The staged kernels with many tiles per CTA (each warpgroup reuses its O buffer), and varlen
  // tiles whose boxes would cross into the next sequence (register stores).
  add([](FwdCase& c) { c.seqlen_q = 700; c.seqlen_k = 700; c.causal = true; c.max_ctas = 3; });
  add([](FwdCase& c) { c.head_dim = 96; c.varlen_q = {129, 300, 17, 250}; c.varlen_k = {400, 300, 260, 0}; c.max_ctas = 2; });
  // The kernels with one Q buffer (d128's 176-key kernel, d192, d256) with many tiles per CTA,
  // varlen sequences, one without keys (no Q is loaded for its tiles) and one of 17 rows (the second
  // warpgroup idles). Added for an epilogue that staged O in that buffer (session 35, not adopted:
  // docs/experiments/fwd-output-staged-in-q.patch); since session 42 they run the V-ring epilogue
  // (FwdTraits::kOutputInVRing), its register fallback for boxes that cross sequences included.
  add([](FwdCase& c) { c.head_dim = 256; c.varlen_q = {129, 300, 17, 250}; c.varlen_k = {400, 300, 260, 0}; c.max_ctas = 2; });
  add([](FwdCase& c) { c.head_dim = 192; c.seqlen_q = 700; c.seqlen_k = 700; c.causal = true; c.max_ctas = 3; });
  // The V-ring epilogue (d128's 176-key kernel, d192, d256): dense ragged tiles whose second
  // warpgroup idles (rows 320.. of 300) between full ones, several per CTA, fp16 output; and tiles
  // of one key block, which start on either V stage (the producer's split wait must not apply).
  add([](FwdCase& c) { c.head_dim = 256; c.seqlen_q = 300; c.seqlen_k = 700; c.causal = true; c.nheads = 3; c.nheads_k = 3; c.max_ctas = 2; });
  add([](FwdCase& c) { c.head_dim = 256; c.dtype = DType::kFloat16; c.seqlen_q = 1000; c.seqlen_k = 333; c.nheads = 2; c.nheads_k = 1; c.max_ctas = 3; });
  add([](FwdCase& c) { c.head_dim = 256; c.seqlen_q = 1500; c.seqlen_k = 70; c.nheads = 2; c.nheads_k = 2; c.max_ctas = 2; });
  add([](FwdCase& c) { c.head_dim = 192; c.seqlen_q = 1500; c.seqlen_k = 90; c.nheads = 2; c.nheads_k = 1; c.max_ctas = 2; });
  add([](FwdCase& c) {
    c.force_kernel = "fwd_sm90_bf16_hd128";
    c.varlen_q = {129, 300, 17, 250};
    c.varlen_k = {400, 300, 260, 0};
    c.causal = true;
    c.max_ctas = 2;
  });
  add([](FwdCase& c) { c.force_kernel = "fwd_sm90_bf16_hd128_masked"; c.seqlen_q = 333; c.seqlen_k = 517; });
  add([](FwdCase& c) { c.force_kernel = "fwd_sm90_bf16_hd128"; c.seqlen_q = 1000; c.seqlen_k = 1000; c.causal = true; });
  add([](FwdCase& c) { c.l2_section_pairs = 1; c.batch = 3; c.seqlen_q = 700; c.causal = true; });
  add([](FwdCase& c) { c.l2_section_pairs = 3; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 500; c.seqlen_k = 900; });
  // Keys that jump far above the row offsets kept so far (AttnCase::gain_keys): gain 8 makes
  // max-free blocks lift their offsets, gain 64 overflows their exps and forces the score
  // recompute from global memory (OnlineSoftmax, Consumer::recompute_scores), in every kernel.
  add([](FwdCase& c) { c.seqlen_q = 300; c.seqlen_k = 700; c.gain_keys = 256; c.key_gain = 8.f; });
  add([](FwdCase& c) { c.seqlen_q = 300; c.seqlen_k = 700; c.gain_keys = 300; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.dtype = DType::kFloat16; c.seqlen_q = 300; c.seqlen_k = 700; c.gain_keys = 300; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.force_kernel = "fwd_sm90_bf16_hd128"; c.nheads = 8; c.nheads_k = 2; c.seqlen_q = 257; c.seqlen_k = 2500; c.gain_keys = 130; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.force_kernel = "fwd_sm90_bf16_hd128_masked"; c.nheads = 2; c.nheads_k = 2; c.seqlen_q = 1100; c.seqlen_k = 2100; c.causal = true; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.varlen_q = {129, 300, 17}; c.varlen_k = {400, 300, 260}; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.softcap = 30.f; c.seqlen_q = 200; c.seqlen_k = 600; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.no_overlap = true; c.seqlen_q = 200; c.seqlen_k = 600; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 200; c.seqlen_k = 500; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.head_dim = 64; c.seqlen_q = 700; c.seqlen_k = 700; c.causal = true; c.gain_keys = 200; c.key_gain = 8.f; });
  add([](FwdCase& c) { c.head_dim = 96; c.seqlen_q = 200; c.seqlen_k = 500; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.head_dim = 192; c.seqlen_q = 200; c.seqlen_k = 500; c.gain_keys = 200; c.key_gain = 64.f; });
  add([](FwdCase& c) { c.head_dim = 256; c.seqlen_q = 200; c.seqlen_k = 500; c.gain_keys = 200; c.key_gain = 8.f; });
  add([](FwdCase& c) { c.head_dim = 256; c.seqlen_q = 200; c.seqlen_k = 500; c.gain_keys = 200; c.key_gain = 64.f; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Coverage, FwdTest, ::testing::ValuesIn(coverage()),
                         [](const ::testing::TestParamInfo<FwdCase>& info) { return info.param.name(); });
// Combinations of the options above that the list does not name (common/random_cases.hpp).
INSTANTIATE_TEST_SUITE_P(RandomSweep, FwdTest,
                         ::testing::ValuesIn(random_cases(SweepDirection::kForward, 32, 24)),
                         [](const ::testing::TestParamInfo<FwdCase>& info) { return sweep_case_name(info); });

}  // namespace
}  // namespace hopattn::testing
