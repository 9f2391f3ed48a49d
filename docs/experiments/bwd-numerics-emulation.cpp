// CPU emulation of the backward's arithmetic for one random-sweep case (session 32), to first
// order: the forward's scores and sums in fp32 (modelled as exact sums rounded once),
// unnormalised exponentials rounded to the input dtype for P V, O normalised after P V and
// stored, D = rowsum(dO * O) from the stored O, P recomputed from the fp32 LSE and rounded, dS
// rounded, dQ and dK summed in fp32 and stored. (The kernel multiplies by 1/sum and uses exp2 of
// fp32 scores; for this case the emulation still reproduces its dQ and dK bit for bit.)
// Dense, causal, one head, no softcap or window: enough for the case it was written for,
// fp16_d192_b2_q63_k2_h1x1_causal_det (seed 11, draw 129), whose dQ and dK it reproduces bit for
// bit. It prints the emulation's and the two low-precision baselines' largest errors.
// Build (after a CMake build of the tests in BUILD; GoogleTest's headers from the system, or add
// -I.deps/googletest/googletest/include):
//   g++ -O2 -std=c++17 -DHOPATTN_VERSION='"x"' -Itests -Iinclude -Ireference/include -Isrc \
//     -I/usr/local/cuda/include docs/experiments/bwd-numerics-emulation.cpp src/api/types.cpp \
//     BUILD/reference/libhopattn_reference.a -o /tmp/emu && /tmp/emu 11 129
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/random_cases.hpp"

using namespace hopattn;
using namespace hopattn::testing;

namespace {
double f32(double x) { return double(float(x)); }
double max_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(a[i] - b[i]));
  return e;
}
}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 11;
  const int draw = argc > 2 ? std::atoi(argv[2]) : 129;
  const AttnCase c = random_cases(SweepDirection::kBackward, seed, draw + 1)[size_t(draw)];
  if (!c.causal || c.varlen() || c.nheads != 1 || c.nheads_k != 1 || c.softcap > 0 || c.window_left >= 0) {
    std::printf("%s: outside what this emulation covers\n", c.name().c_str());
    return 1;
  }
  const auto lowp = [&](double x) { return ref::round_to(c.dtype, x); };
  const ref::Problem prob = make_problem(c);
  const uint64_t s = std::hash<std::string>{}(c.name());  // the inputs of tests/gpu/test_bwd.cpp
  const auto q = random_input(prob.q_size(), s + 1, c.dtype), k = random_input(prob.k_size(), s + 2, c.dtype);
  const auto v = random_input(prob.v_size(), s + 3, c.dtype), dout = random_input(prob.out_size(), s + 4, c.dtype);
  const auto exact = ref::backward(prob, q, k, v, dout);
  const auto torch_form = ref::backward_lowp(prob, q, k, v, dout, c.dtype);
  const auto fa_form = ref::backward_lowp(prob, q, k, v, dout, c.dtype, ref::LowpDelta::kFromOutput);
  const int d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k;
  const double scale = prob.scale();
  std::vector<double> dq(exact.dq.size(), 0.0), dk_acc(exact.dk.size(), 0.0);
  for (int b = 0; b < c.batch; ++b) {
    const double* kb = &k[size_t(b) * sk * d];
    const double* vb = &v[size_t(b) * sk * d];
    for (int r = 0; r < sq; ++r) {
      const int keys = std::min(r + sk - sq, sk - 1) + 1;  // bottom-right causal
      if (keys <= 0) continue;
      const double* qr = &q[(size_t(b) * sq + r) * d];
      const double* dor = &dout[(size_t(b) * sq + r) * d];
      std::vector<double> sc(keys), e(keys), ds(keys);
      double m = -INFINITY, sum = 0;
      for (int j = 0; j < keys; ++j) {
        double acc = 0;
        for (int x = 0; x < d; ++x) acc += qr[x] * kb[size_t(j) * d + x];
        sc[j] = f32(f32(acc) * scale);
        m = std::max(m, sc[j]);
      }
      for (int j = 0; j < keys; ++j) sum += e[j] = f32(std::exp(sc[j] - m));
      sum = f32(sum);
      const double lse = f32(m + std::log(sum));
      double D = 0;
      for (int x = 0; x < d; ++x) {
        double o = 0;
        for (int j = 0; j < keys; ++j) o += lowp(e[j]) * vb[size_t(j) * d + x];
        D += dor[x] * lowp(f32(o) / sum);
      }
      D = f32(D);
      for (int j = 0; j < keys; ++j) {
        double dp = 0;
        for (int x = 0; x < d; ++x) dp += dor[x] * vb[size_t(j) * d + x];
        ds[j] = lowp(f32(lowp(f32(std::exp(sc[j] - lse))) * (f32(dp) - D)));
        for (int x = 0; x < d; ++x) dk_acc[(size_t(b) * sk + j) * d + x] += ds[j] * qr[x];
      }
      for (int x = 0; x < d; ++x) {
        double acc = 0;
        for (int j = 0; j < keys; ++j) acc += ds[j] * kb[size_t(j) * d + x];
        dq[(size_t(b) * sq + r) * d + x] = lowp(f32(acc) * scale);
      }
    }
  }
  std::vector<double> dk(dk_acc.size());
  for (size_t i = 0; i < dk.size(); ++i) dk[i] = lowp(f32(dk_acc[i]) * scale);
  std::printf("%s\n", c.name().c_str());
  std::printf("dq: emulation %.3g, PyTorch form %.3g, D-from-O form %.3g\n", max_err(dq, exact.dq),
              max_err(torch_form.dq, exact.dq), max_err(fa_form.dq, exact.dq));
  std::printf("dk: emulation %.3g, PyTorch form %.3g, D-from-O form %.3g\n", max_err(dk, exact.dk),
              max_err(torch_form.dk, exact.dk), max_err(fa_form.dk, exact.dk));
  return 0;
}
