// FP8 (e4m3) forward against the float64 reference of the dequantized inputs.
//
// Inputs are N(0,1) values quantized on the host (per (batch, kv head) descales, optionally with
// block descales on top); the reference sees exactly code * descale. The kernel's own error comes
// from rounding P (in [0, 2^8]: kMaxLag) to e4m3 before P V; everything else is fp32 (S from exact e4m3
// products, the softmax, the row sums of the unrounded P) plus the bf16/fp16 output rounding.
// Rounding x to e4m3 (3 mantissa bits, subnormal spacing 2^-9) errs by at most
// max(2^-4 |x|, 2^-10). A P entry of the online softmax is p * e^(m_final - m_running) >= p, and
// its error is scaled back by e^(m_running - m_final) <= 1, so with l = sum_j p_j:
//   |O_c - O_ref_c| <= sum_j max(2^-4 p_j, 2^-10) |v_jc| / l            (P to e4m3)
//                    + 2^-8 |O_ref_c|                                    (output rounding, fp16 or bf16)
//                    + 1e-3 sum_j p_j |v_jc| / l + 1e-5                  (score error, exp2.approx)
// which this test checks for every output element; the "1e-3" is in fact the score error below.
// FP8 WGMMA does not accumulate in full fp32: Hopper's FP8 tensor cores keep about 14 bits of
// the running sum, so each of the d / 32 k-slices of S = Q K^T that adds into the accumulator
// may drop up to 2^-13 of the running sum, at most sum_d |q_d k_d| (measured: LSE errors of 1e-4
// to 5e-4 at d = 128). Row i's score error is bounded by
//   s_err_i = (d / 32) * 2^-13 * scale * max_j sum_d |q_id k_jd|
// (2^-12 at d = 64, 2^-11 at d = 128, 2^-10 at d = 256, where session 33's random sweep measured
// an LSE 0.016 off, beyond the 2^-12 this bound used at every head dim before), which enters O as
// s_err_i * sum_j p_j |v_jc| / l (relative error of each p_j) and LSE directly. Outputs are
// poisoned before each run and two runs must give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

struct Fp8Case {
  AttnCase a;
  int q_block_rows = 0;   // 0: no block descales
  int kv_block_rows = 0;  // 0: no block descales
  bool out_fp16 = false;
  int ctas_per_cluster = 0;  // > 0: Plan::ctas_per_cluster must be this (not part of the name)
  std::string name() const {
    std::string s = a.name();
    if (q_block_rows) s += "_qblk" + std::to_string(q_block_rows);
    if (kv_block_rows) s += "_kvblk" + std::to_string(kv_block_rows);
    if (out_fp16) s += "_outfp16";
    return s;
  }
};
inline void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name(); }

// Host quantization of one packed (rows, heads, dim) tensor: values become e4m3 codes times
// tensor[b, head / group] * block[b, head, row / block_rows] (block may be empty).
struct Quantized {
  std::vector<double> codes, dequant;
  std::vector<float> tensor, block;  // (batch, heads / group), (batch, heads, blocks)
  int num_blocks = 0;
};

Quantized quantize(const ref::Problem& prob, const std::vector<double>& x, bool is_q, int heads, int block_rows) {
  const int D = prob.head_dim, group = is_q ? prob.nheads / prob.nheads_k : 1;
  const int heads_t = heads / group;
  const auto& cu = is_q ? prob.cu_seqlens_q : prob.cu_seqlens_k;
  Quantized r;
  r.codes.resize(x.size());
  r.dequant.resize(x.size());
  r.tensor.assign(size_t(prob.batch) * heads_t, 1.f);
  int max_len = 0;
  for (int b = 0; b < prob.batch; ++b) max_len = std::max(max_len, cu[b + 1] - cu[b]);
  r.num_blocks = block_rows > 0 ? (max_len + block_rows - 1) / block_rows : 0;
  if (block_rows > 0) r.block.assign(size_t(prob.batch) * heads * r.num_blocks, 1.f);
  auto at = [&](int row, int h, int d) { return (size_t(row) * heads + h) * D + d; };
  for (int b = 0; b < prob.batch; ++b) {
    const int len = cu[b + 1] - cu[b];
    for (int ht = 0; ht < heads_t; ++ht) {
      double amax = 0;
      for (int h = ht * group; h < (ht + 1) * group; ++h)
        for (int s = 0; s < len; ++s)
          for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[at(cu[b] + s, h, d)]));
      const float t = amax > 0 ? float(amax / 448.0) : 1.f;
      r.tensor[size_t(b) * heads_t + ht] = t;
      for (int h = ht * group; h < (ht + 1) * group; ++h) {
        for (int blk = 0; blk < std::max(r.num_blocks, 1); ++blk) {
          const int s0 = block_rows > 0 ? blk * block_rows : 0, s1 = block_rows > 0 ? std::min(len, s0 + block_rows) : len;
          float bs = 1.f;
          if (block_rows > 0) {
            double bmax = 0;
            for (int s = s0; s < s1; ++s)
              for (int d = 0; d < D; ++d) bmax = std::max(bmax, std::fabs(x[at(cu[b] + s, h, d)]));
            bs = bmax > 0 ? float(bmax / amax) : 0.f;  // 0: an all-zero block
            r.block[(size_t(b) * heads + h) * r.num_blocks + blk] = bs;
          }
          const double scale = double(t) * double(bs);
          for (int s = s0; s < s1; ++s)
            for (int d = 0; d < D; ++d) {
              const size_t i = at(cu[b] + s, h, d);
              const double code = scale > 0 ? ref::round_to_e4m3(x[i] / scale) : 0.0;
              r.codes[i] = code;
              r.dequant[i] = code * scale;
            }
        }
      }
    }
  }
  return r;
}

// The per-element error bound of the file comment, from float64 scores; max_s_err receives the
// largest score error bound of any row (the LSE tolerance).
std::vector<double> fp8_bound(const ref::Problem& prob, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& out_ref, double& max_s_err) {
  const int D = prob.head_dim, H = prob.nheads, Hk = prob.nheads_k, group = H / Hk;
  std::vector<double> bound(out_ref.size());
  max_s_err = 0;
  std::vector<double> p;
  for (int b = 0; b < prob.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < prob.seqlen_q(b); ++i) {
        const ref::KeyRange kr = ref::visible_keys(prob, b, i);
        const size_t qrow = size_t(prob.cu_seqlens_q[b] + i);
        p.assign(std::max(kr.size(), 0), 0.0);
        double m = -INFINITY, abs_dot = 0;
        for (int j = kr.lo; j <= kr.hi; ++j) {
          const size_t krow = size_t(prob.cu_seqlens_k[b] + j);
          double s = 0, a = 0;
          for (int d = 0; d < D; ++d) {
            const double prod = q[(qrow * H + h) * D + d] * k[(krow * Hk + h / group) * D + d];
            s += prod;
            a += std::fabs(prod);
          }
          abs_dot = std::max(abs_dot, a);
          s *= prob.scale();
          if (prob.softcap > 0) s = prob.softcap * std::tanh(s / prob.softcap);
          p[j - kr.lo] = s;
          m = std::max(m, s);
        }
        const double s_err = (D / 32) * 0x1p-13 * std::fabs(prob.scale()) * abs_dot;
        max_s_err = std::max(max_s_err, s_err);
        double l = 0;
        for (double& x : p) l += (x = std::exp(x - m));
        for (int d = 0; d < D; ++d) {
          double quant = 0, mass = 0;
          for (int j = kr.lo; j <= kr.hi; ++j) {
            const size_t krow = size_t(prob.cu_seqlens_k[b] + j);
            const double vj = std::fabs(v[(krow * Hk + h / group) * D + d]), pj = p[j - kr.lo];
            quant += std::max(pj * 0x1p-4, 0x1p-10) * vj;
            mass += pj * vj;
          }
          const size_t o = (qrow * H + h) * D + d;
          bound[o] = l > 0 ? (quant + (s_err + 1e-4) * mass) / l + 0x1p-8 * std::fabs(out_ref[o]) + 1e-5 : 1e-5;
        }
      }
  return bound;
}

DeviceBuffer upload_floats(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float) + 16);
  if (!v.empty() && cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("upload failed");
  return b;
}

class Fp8FwdTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8FwdTest, WithinE4m3RoundingBound) {
  HT_REQUIRE_HOPPER();
  const Fp8Case fc = GetParam();
  const AttnCase& c = fc.a;
  const ref::Problem prob = make_problem(c);
  const int tq = prob.total_q(), tk = prob.total_k();
  const uint64_t seed = std::hash<std::string>{}(fc.name());
  std::vector<double> xq(size_t(tq) * c.nheads * c.head_dim), xk(size_t(tk) * c.nheads_k * c.head_dim), xv(xk.size());
  ref::fill_random(xq, seed + 1);
  ref::fill_random(xk, seed + 2);
  ref::fill_random(xv, seed + 3);
  apply_key_gain(c, prob, xk);
  const Quantized q = quantize(prob, xq, true, c.nheads, fc.q_block_rows);
  const Quantized k = quantize(prob, xk, false, c.nheads_k, fc.kv_block_rows);
  const Quantized v = quantize(prob, xv, false, c.nheads_k, fc.kv_block_rows);

  const int64_t B = c.varlen() ? tq : c.batch, Sq = c.varlen() ? 0 : c.seqlen_q;
  const int64_t Bk = c.varlen() ? tk : c.batch, Sk = c.varlen() ? 0 : c.seqlen_k;
  const DType out_dt = fc.out_fp16 ? DType::kFloat16 : DType::kBFloat16;
  DeviceTensor dq = make_input(c, DType::kFloat8E4M3, B, Sq, c.nheads, c.head_dim);
  DeviceTensor dk = make_input(c, DType::kFloat8E4M3, Bk, Sk, c.nheads_k, c.head_dim);
  DeviceTensor dv = make_input(c, DType::kFloat8E4M3, Bk, Sk, c.nheads_k, c.head_dim);
  DeviceTensor dout = make_input(c, out_dt, B, Sq, c.nheads, c.head_dim);
  DeviceTensor dlse = c.varlen() ? DeviceTensor::contiguous(DType::kFloat32, {c.nheads, tq})
                                 : DeviceTensor::contiguous(DType::kFloat32, {c.batch, c.nheads, c.seqlen_q});
  dq.upload(q.codes);
  dk.upload(k.codes);
  dv.upload(v.codes);
  DeviceBuffer qd = upload_floats(q.tensor), kd = upload_floats(k.tensor), vd = upload_floats(v.tensor);
  DeviceBuffer qb = upload_floats(q.block), kb = upload_floats(k.block), vb = upload_floats(v.block);

  FwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.lse = dlse.view;
  p.softmax_scale = c.softmax_scale;
  p.mask = {c.causal, c.window_left, c.window_right};
  p.softcap = c.softcap;
  if (!c.force_kernel.empty()) p.tuning.kernel = c.force_kernel.c_str();
  p.tuning.disable_cluster = c.no_cluster;
  p.q_descale = static_cast<const float*>(qd.get());
  p.k_descale = static_cast<const float*>(kd.get());
  p.v_descale = static_cast<const float*>(vd.get());
  if (fc.q_block_rows > 0) {
    p.block_descale.q = make_contiguous_view(qb.get(), DType::kFloat32, {c.batch, c.nheads, q.num_blocks});
    p.block_descale.q_block_rows = fc.q_block_rows;
  }
  if (fc.kv_block_rows > 0) {
    p.block_descale.k = make_contiguous_view(kb.get(), DType::kFloat32, {c.batch, c.nheads_k, k.num_blocks});
    p.block_descale.v = make_contiguous_view(vb.get(), DType::kFloat32, {c.batch, c.nheads_k, v.num_blocks});
    p.block_descale.kv_block_rows = fc.kv_block_rows;
  }
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
  if (fc.ctas_per_cluster > 0) EXPECT_EQ(plan.ctas_per_cluster, fc.ctas_per_cluster) << plan.kernel;
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

  const ref::FwdResult want = ref::forward(prob, q.dequant, k.dequant, v.dequant);
  double max_s_err = 0;
  const std::vector<double> bound = fp8_bound(prob, q.dequant, k.dequant, v.dequant, want.out, max_s_err);
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double err = std::fabs(out[i] - want.out[i]);
    const double ratio = std::isfinite(err) ? err / bound[i] : INFINITY;
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; }
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << out.size() << " outputs outside the e4m3 bound; worst at " << worst
                     << ": kernel " << out[worst] << " ref " << want.out[worst] << " bound " << bound[worst];
  const auto want_lse = c.varlen() ? want.lse : ref::lse_packed_to_dense(prob, want.lse);
  const auto cmp_lse = ref::compare_lse(lse, want_lse, ref::lse_abs_tol(c.softcap) + max_s_err);
  EXPECT_TRUE(cmp_lse.ok) << "lse: " << cmp_lse.describe();
  // The bound must not be vacuous: typical errors sit well inside it.
  EXPECT_LT(worst_ratio, 1.0);

  run();
  EXPECT_TRUE(dout.raw() == out_raw) << "out differs between two runs";
}

std::vector<Fp8Case> coverage() {
  std::vector<Fp8Case> cases;
  for (int d : {64, 128, 256}) {
    Fp8Case c;
    c.a.dtype = DType::kFloat8E4M3;
    c.a.head_dim = d;
    cases.push_back(c);
    Fp8Case cc = c; cc.a.causal = true; cases.push_back(cc);
    Fp8Case r = c; r.a.batch = 1; r.a.seqlen_q = 300; r.a.seqlen_k = 517; r.a.causal = true; cases.push_back(r);
    Fp8Case g = c; g.a.nheads = 8; g.a.nheads_k = 2; g.a.seqlen_q = 200; g.a.seqlen_k = 333; cases.push_back(g);
    Fp8Case bq = c; bq.a.seqlen_q = 300; bq.a.seqlen_k = 700; bq.q_block_rows = 64; bq.kv_block_rows = 128; cases.push_back(bq);
  }
  Fp8Case base;
  base.a.dtype = DType::kFloat8E4M3;
  auto add = [&](auto&& edit) { Fp8Case c = base; edit(c); cases.push_back(c); };
  add([](Fp8Case& c) { c.a.seqlen_q = 1; c.a.seqlen_k = 1; });
  add([](Fp8Case& c) { c.a.seqlen_q = 1000; c.a.seqlen_k = 10; c.a.causal = true; });  // rows with no key
  add([](Fp8Case& c) { c.a.nheads = 8; c.a.nheads_k = 1; c.a.seqlen_q = 190; c.a.causal = true; });  // MQA
  add([](Fp8Case& c) { c.a.window_left = 100; c.a.window_right = 30; c.a.seqlen_q = 500; c.a.seqlen_k = 700; });
  add([](Fp8Case& c) { c.a.softcap = 30.f; c.a.seqlen_q = 300; });
  add([](Fp8Case& c) { c.a.softmax_scale = 0.5f; c.a.seqlen_q = 130; c.out_fp16 = true; });
  // Row maxima jumping past OnlineSoftmax::kMaxLag over many blocks (probabilities up to 2^8
  // before the e4m3 conversion), with per-tensor and with block descales (O rescaled by V's
  // block ratio even where the maxima are kept).
  add([](Fp8Case& c) { c.a.softmax_scale = 1.f; c.a.seqlen_q = 200; c.a.seqlen_k = 1500; });
  add([](Fp8Case& c) { c.a.softmax_scale = 0.3f; c.a.seqlen_q = 300; c.a.seqlen_k = 1100; c.kv_block_rows = 256; });
  add([](Fp8Case& c) { c.a.row_pad = 16; c.a.seqlen_q = 190; c.a.seqlen_k = 257; });
  add([](Fp8Case& c) { c.a.varlen_q = {100, 0, 257, 1}; c.a.varlen_k = {64, 5, 300, 0}; });
  add([](Fp8Case& c) { c.a.varlen_q = {129, 300, 17}; c.a.varlen_k = {200, 300, 1}; c.a.causal = true; });
  add([](Fp8Case& c) { c.a.seqlen_q = 1024; c.a.seqlen_k = 1024; c.a.causal = true; c.q_block_rows = 100; c.kv_block_rows = 256; });
  add([](Fp8Case& c) { c.a.seqlen_q = 513; c.a.seqlen_k = 1000; c.a.nheads = 8; c.a.nheads_k = 2; c.kv_block_rows = 128; c.out_fp16 = true; });
  // Scores of the blocks visited last far above the offsets kept from the first: by 2^8 to 2^128
  // in the exp2 domain (the offsets are lifted by a power of two), and beyond 2^128 (the exps
  // overflow and the block's scores are recomputed from the codes in global memory: on warp MMAs
  // in d256 and per element in d64 and d128 by default; HOPATTN_EXP_RECOMPUTE_MMA in
  // traits_fp8.hpp changes it). Per-tensor and block descales, causal, GQA, varlen, d64 (both
  // kernels) and d256 cases.
  add([](Fp8Case& c) { c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 256; c.a.key_gain = 4.f; });
  add([](Fp8Case& c) { c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 256; c.a.key_gain = 4.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 300; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.seqlen_q = 700; c.a.seqlen_k = 700; c.a.causal = true; c.a.gain_keys = 200; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.nheads = 8; c.a.nheads_k = 2; c.a.seqlen_q = 257; c.a.seqlen_k = 600; c.a.gain_keys = 130; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.varlen_q = {129, 300, 17}; c.a.varlen_k = {400, 300, 260}; c.a.gain_keys = 200; c.a.key_gain = 64.f; });
  add([](Fp8Case& c) { c.a.head_dim = 64; c.a.seqlen_q = 200; c.a.seqlen_k = 500; c.a.gain_keys = 200; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.head_dim = 256; c.a.seqlen_q = 200; c.a.seqlen_k = 500; c.a.gain_keys = 200; c.a.key_gain = 8.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.head_dim = 256; c.a.seqlen_q = 200; c.a.seqlen_k = 500; c.a.gain_keys = 200; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([](Fp8Case& c) { c.a.head_dim = 256; c.a.nheads = 4; c.a.nheads_k = 2; c.a.varlen_q = {129, 300, 17}; c.a.varlen_k = {400, 300, 260}; c.a.gain_keys = 200; c.a.key_gain = 64.f; });
  // d64 has two kernels (192-row tiles with three consumer warpgroups; 128-row tiles for short
  // causal problems): each on the other's problems. 1000 = 5 x 192 + 40 leaves warpgroups idle.
  const std::string d64 = "fwd_sm90_e4m3_hd64", d64_masked = "fwd_sm90_e4m3_hd64_masked";
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64; c.a.seqlen_q = 1000; c.a.seqlen_k = 1000; c.a.causal = true; c.a.nheads = 8; c.a.nheads_k = 2; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64; c.a.batch = 1; c.a.seqlen_q = 300; c.a.seqlen_k = 517; c.a.causal = true; c.q_block_rows = 100; c.kv_block_rows = 128; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64; c.a.varlen_q = {129, 300, 17}; c.a.varlen_k = {200, 300, 1}; c.a.causal = true; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64; c.a.window_left = 100; c.a.window_right = 30; c.a.seqlen_q = 500; c.a.seqlen_k = 700; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64; c.a.seqlen_q = 1100; c.a.seqlen_k = 1100; c.a.causal = true; c.a.gain_keys = 200; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64_masked; c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 256; c.a.key_gain = 4.f; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64_masked; c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 300; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.force_kernel = d64_masked; c.a.seqlen_q = 333; c.a.seqlen_k = 2100; c.a.nheads = 8; c.a.nheads_k = 1; c.out_fp16 = true; });
  // Staged outputs (O through shared memory and TMA stores): d128's short-key kernel (up to 4096
  // keys) and d256's kernel, whose buffer is the V^T ring (the transposers refill it only after
  // the stores have read it; one store first, the other before the tile's second V^T, so tiles of
  // one block and of several): many tiles per CTA (max_ctas), tiles whose second warpgroup's box
  // is clipped or crosses into the next varlen sequence (register stores), fp16 output, a window
  // (one key block per tile); d128's two kernels forced onto each other's problems.
  for (int d : {128, 256}) {
    add([&](Fp8Case& c) { c.a.head_dim = d; c.a.seqlen_q = 700; c.a.seqlen_k = 700; c.a.causal = true; c.a.max_ctas = 3; });
    add([&](Fp8Case& c) { c.a.head_dim = d; c.a.seqlen_q = 200; c.a.seqlen_k = 600; c.a.max_ctas = 2; c.kv_block_rows = 128; });
    add([&](Fp8Case& c) { c.a.head_dim = d; c.a.varlen_q = {129, 300, 17, 250}; c.a.varlen_k = {400, 300, 260, 0}; c.a.max_ctas = 2; });
    add([&](Fp8Case& c) { c.a.head_dim = d; c.a.seqlen_q = 513; c.a.seqlen_k = 1000; c.a.nheads = 8; c.a.nheads_k = 2; c.a.max_ctas = 5; c.out_fp16 = true; });
    add([&](Fp8Case& c) { c.a.head_dim = d; c.a.seqlen_q = 600; c.a.seqlen_k = 600; c.a.window_left = 60; c.a.window_right = 0; c.a.max_ctas = 2; });
  }
  // 2-CTA clusters (d256 only, dense, no mask, an even number of query blocks): both
  // CTAs load half of every K and staged V block for the pair; many pairs per cluster (max_ctas),
  // an odd number of key blocks, block descales, the V^T-ring epilogue across the pair's tiles.
  // The d128 and d64 shapes (GQA, fp16 output, 192-row tiles) run without clusters, as these
  // head dims do, and were run clustered when session 44 measured them.
  add([&](Fp8Case& c) { c.a.head_dim = 256; c.a.seqlen_q = 1024; c.a.seqlen_k = 1100; c.a.max_ctas = 4; c.q_block_rows = 64; c.kv_block_rows = 128; c.ctas_per_cluster = 2; });
  add([&](Fp8Case& c) { c.a.head_dim = 256; c.a.seqlen_q = 512; c.a.seqlen_k = 129; c.a.nheads = 8; c.a.nheads_k = 2; c.a.max_ctas = 2; c.out_fp16 = true; c.ctas_per_cluster = 2; });
  add([&](Fp8Case& c) { c.a.head_dim = 256; c.a.seqlen_q = 512; c.a.seqlen_k = 300; c.a.max_ctas = 3; c.a.no_cluster = true; c.ctas_per_cluster = 1; });
  add([&](Fp8Case& c) { c.a.head_dim = 128; c.a.seqlen_q = 512; c.a.seqlen_k = 1100; c.a.nheads = 8; c.a.nheads_k = 2; c.a.max_ctas = 6; c.out_fp16 = true; c.ctas_per_cluster = 1; });
  add([&](Fp8Case& c) { c.a.head_dim = 64; c.a.seqlen_q = 768; c.a.seqlen_k = 700; c.a.max_ctas = 2; c.kv_block_rows = 256; });
  // d128's register-store kernel serves every problem past 4096 keys: one there, and forced onto
  // shorter ones with the options the coverage above now gives the staged kernel (varlen, score
  // recompute with block descales, softcap, window with fp16 output).
  const std::string d128 = "fwd_sm90_e4m3_hd128";
  add([&](Fp8Case& c) { c.a.force_kernel = d128 + "_staged"; c.a.seqlen_q = 300; c.a.seqlen_k = 4500; c.a.causal = true; });
  add([&](Fp8Case& c) { c.a.seqlen_q = 200; c.a.seqlen_k = 4300; c.a.nheads = 4; c.a.nheads_k = 2; c.kv_block_rows = 256; });
  add([&](Fp8Case& c) { c.a.force_kernel = d128; c.a.seqlen_q = 300; c.a.seqlen_k = 517; c.a.causal = true; c.a.max_ctas = 2; });
  add([&](Fp8Case& c) { c.a.force_kernel = d128; c.a.varlen_q = {129, 300, 17}; c.a.varlen_k = {200, 300, 1}; c.a.causal = true; });
  add([&](Fp8Case& c) { c.a.force_kernel = d128; c.a.seqlen_q = 300; c.a.seqlen_k = 700; c.a.gain_keys = 300; c.a.key_gain = 64.f; c.kv_block_rows = 128; });
  add([&](Fp8Case& c) { c.a.force_kernel = d128; c.a.softcap = 30.f; c.a.seqlen_q = 300; });
  add([&](Fp8Case& c) { c.a.force_kernel = d128; c.a.window_left = 100; c.a.window_right = 30; c.a.seqlen_q = 500; c.a.seqlen_k = 700; c.out_fp16 = true; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Coverage, Fp8FwdTest, ::testing::ValuesIn(coverage()),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) { return info.param.name(); });

// The random sweep's FP8 draws (common/random_cases.hpp), with descale options drawn on top from
// a generator of their own: besides the per-tensor descales, block descales for Q blocks of any
// row count and for K/V blocks of one or two key tiles (the planner's rule), and fp16 output.
// Block descales with variable length are not supported: those draws check that the API says so
// (the test skips on kNotSupported).
std::vector<Fp8Case> random_fp8_cases(uint64_t default_seed, int default_count) {
  std::mt19937_64 rng(sweep_env("HOPATTN_SWEEP_SEED", default_seed) + 100);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  std::vector<Fp8Case> cases;
  for (const AttnCase& a : random_cases(SweepDirection::kForwardFp8, default_seed, default_count)) {
    Fp8Case c;
    c.a = a;
    if (chance(0.3)) c.q_block_rows = pick(1, 256);
    if (chance(0.3)) c.kv_block_rows = 128 * pick(1, 2);
    c.out_fp16 = chance(0.3);
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(RandomSweep, Fp8FwdTest, ::testing::ValuesIn(random_fp8_cases(32, 24)),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) { return sweep_case_name(info); });

// A K/V scale block must cover whole key tiles; the planner says which multiple it needs.
TEST(Fp8FwdValidation, KvBlockRowsMustBeAWholeNumberOfKeyTiles) {
  HT_REQUIRE_HOPPER();
  DeviceTensor q = DeviceTensor::contiguous(DType::kFloat8E4M3, {1, 256, 2, 128});
  DeviceTensor k = DeviceTensor::contiguous(DType::kFloat8E4M3, {1, 256, 2, 128});
  DeviceTensor v = DeviceTensor::contiguous(DType::kFloat8E4M3, {1, 256, 2, 128});
  DeviceTensor o = DeviceTensor::contiguous(DType::kBFloat16, {1, 256, 2, 128});
  DeviceTensor kb = DeviceTensor::contiguous(DType::kFloat32, {1, 2, 4});
  FwdParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = o.view;
  p.block_descale.k = kb.view;
  p.block_descale.kv_block_rows = 64;
  try {
    plan_fwd(p, query_device());
    FAIL() << "kv_block_rows = 64 was accepted";
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotSupported) GTEST_SKIP() << "no FP8 kernel in this build: " << e.what();
    EXPECT_NE(std::string(e.what()).find("block_descale.kv_block_rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hopattn::testing
