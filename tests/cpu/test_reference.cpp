// The float64 attention reference against an independent naive formula and finite differences,
// the low-precision baseline, and the accuracy rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "hopattn_ref/accuracy.hpp"
#include "hopattn_ref/numeric.hpp"
#include "hopattn_ref/reference.hpp"

namespace {

using hopattn::DType;
using hopattn::MaskArgs;
using namespace hopattn::ref;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- An independent naive implementation --------------------------------------------------
// Explicit score matrix per (sequence, head), the mask written as a distance from the
// bottom-right-aligned diagonal, softmax through exp(s - lse) with lse = log(sum exp(s)).

bool naive_visible(int i, int j, int sq, int sk_used, const MaskArgs& m) {
  if (j >= sk_used) return false;
  const long dist = long(j) - (long(i) + sk_used - sq);  // > 0: right of the diagonal
  const int right = m.causal ? 0 : m.window_right;
  if (right != -1 && dist > right) return false;
  if (m.window_left != -1 && -dist > m.window_left) return false;
  return true;
}

struct Tensors {
  std::vector<double> q, k, v, dout;
};

Tensors random_tensors(const Problem& p, uint64_t seed) {
  Tensors t;
  t.q.resize(p.q_size());
  t.k.resize(p.k_size());
  t.v.resize(p.v_size());
  t.dout.resize(p.out_size());
  fill_random(t.q, seed);
  fill_random(t.k, seed + 1);
  fill_random(t.v, seed + 2);
  fill_random(t.dout, seed + 3);
  return t;
}

FwdResult naive_forward(const Problem& p, const std::vector<double>& q,
                        const std::vector<double>& k, const std::vector<double>& v) {
  const int H = p.nheads, Hk = p.nheads_k, d = p.head_dim, dv = p.head_dim_v;
  const double scale = p.softmax_scale != 0 ? p.softmax_scale : 1.0 / std::sqrt(double(d));
  const int tq = p.cu_seqlens_q.back();
  FwdResult r;
  r.out.assign(size_t(tq) * H * dv, 0.0);
  r.lse.assign(size_t(H) * tq, -kInf);
  for (int b = 0; b < p.batch; ++b) {
    const int q0 = p.cu_seqlens_q[b], sq = p.cu_seqlens_q[b + 1] - q0;
    const int k0 = p.cu_seqlens_k[b], sk = p.cu_seqlens_k[b + 1] - k0;
    const int used = p.seqused_k.empty() ? sk : p.seqused_k[b];
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / Hk);
      // S (sq x sk), -inf where masked.
      std::vector<std::vector<double>> S(size_t(sq), std::vector<double>(size_t(sk), -kInf));
      for (int i = 0; i < sq; ++i)
        for (int j = 0; j < sk; ++j) {
          if (!naive_visible(i, j, sq, used, p.mask)) continue;
          double s = 0;
          for (int c = 0; c < d; ++c)
            s += q[(size_t(q0 + i) * H + h) * d + c] * k[(size_t(k0 + j) * Hk + hk) * d + c];
          s *= scale;
          if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
          S[i][j] = s;
        }
      for (int i = 0; i < sq; ++i) {
        double z = 0;
        for (int j = 0; j < sk; ++j) z += std::exp(S[i][j]);  // exp(-inf) = 0
        if (z == 0) continue;                                 // no visible key
        const double lse = std::log(z);
        r.lse[size_t(h) * tq + q0 + i] = lse;
        for (int j = 0; j < sk; ++j) {
          const double pij = std::exp(S[i][j] - lse);
          for (int c = 0; c < dv; ++c)
            r.out[(size_t(q0 + i) * H + h) * dv + c] +=
                pij * v[(size_t(k0 + j) * Hk + hk) * dv + c];
        }
      }
    }
  }
  return r;
}

// Backward from explicit matrices, with D = rowsum(dO * O) taken literally.
BwdResult naive_backward(const Problem& p, const std::vector<double>& q,
                         const std::vector<double>& k, const std::vector<double>& v,
                         const std::vector<double>& dout) {
  const int H = p.nheads, Hk = p.nheads_k, d = p.head_dim, dv = p.head_dim_v;
  const double scale = p.softmax_scale != 0 ? p.softmax_scale : 1.0 / std::sqrt(double(d));
  const FwdResult f = naive_forward(p, q, k, v);
  const int tq = p.cu_seqlens_q.back();
  BwdResult g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(k.size(), 0.0);
  g.dv.assign(v.size(), 0.0);
  for (int b = 0; b < p.batch; ++b) {
    const int q0 = p.cu_seqlens_q[b], sq = p.cu_seqlens_q[b + 1] - q0;
    const int k0 = p.cu_seqlens_k[b], sk = p.cu_seqlens_k[b + 1] - k0;
    const int used = p.seqused_k.empty() ? sk : p.seqused_k[b];
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / Hk);
      for (int i = 0; i < sq; ++i) {
        const double lse = f.lse[size_t(h) * tq + q0 + i];
        if (lse == -kInf) continue;
        const double* qi = &q[(size_t(q0 + i) * H + h) * d];
        const double* oi = &f.out[(size_t(q0 + i) * H + h) * dv];
        const double* doi = &dout[(size_t(q0 + i) * H + h) * dv];
        double D = 0;
        for (int c = 0; c < dv; ++c) D += doi[c] * oi[c];
        for (int j = 0; j < sk; ++j) {
          if (!naive_visible(i, j, sq, used, p.mask)) continue;
          const double* kj = &k[(size_t(k0 + j) * Hk + hk) * d];
          const double* vj = &v[(size_t(k0 + j) * Hk + hk) * dv];
          double x = 0, dp = 0;
          for (int c = 0; c < d; ++c) x += qi[c] * kj[c];
          for (int c = 0; c < dv; ++c) dp += doi[c] * vj[c];
          double s = scale * x, dsdx = scale;
          if (p.softcap > 0) {
            const double t = std::tanh(s / p.softcap);
            s = p.softcap * t;
            dsdx *= 1.0 - t * t;
          }
          const double pij = std::exp(s - lse);
          const double dx = pij * (dp - D) * dsdx;  // gradient of q.k
          for (int c = 0; c < d; ++c) {
            g.dq[(size_t(q0 + i) * H + h) * d + c] += dx * kj[c];
            g.dk[(size_t(k0 + j) * Hk + hk) * d + c] += dx * qi[c];
          }
          for (int c = 0; c < dv; ++c) g.dv[(size_t(k0 + j) * Hk + hk) * dv + c] += pij * doi[c];
        }
      }
    }
  }
  return g;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << "at " << i;
      continue;
    }
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

int count_neg_inf(const std::vector<double>& a) {
  return int(std::count(a.begin(), a.end(), -kInf));
}

// Forward vs the naive formula; returns the result for further checks.
FwdResult check_forward(const Problem& p, uint64_t seed) {
  const Tensors t = random_tensors(p, seed);
  const FwdResult got = forward(p, t.q, t.k, t.v);
  const FwdResult want = naive_forward(p, t.q, t.k, t.v);
  EXPECT_LE(max_abs_diff(got.out, want.out), 1e-12);
  EXPECT_LE(max_abs_diff(got.lse, want.lse), 1e-12);
  EXPECT_EQ(count_neg_inf(got.lse), count_neg_inf(want.lse));
  return got;
}

Problem with_mask(Problem p, bool causal, int wl, int wr) {
  p.mask.causal = causal;
  p.mask.window_left = wl;
  p.mask.window_right = wr;
  return p;
}

// ---- Forward ------------------------------------------------------------------------------

TEST(ReferenceForward, Plain) {
  const FwdResult r = check_forward(dense_problem(2, 5, 7, 2, 2, 8), 1);
  EXPECT_EQ(count_neg_inf(r.lse), 0);
}

TEST(ReferenceForward, CausalSeqlenQLessThanK) {
  const Problem p = with_mask(dense_problem(2, 4, 9, 2, 1, 8), true, -1, -1);
  const FwdResult r = check_forward(p, 2);
  EXPECT_EQ(count_neg_inf(r.lse), 0);
}

TEST(ReferenceForward, CausalSeqlenQGreaterThanK) {
  // Bottom-right alignment: rows 0..4 of 9 queries over 4 keys see nothing.
  const Problem p = with_mask(dense_problem(2, 9, 4, 3, 3, 8), true, -1, -1);
  const FwdResult r = check_forward(p, 3);
  EXPECT_EQ(count_neg_inf(r.lse), 2 * 3 * 5);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 9; ++i) EXPECT_EQ(visible_keys(p, b, i).size(), std::max(0, i - 4));
}

TEST(ReferenceForward, CausalHandComputed) {
  // q = 0 makes every visible key equally likely: out = mean of visible v, lse = log(count).
  {
    Problem p = with_mask(dense_problem(1, 2, 3, 1, 1, 1), true, -1, -1);
    const FwdResult r = forward(p, {0, 0}, {1, 2, 3}, {10, 20, 40});
    // Row 0 sees keys 0,1 (diagonal shifted by 3 - 2 = 1); row 1 sees all three.
    EXPECT_DOUBLE_EQ(r.out[0], 15.0);
    EXPECT_DOUBLE_EQ(r.out[1], 70.0 / 3.0);
    EXPECT_DOUBLE_EQ(r.lse[0], std::log(2.0));
    EXPECT_DOUBLE_EQ(r.lse[1], std::log(3.0));
  }
  {
    Problem p = with_mask(dense_problem(1, 3, 2, 1, 1, 1), true, -1, -1);
    const FwdResult r = forward(p, {0, 0, 0}, {1, 2}, {10, 20});
    // Shift -1: row 0 sees nothing, row 1 key 0, row 2 keys 0,1.
    EXPECT_EQ(r.out[0], 0.0);
    EXPECT_EQ(r.lse[0], -kInf);
    EXPECT_DOUBLE_EQ(r.out[1], 10.0);
    EXPECT_DOUBLE_EQ(r.lse[1], 0.0);
    EXPECT_DOUBLE_EQ(r.out[2], 15.0);
    EXPECT_DOUBLE_EQ(r.lse[2], std::log(2.0));
  }
  {
    // Scores 0 and log 3 -> p = (1/4, 3/4); out = 4/4 + 3*8/4 = 7; lse = log 4.
    Problem p = dense_problem(1, 1, 2, 1, 1, 1);
    p.softmax_scale = 1.0;
    const FwdResult r = forward(p, {1.0}, {0.0, std::log(3.0)}, {4.0, 8.0});
    EXPECT_NEAR(r.out[0], 7.0, 1e-14);
    EXPECT_NEAR(r.lse[0], std::log(4.0), 1e-15);
  }
}

TEST(ReferenceForward, SlidingWindowLeftOnly) {
  check_forward(with_mask(dense_problem(2, 8, 8, 2, 2, 8), false, 2, -1), 4);
  check_forward(with_mask(dense_problem(1, 5, 9, 2, 2, 8), false, 3, -1), 5);
}

TEST(ReferenceForward, SlidingWindowRightOnly) {
  check_forward(with_mask(dense_problem(2, 8, 8, 2, 2, 8), false, -1, 1), 6);
  // Shift -3 with window_right 1: rows 0 and 1 see nothing.
  const Problem p = with_mask(dense_problem(1, 9, 6, 1, 1, 8), false, -1, 1);
  const FwdResult r = check_forward(p, 7);
  EXPECT_EQ(count_neg_inf(r.lse), 2);
}

TEST(ReferenceForward, SlidingWindowBothSides) {
  check_forward(with_mask(dense_problem(2, 8, 8, 2, 2, 8), false, 2, 1), 8);
  check_forward(with_mask(dense_problem(1, 6, 11, 2, 1, 8), false, 1, 3), 9);
  check_forward(with_mask(dense_problem(1, 11, 6, 2, 1, 8), false, 0, 0), 10);
  // Row i sees keys i+shift-2 .. i+shift+1, clipped.
  const Problem p = with_mask(dense_problem(1, 4, 6, 1, 1, 4), false, 2, 1);
  EXPECT_EQ(visible_keys(p, 0, 0).lo, 0);
  EXPECT_EQ(visible_keys(p, 0, 0).hi, 3);
  EXPECT_EQ(visible_keys(p, 0, 3).lo, 3);
  EXPECT_EQ(visible_keys(p, 0, 3).hi, 5);
}

TEST(ReferenceForward, CausalWithWindow) {
  // causal overrides window_right (to 0) and keeps window_left.
  check_forward(with_mask(dense_problem(2, 7, 7, 2, 2, 8), true, 3, -1), 11);
  check_forward(with_mask(dense_problem(1, 5, 12, 2, 2, 8), true, 2, 5), 12);
  const Problem p = with_mask(dense_problem(1, 7, 7, 1, 1, 4), true, 3, 5);
  EXPECT_EQ(visible_keys(p, 0, 5).lo, 2);
  EXPECT_EQ(visible_keys(p, 0, 5).hi, 5);
}

TEST(ReferenceForward, Softcap) {
  Problem p = dense_problem(2, 6, 9, 2, 2, 8);
  p.softcap = 1.5;
  p.softmax_scale = 0.9;  // scores of several units, well into the tanh's bend
  check_forward(p, 13);
  check_forward(with_mask(p, true, -1, -1), 14);
  // A softcap this large is the identity to ~1e-13.
  Problem wide = dense_problem(1, 4, 4, 1, 1, 8);
  wide.softcap = 1e7;
  const Tensors t = random_tensors(wide, 15);
  Problem plain = wide;
  plain.softcap = 0;
  EXPECT_LE(max_abs_diff(forward(wide, t.q, t.k, t.v).out, forward(plain, t.q, t.k, t.v).out),
            1e-11);
}

TEST(ReferenceForward, GqaAndMqa) {
  check_forward(dense_problem(2, 5, 6, 6, 2, 8), 16);                           // GQA, group 3
  check_forward(with_mask(dense_problem(1, 5, 6, 4, 1, 8), true, -1, -1), 17);  // MQA
  // GQA equals MHA with each kv head repeated across its group.
  const Problem g = dense_problem(1, 4, 5, 4, 2, 4);
  const Tensors t = random_tensors(g, 18);
  const Problem m = dense_problem(1, 4, 5, 4, 4, 4);
  std::vector<double> k4(m.k_size()), v4(m.v_size());
  for (int j = 0; j < 5; ++j)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 4; ++c) {
        k4[(size_t(j) * 4 + h) * 4 + c] = t.k[(size_t(j) * 2 + h / 2) * 4 + c];
        v4[(size_t(j) * 4 + h) * 4 + c] = t.v[(size_t(j) * 2 + h / 2) * 4 + c];
      }
  EXPECT_EQ(forward(g, t.q, t.k, t.v).out, forward(m, t.q, k4, v4).out);
}

TEST(ReferenceForward, VarlenWithEmptySequences) {
  const Problem p = varlen_problem({3, 0, 5, 4}, {4, 6, 0, 7}, 2, 1, 8);
  EXPECT_EQ(p.total_q(), 12);
  EXPECT_EQ(p.total_k(), 17);
  EXPECT_FALSE(p.is_dense());
  const FwdResult r = check_forward(p, 19);
  EXPECT_EQ(count_neg_inf(r.lse), 2 * 5);  // the sequence with no keys
  check_forward(with_mask(p, true, -1, -1), 20);
  check_forward(with_mask(p, false, 1, 2), 21);
  // Each sequence alone gives the same numbers.
  const Tensors t = random_tensors(p, 19);
  const Problem single = dense_problem(1, 4, 7, 2, 1, 8);
  const int q0 = 8, k0 = 10;
  std::vector<double> q(t.q.begin() + q0 * 16, t.q.begin() + (q0 + 4) * 16);
  std::vector<double> k(t.k.begin() + k0 * 8, t.k.begin() + (k0 + 7) * 8);
  std::vector<double> v(t.v.begin() + k0 * 8, t.v.begin() + (k0 + 7) * 8);
  const FwdResult one = forward(single, q, k, v);
  for (size_t x = 0; x < one.out.size(); ++x) EXPECT_EQ(one.out[x], r.out[q0 * 16 + x]);
}

TEST(ReferenceForward, SequsedK) {
  Problem p = dense_problem(2, 5, 8, 2, 2, 8);
  p.seqused_k = {3, 8};
  EXPECT_EQ(p.seqlen_k(0), 3);
  EXPECT_EQ(p.seqlen_k(1), 8);
  check_forward(p, 22);
  const FwdResult r = check_forward(with_mask(p, true, -1, -1), 23);
  // Causal alignment uses the used length: with 3 of 8 keys and 5 queries, rows 0,1 see nothing.
  EXPECT_EQ(count_neg_inf(r.lse), 2 * 2);
  // Same as a varlen problem holding only the used keys.
  const Tensors t = random_tensors(p, 24);
  Problem cut = varlen_problem({5, 5}, {3, 8}, 2, 2, 8);
  cut.mask = p.mask;
  std::vector<double> k(t.k.begin(), t.k.begin() + 3 * 16), v(t.v.begin(), t.v.begin() + 3 * 16);
  k.insert(k.end(), t.k.begin() + 8 * 16, t.k.end());
  v.insert(v.end(), t.v.begin() + 8 * 16, t.v.end());
  const FwdResult a = forward(p, t.q, t.k, t.v), b = forward(cut, t.q, k, v);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
}

TEST(ReferenceForward, FullyMaskedRows) {
  // window (0, 0) with 6 queries over 3 keys: only rows 3..5 have a key (their diagonal).
  const Problem p = with_mask(dense_problem(1, 6, 3, 2, 2, 4), false, 0, 0);
  const FwdResult r = check_forward(p, 25);
  const Tensors t = random_tensors(p, 25);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 6; ++i) {
      const double lse = r.lse[size_t(h) * 6 + i];
      for (int c = 0; c < 4; ++c) {
        const double o = r.out[(size_t(i) * 2 + h) * 4 + c];
        if (i < 3)
          EXPECT_EQ(o, 0.0);
        else
          EXPECT_DOUBLE_EQ(o, t.v[(size_t(i - 3) * 2 + h) * 4 + c]);  // the single key's v
      }
      if (i < 3)
        EXPECT_EQ(lse, -kInf);
      else
        EXPECT_TRUE(std::isfinite(lse));
    }
}

TEST(ReferenceForward, HeadDimVDiffers) {
  check_forward(dense_problem(2, 5, 6, 2, 1, 8, 12), 26);
  check_forward(with_mask(dense_problem(1, 5, 6, 2, 2, 12, 4), true, -1, -1), 27);
}

TEST(ReferenceForward, DefaultScaleAndLseLayout) {
  Problem p = dense_problem(2, 3, 4, 2, 2, 16);
  EXPECT_DOUBLE_EQ(p.scale(), 0.25);
  EXPECT_TRUE(p.is_dense());
  const Tensors t = random_tensors(p, 28);
  const FwdResult r = forward(p, t.q, t.k, t.v);
  p.softmax_scale = 0.25;
  EXPECT_EQ(forward(p, t.q, t.k, t.v).out, r.out);
  const std::vector<double> dense = lse_packed_to_dense(p, r.lse);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(dense[(size_t(b) * 2 + h) * 3 + i], r.lse[size_t(h) * 6 + b * 3 + i]);
  EXPECT_EQ(lse_dense_to_packed(p, dense), r.lse);
  EXPECT_THROW(lse_packed_to_dense(varlen_problem({1, 2}, {2, 2}, 1, 1, 4), {0, 0, 0}),
               std::invalid_argument);
}

TEST(ReferenceForward, RejectsBadInput) {
  const Problem p = dense_problem(1, 3, 4, 2, 1, 8);
  const Tensors t = random_tensors(p, 29);
  EXPECT_THROW(forward(p, t.k, t.k, t.v), std::invalid_argument);
  EXPECT_THROW(dense_problem(1, 3, 4, 3, 2, 8), std::invalid_argument);
  Problem bad = p;
  bad.seqused_k = {5};
  EXPECT_THROW(forward(bad, t.q, t.k, t.v), std::invalid_argument);
  EXPECT_THROW(forward_lowp(p, t.q, t.k, t.v, DType::kInt32), std::invalid_argument);
}

TEST(ReferenceForward, NonFiniteInputsOnlyReachRowsThatSeeThem) {
  // A NaN in v of key 3 and an inf in k of key 4 under a causal mask: rows 0..2 never see
  // them and must stay finite (no 0 * NaN from masked positions); later rows are poisoned.
  const Problem p = with_mask(dense_problem(1, 6, 6, 1, 1, 4), true, -1, -1);
  Tensors t = random_tensors(p, 33);
  t.v[3 * 4 + 0] = std::numeric_limits<double>::quiet_NaN();
  t.k[4 * 4 + 1] = kInf;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const FwdResult r =
        dt == DType::kFloat32 ? forward(p, t.q, t.k, t.v) : forward_lowp(p, t.q, t.k, t.v, dt);
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(std::isfinite(r.out[size_t(i) * 4]), i < 3) << "row " << i;
      if (i < 4) {
        EXPECT_TRUE(std::isfinite(r.lse[size_t(i)])) << "row " << i;
      }
    }
  }
  const BwdResult g = backward(p, t.q, t.k, t.v, t.dout);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_TRUE(std::isfinite(g.dq[size_t(i) * 4 + c]));
  const BwdResult gl = backward_lowp(p, t.q, t.k, t.v, t.dout, DType::kBFloat16);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_TRUE(std::isfinite(gl.dq[size_t(i) * 4 + c]));
  // Keys beyond seqused_k are never read.
  Problem u = dense_problem(1, 4, 6, 1, 1, 4);
  u.seqused_k = {3};
  Tensors tu = random_tensors(u, 34);
  for (int c = 0; c < 4; ++c) tu.k[5 * 4 + c] = tu.v[4 * 4 + c] = kInf;
  const FwdResult ru = forward(u, tu.q, tu.k, tu.v);
  for (double x : ru.out) EXPECT_TRUE(std::isfinite(x));
  const BwdResult gu = backward(u, tu.q, tu.k, tu.v, tu.dout);
  for (double x : gu.dq) EXPECT_TRUE(std::isfinite(x));
}

TEST(ReferenceForward, BlockedPathsAgainstNaive) {
  // Several 64-row blocks, key ranges wider than one 256-deep GEMM step, and dims that leave
  // remainders in every direction of the 4 x 4 tiles.
  Problem p = dense_problem(1, 150, 300, 2, 1, 37, 21);
  check_forward(p, 30);
  check_forward(with_mask(p, true, 200, -1), 31);
  Problem v = varlen_problem({70, 1, 133}, {300, 5, 90}, 3, 3, 13, 6);
  v.softcap = 2.0;
  check_forward(with_mask(v, false, 17, 40), 32);
}

TEST(ReferenceBackward, BlockedPathsAgainstNaive) {
  auto run = [](const Problem& p, uint64_t seed) {
    const Tensors t = random_tensors(p, seed);
    const BwdResult got = backward(p, t.q, t.k, t.v, t.dout);
    const BwdResult want = naive_backward(p, t.q, t.k, t.v, t.dout);
    EXPECT_LE(max_abs_diff(got.dq, want.dq), 1e-11);
    EXPECT_LE(max_abs_diff(got.dk, want.dk), 1e-11);
    EXPECT_LE(max_abs_diff(got.dv, want.dv), 1e-11);
  };
  run(dense_problem(1, 150, 300, 4, 2, 37, 21), 40);
  Problem p = with_mask(dense_problem(2, 140, 100, 2, 1, 24), true, 50, -1);
  p.softcap = 3.0;
  run(p, 41);
  Problem v = varlen_problem({70, 0, 133}, {300, 5, 90}, 2, 2, 13, 6);
  v.seqused_k = {260, 5, 90};
  run(with_mask(v, false, 17, 40), 42);
}

// ---- Backward vs finite differences -------------------------------------------------------

// Central differences of L = sum(dO * O) with respect to every element of q, k and v.
void check_backward(const Problem& p, uint64_t seed) {
  Tensors t = random_tensors(p, seed);
  const BwdResult g = backward(p, t.q, t.k, t.v, t.dout);
  ASSERT_EQ(g.dq.size(), t.q.size());
  ASSERT_EQ(g.dk.size(), t.k.size());
  ASSERT_EQ(g.dv.size(), t.v.size());
  auto loss = [&]() {
    const FwdResult r = forward(p, t.q, t.k, t.v);
    double l = 0;
    for (size_t x = 0; x < r.out.size(); ++x) l += t.dout[x] * r.out[x];
    return l;
  };
  const double eps = 1e-6;
  double worst = 0;
  auto fd_check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
    for (size_t n = 0; n < x.size(); ++n) {
      const double x0 = x[n];
      x[n] = x0 + eps;
      const double lp = loss();
      x[n] = x0 - eps;
      const double lm = loss();
      x[n] = x0;
      const double fd = (lp - lm) / (2 * eps);
      const double err = std::fabs(fd - grad[n]);
      worst = std::max(worst, err);
      EXPECT_LE(err, 3e-8 + 1e-7 * std::fabs(fd))
          << name << "[" << n << "] fd " << fd << " analytic " << grad[n];
    }
  };
  fd_check(t.q, g.dq, "dq");
  fd_check(t.k, g.dk, "dk");
  fd_check(t.v, g.dv, "dv");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  ::testing::Test::RecordProperty("worst_fd_error", buf);
}

TEST(ReferenceBackward, Plain) { check_backward(dense_problem(2, 4, 5, 2, 2, 4), 101); }

TEST(ReferenceBackward, Causal) {
  check_backward(with_mask(dense_problem(1, 4, 6, 2, 2, 4), true, -1, -1), 102);
  check_backward(with_mask(dense_problem(1, 6, 4, 2, 2, 4), true, -1, -1), 103);  // masked rows
}

TEST(ReferenceBackward, GqaWithHeadDimV) {
  check_backward(dense_problem(2, 4, 5, 6, 2, 4, 3), 104);
  check_backward(with_mask(dense_problem(1, 5, 5, 3, 1, 4), true, -1, -1), 105);
}

TEST(ReferenceBackward, Softcap) {
  Problem p = dense_problem(1, 4, 6, 4, 2, 4);
  p.softcap = 1.2;
  p.softmax_scale = 1.1;
  check_backward(p, 106);
  check_backward(with_mask(p, true, 2, -1), 107);
}

TEST(ReferenceBackward, Window) {
  check_backward(with_mask(dense_problem(1, 6, 6, 2, 2, 4), false, 1, 2), 108);
  check_backward(with_mask(dense_problem(1, 5, 7, 2, 1, 4), false, -1, 0), 109);
}

TEST(ReferenceBackward, VarlenSequsedAndFullyMaskedRows) {
  Problem p = varlen_problem({3, 0, 4}, {5, 3, 2}, 2, 1, 4);
  p.seqused_k = {3, 3, 1};
  p.mask.causal = true;
  check_backward(p, 110);
  // Rows that see nothing get zero dq; unused keys get zero dk/dv.
  const Tensors t = random_tensors(p, 110);
  const BwdResult g = backward(p, t.q, t.k, t.v, t.dout);
  // Sequence 2: 4 queries over 1 used key -> rows 0..2 masked.
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 2 * 4; ++c) EXPECT_EQ(g.dq[size_t(3 + i) * 8 + c], 0.0);
  for (int j : {3, 4, 9})  // keys past seqused_k
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(g.dk[size_t(j) * 4 + c], 0.0);
      EXPECT_EQ(g.dv[size_t(j) * 4 + c], 0.0);
    }
}

// ---- Low-precision baseline -----------------------------------------------------------------

double rel_err(const std::vector<double>& x, const std::vector<double>& ref) {
  return max_abs_diff(x, ref) / max_abs(ref);
}

TEST(ReferenceLowp, ForwardErrorMagnitudes) {
  Problem p = with_mask(dense_problem(2, 96, 128, 2, 1, 64), true, -1, -1);
  p.softcap = 0;
  const Tensors t = random_tensors(p, 201);
  double err[2];
  int n = 0;
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v);
    const FwdResult ref = forward(p, q, k, v);
    const FwdResult lp = forward_lowp(p, q, k, v, dt);
    err[n] = rel_err(lp.out, ref.out);
    EXPECT_GT(err[n], 0.0);
    EXPECT_LT(err[n], 5e-2);
    // The fp32 LSE of the baseline is close to exact: scores were stored in dt.
    EXPECT_LT(max_abs_diff(lp.lse, ref.lse), 0.1);
    ++n;
  }
  EXPECT_GT(err[1], 2 * err[0]) << "bf16 " << err[1] << " fp16 " << err[0];
  // fp32 "low precision" is almost exact.
  const FwdResult lp32 = forward_lowp(p, t.q, t.k, t.v, DType::kFloat32);
  const FwdResult ref = forward(p, rounded(DType::kFloat32, t.q), rounded(DType::kFloat32, t.k),
                                rounded(DType::kFloat32, t.v));
  EXPECT_LT(rel_err(lp32.out, ref.out), 1e-5);
  // fp8: inputs and P in e4m3, clearly worse than bf16 but still an attention output.
  const DType f8 = DType::kFloat8E4M3;
  const std::vector<double> q8 = rounded(f8, t.q), k8 = rounded(f8, t.k), v8 = rounded(f8, t.v);
  const double err8 = rel_err(forward_lowp(p, q8, k8, v8, f8).out, forward(p, q8, k8, v8).out);
  EXPECT_GT(err8, err[1]);
  EXPECT_LT(err8, 0.3);
}

TEST(ReferenceLowp, ForwardWithSoftcapGqaAndMaskedRows) {
  Problem p = with_mask(dense_problem(1, 40, 24, 4, 2, 32, 16), true, 8, -1);
  p.softcap = 3.0;
  p.softmax_scale = 0.5;
  const Tensors t = random_tensors(p, 202);
  const DType dt = DType::kBFloat16;
  const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v);
  const FwdResult ref = forward(p, q, k, v);
  const FwdResult lp = forward_lowp(p, q, k, v, dt);
  EXPECT_EQ(count_neg_inf(lp.lse), count_neg_inf(ref.lse));
  EXPECT_GT(count_neg_inf(ref.lse), 0);
  const double e = rel_err(lp.out, ref.out);
  EXPECT_GT(e, 0.0);
  EXPECT_LT(e, 5e-2);
  for (double x : lp.out) EXPECT_TRUE(std::isfinite(x));
  // Results are stored in bf16.
  EXPECT_EQ(lp.out, rounded(dt, lp.out));
}

TEST(ReferenceLowp, BackwardErrorMagnitudes) {
  Problem p = with_mask(dense_problem(1, 64, 80, 4, 2, 32), true, -1, -1);
  p.softcap = 5.0;
  const Tensors t = random_tensors(p, 203);
  double err[2][3];
  int n = 0;
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v),
                              dout = rounded(dt, t.dout);
    const BwdResult ref = backward(p, q, k, v, dout);
    const BwdResult lp = backward_lowp(p, q, k, v, dout, dt);
    err[n][0] = rel_err(lp.dq, ref.dq);
    err[n][1] = rel_err(lp.dk, ref.dk);
    err[n][2] = rel_err(lp.dv, ref.dv);
    for (int g = 0; g < 3; ++g) {
      EXPECT_GT(err[n][g], 0.0);
      EXPECT_LT(err[n][g], 5e-2) << "dtype " << int(dt) << " grad " << g;
    }
    EXPECT_EQ(lp.dk, rounded(dt, lp.dk));
    ++n;
  }
  for (int g = 0; g < 3; ++g) EXPECT_GT(err[1][g], err[0][g]) << "grad " << g;
  const BwdResult lp32 = backward_lowp(p, t.q, t.k, t.v, t.dout, DType::kFloat32);
  const BwdResult ref32 = backward(p, rounded(DType::kFloat32, t.q), rounded(DType::kFloat32, t.k),
                                   rounded(DType::kFloat32, t.v), rounded(DType::kFloat32, t.dout));
  EXPECT_LT(rel_err(lp32.dq, ref32.dq), 1e-5);
  EXPECT_THROW(backward_lowp(p, t.q, t.k, t.v, t.dout, DType::kFloat8E4M3), std::invalid_argument);
}

// D from the stored O (LowpDelta::kFromOutput): with one key per row, P = 1 and dP - D cancels.
// The PyTorch form (D = P * dP, the same stored dP) gives exactly 0 there, like the float64
// reference; the mixed form leaves dP's storage rounding. With many keys, and under a causal
// mask with more rows than keys (rows without keys, rows whose keys start past the block's
// first), both land near the reference.
TEST(ReferenceLowp, BackwardDeltaFromOutput) {
  const DType dt = DType::kBFloat16;
  for (int keys : {1, 80, 48}) {
    Problem p = dense_problem(1, 64, keys, 2, 2, 32);
    if (keys == 48) p = with_mask(p, true, 20, -1);  // causal, left window 20
    const Tensors t = random_tensors(p, 211);
    const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v),
                              dout = rounded(dt, t.dout);
    const BwdResult ref = backward(p, q, k, v, dout);
    const BwdResult torch_form = backward_lowp(p, q, k, v, dout, dt);
    const BwdResult fa_form = backward_lowp(p, q, k, v, dout, dt, LowpDelta::kFromOutput);
    EXPECT_EQ(fa_form.dv, torch_form.dv) << "D only enters dS";
    if (keys == 1) {
      for (double x : ref.dq) ASSERT_EQ(x, 0.0);
      for (double x : torch_form.dq) ASSERT_EQ(x, 0.0);
      double largest = 0;
      for (double x : fa_form.dq) largest = std::max(largest, std::fabs(x));
      EXPECT_GT(largest, 0.0);
    } else {
      for (double x : fa_form.dq) ASSERT_TRUE(std::isfinite(x));
      EXPECT_LT(rel_err(fa_form.dq, ref.dq), 5e-2);
      EXPECT_LT(rel_err(fa_form.dk, ref.dk), 5e-2);
    }
  }
}

// This backward's own roundings (backward_flash), from an O and LSE as a forward stores them (the
// float64 forward's, O rounded to the dtype): its error against the float64 backward is of the
// dtype's size, within the rule's 2x of the PyTorch form's, under causal + GQA, softcap, varlen
// (an empty sequence, a one-key sequence), rows without keys and a two-sided window; its results
// are stored in the dtype.
// With one key per row (P = 1, O = V) dP - D cancels: dQ is (near) 0, as the float64 backward's.
// fp32 and fp8 are refused, and so are wrong sizes.
TEST(ReferenceLowp, BackwardFlashEmulation) {
  Problem causal = with_mask(dense_problem(2, 64, 80, 4, 2, 32), true, -1, -1);
  Problem capped = dense_problem(1, 48, 48, 2, 1, 64);
  capped.softcap = 5.0;
  const Problem ragged = varlen_problem({30, 0, 17}, {45, 9, 1}, 2, 2, 32);
  const Problem keyless_rows = with_mask(dense_problem(1, 40, 16, 2, 2, 32), true, -1, -1);  // rows 0-23
  const Problem windowed = with_mask(dense_problem(1, 48, 64, 2, 2, 32), false, 10, 6);
  for (const Problem& p : {causal, capped, ragged, keyless_rows, windowed}) {
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      const Tensors t = random_tensors(p, 221);
      const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v),
                                dout = rounded(dt, t.dout);
      const FwdResult fwd = forward(p, q, k, v);
      const BwdResult ref = backward(p, q, k, v, dout);
      const BwdResult torch_form = backward_lowp(p, q, k, v, dout, dt);
      const BwdResult flash = backward_flash(p, q, k, v, dout, rounded(dt, fwd.out), fwd.lse, dt);
      const std::pair<const char*, const std::vector<double>*> grads[] = {
          {"dq", &flash.dq}, {"dk", &flash.dk}, {"dv", &flash.dv}};
      const std::vector<double>* exact[] = {&ref.dq, &ref.dk, &ref.dv};
      const std::vector<double>* torch[] = {&torch_form.dq, &torch_form.dk, &torch_form.dv};
      for (int g = 0; g < 3; ++g) {
        const std::vector<double>& got = *grads[g].second;
        EXPECT_EQ(got, rounded(dt, got)) << grads[g].first;
        const double e = rel_err(got, *exact[g]);
        EXPECT_GT(e, 0.0) << grads[g].first;
        EXPECT_LT(e, 2e-2) << grads[g].first;
        const Comparison c = compare(got, *exact[g], *torch[g]);
        EXPECT_TRUE(c.ok) << grads[g].first << " dtype " << int(dt) << ": " << c.describe();
      }
    }
  }
  const Problem one_key = dense_problem(1, 16, 1, 1, 1, 32);
  const DType dt = DType::kBFloat16;
  const Tensors t = random_tensors(one_key, 222);
  const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v),
                            dout = rounded(dt, t.dout);
  const FwdResult fwd = forward(one_key, q, k, v);
  const BwdResult flash = backward_flash(one_key, q, k, v, dout, rounded(dt, fwd.out), fwd.lse, dt);
  double largest = 0;
  for (double x : flash.dq) largest = std::max(largest, std::fabs(x));
  EXPECT_LT(largest, 1e-4);
  EXPECT_THROW(backward_flash(one_key, q, k, v, dout, fwd.out, fwd.lse, DType::kFloat32), std::invalid_argument);
  EXPECT_THROW(backward_flash(one_key, q, k, v, dout, fwd.out, fwd.lse, DType::kFloat8E4M3), std::invalid_argument);
  EXPECT_THROW(backward_flash(one_key, q, k, v, dout, fwd.out, {}, dt), std::invalid_argument);
}

// ---- The accuracy rule --------------------------------------------------------------------

struct RuleFixture {
  Problem p = with_mask(dense_problem(1, 64, 48, 2, 2, 32), true, -1, -1);  // rows 0..15 masked
  std::vector<double> ref, lowp, ref_lse;
  RuleFixture() {
    const Tensors t = random_tensors(p, 301);
    const DType dt = DType::kBFloat16;
    const std::vector<double> q = rounded(dt, t.q), k = rounded(dt, t.k), v = rounded(dt, t.v);
    const FwdResult r = forward(p, q, k, v);
    ref = r.out;
    ref_lse = r.lse;
    lowp = forward_lowp(p, q, k, v, dt).out;
  }
};

TEST(ReferenceAccuracy, AcceptsGoodKernel) {
  const RuleFixture f;
  // A kernel that computes exactly and stores bf16 (error <= half a bf16 ulp).
  const Comparison c = compare(rounded(DType::kBFloat16, f.ref), f.ref, f.lowp);
  EXPECT_TRUE(c.ok) << c.describe();
  EXPECT_TRUE(c.nan_inf_positions_match);
  EXPECT_GT(c.max_err_lowp, 0.0);
  EXPECT_LE(c.max_err_kernel, c.max_err_lowp);
  EXPECT_DOUBLE_EQ(c.bound, 2 * c.max_err_lowp + 1e-5);
  EXPECT_NE(c.describe().find("ok"), std::string::npos);
  // The baseline itself passes, of course.
  EXPECT_TRUE(compare(f.lowp, f.ref, f.lowp).ok);
}

TEST(ReferenceAccuracy, RejectsPerturbedOutput) {
  const RuleFixture f;
  std::vector<double> k = rounded(DType::kBFloat16, f.ref);
  const double lowp_err = compare(k, f.ref, f.lowp).max_err_lowp;
  k[17] += 2.5 * lowp_err;
  const Comparison c = compare(k, f.ref, f.lowp);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(c.nan_inf_positions_match);
  EXPECT_EQ(c.worst_index, 17);
  EXPECT_NE(c.describe().find("FAIL"), std::string::npos);
  // Just inside the bound still passes.
  std::vector<double> k2 = f.ref;
  k2[5] += 1.9 * lowp_err;
  EXPECT_TRUE(compare(k2, f.ref, f.lowp).ok);
  // A wrong mask (non-causal output) fails by a wide margin.
  Problem nc = f.p;
  nc.mask.causal = false;
  const Tensors t = random_tensors(f.p, 301);
  const DType dt = DType::kBFloat16;
  const FwdResult wrong = forward(nc, rounded(dt, t.q), rounded(dt, t.k), rounded(dt, t.v));
  EXPECT_FALSE(compare(wrong.out, f.ref, f.lowp).ok);
  // No baseline: the bound is atol.
  EXPECT_FALSE(compare(f.lowp, f.ref, {}).ok);
  EXPECT_TRUE(compare(f.ref, f.ref, {}).ok);
  EXPECT_FALSE(compare({1.0}, {1.0, 2.0}, {}).ok);
}

TEST(ReferenceAccuracy, RejectsMismatchedNonFinite) {
  const RuleFixture f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> k = f.ref;
  k[3] = nan;
  Comparison c = compare(k, f.ref, f.lowp);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.nan_inf_positions_match);
  EXPECT_EQ(c.num_mismatched_nonfinite, 1);
  EXPECT_EQ(c.worst_index, 3);
  // NaN in the reference must be matched by the kernel, at the same place.
  std::vector<double> r = f.ref;
  r[3] = nan;
  EXPECT_TRUE(compare(k, r, f.lowp).ok);
  EXPECT_FALSE(compare(f.ref, r, f.lowp).ok);
  k[3] = f.ref[3];
  k[4] = nan;
  EXPECT_FALSE(compare(k, r, f.lowp).ok);
  // inf must match with its sign.
  std::vector<double> ri = f.ref, ki = f.ref;
  ri[0] = kInf;
  ki[0] = kInf;
  EXPECT_TRUE(compare(ki, ri, f.lowp).ok);
  ki[0] = -kInf;
  EXPECT_FALSE(compare(ki, ri, f.lowp).ok);
  ki[0] = 1e300;
  EXPECT_FALSE(compare(ki, ri, f.lowp).ok);
}

TEST(ReferenceAccuracy, LseRule) {
  const RuleFixture f;
  ASSERT_GT(count_neg_inf(f.ref_lse), 0) << "fixture should include masked rows";
  // A float32 LSE passes; -inf entries match.
  Comparison c = compare_lse(rounded(DType::kFloat32, f.ref_lse), f.ref_lse);
  EXPECT_TRUE(c.ok) << c.describe();
  // Small errors within abs_tol pass, larger ones fail.
  std::vector<double> k = f.ref_lse;
  for (double& x : k)
    if (std::isfinite(x)) x += 5e-5;
  EXPECT_TRUE(compare_lse(k, f.ref_lse).ok);
  k[20 * 1 + 30] += 1e-3;
  c = compare_lse(k, f.ref_lse);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.worst_index, 50);
  // A masked row reported as +inf (or a finite number) instead of -inf fails.
  k = f.ref_lse;
  const size_t masked = size_t(std::find(k.begin(), k.end(), -kInf) - k.begin());
  k[masked] = kInf;
  c = compare_lse(k, f.ref_lse);
  EXPECT_FALSE(c.ok);
  EXPECT_FALSE(c.nan_inf_positions_match);
  k[masked] = 0.0;
  EXPECT_FALSE(compare_lse(k, f.ref_lse).ok);
  // Large magnitudes: the ULP term covers float32 storage.
  const std::vector<double> big = {1.0e5 + 0.3, -2.0e6 + 0.7};
  EXPECT_TRUE(compare_lse(rounded(DType::kFloat32, big), big).ok);
  EXPECT_FALSE(compare_lse(rounded(DType::kFloat32, big), big, 1e-4, 0.0).ok);
  // Soft-capping widens the absolute term by the cap's share of tanh.approx's error: an LSE
  // 1.7e-4 off (session 32's sweep, softcap 30) passes with it, not without, and a shift of
  // 0.05 (a dropped key block, say) still fails.
  const std::vector<double> capped = {13.9, 15.7907706};
  std::vector<double> off = {13.9, 15.7906036};
  EXPECT_FALSE(compare_lse(off, capped).ok);
  EXPECT_TRUE(compare_lse(off, capped, lse_abs_tol(30.0)).ok);
  EXPECT_EQ(lse_abs_tol(0.0), 1e-4);
  off[0] += 0.05;
  EXPECT_FALSE(compare_lse(off, capped, lse_abs_tol(30.0)).ok);
  // Large scores widen it by the tensor cores' accumulation error: (d / 16 + 1) * 2^-22 of the
  // scores' L1 magnitude. Session 33's sweep: an fp16 d256 LSE 1.24e-3 off at 1991 (keys x 64)
  // passes with it, not without, and the same shift of 0.05 still fails.
  EXPECT_EQ(lse_abs_tol(0.0, 256, 0.0), 1e-4);
  EXPECT_EQ(lse_abs_tol(0.0, 0, 2000.0), 1e-4);
  EXPECT_DOUBLE_EQ(lse_abs_tol(0.0, 256, 2000.0), 1e-4 + 17 * 2000.0 * 0x1p-22);
  const std::vector<double> large = {1991.31472};
  std::vector<double> large_off = {1991.31348};
  EXPECT_FALSE(compare_lse(large_off, large).ok);
  EXPECT_TRUE(compare_lse(large_off, large, lse_abs_tol(0.0, 256, 2000.0)).ok);
  large_off[0] += 0.05;
  EXPECT_FALSE(compare_lse(large_off, large, lse_abs_tol(0.0, 256, 2000.0)).ok);
}

// combine() merges results over disjoint key ranges into the result over all of them: three
// splits of 37 keys (one of them empty, its output NaN, which must never be read) against the
// forward over all keys, with GQA; and a row that no split saw.
TEST(ReferenceCombine, SplitsMergeIntoTheFullForward) {
  const int B = 2, Sq = 5, Sk = 37, H = 4, Hk = 2, D = 16;
  const Problem full = dense_problem(B, Sq, Sk, H, Hk, D);
  const Tensors t = random_tensors(full, 41);
  const FwdResult want = forward(full, t.q, t.k, t.v);
  std::vector<FwdResult> splits;
  for (auto [lo, hi] : {std::pair{0, 10}, std::pair{10, 10}, std::pair{10, Sk}}) {
    if (lo == hi) {
      FwdResult empty;
      empty.out.assign(want.out.size(), std::numeric_limits<double>::quiet_NaN());
      empty.lse.assign(want.lse.size(), -kInf);
      splits.push_back(empty);
      continue;
    }
    const Problem part = dense_problem(B, Sq, hi - lo, H, Hk, D);
    std::vector<double> k, v;
    for (int b = 0; b < B; ++b)
      for (int j = lo; j < hi; ++j) {
        const size_t at = (size_t(b) * Sk + j) * Hk * D;
        k.insert(k.end(), t.k.begin() + at, t.k.begin() + at + Hk * D);
        v.insert(v.end(), t.v.begin() + at, t.v.begin() + at + Hk * D);
      }
    splits.push_back(forward(part, t.q, k, v));
  }
  const FwdResult got = combine(splits, H);
  ASSERT_EQ(got.out.size(), want.out.size());
  ASSERT_EQ(got.lse.size(), want.lse.size());
  for (size_t i = 0; i < want.out.size(); ++i) EXPECT_NEAR(got.out[i], want.out[i], 1e-12) << i;
  for (size_t i = 0; i < want.lse.size(); ++i) EXPECT_NEAR(got.lse[i], want.lse[i], 1e-12) << i;

  // Only empty splits: out 0, lse -inf.
  const FwdResult none = combine({splits[1], splits[1]}, H);
  for (double x : none.out) EXPECT_EQ(x, 0.0);
  for (double x : none.lse) EXPECT_EQ(x, -kInf);
  EXPECT_THROW(combine({}, H), std::invalid_argument);
}

// max_score_l1 takes the largest scale * sum_d |q_d k_d| over the keys each row sees: here row 0's
// product with key 1 (|10 * -5| = 50) counts only without the causal mask.
TEST(ReferenceAccuracy, MaxScoreL1FollowsTheMask) {
  Problem p = dense_problem(1, 2, 2, 1, 1, 2);
  p.softmax_scale = 0.5;
  const std::vector<double> q = {10, 0, 1, 1}, k = {1, 1, -5, 2};
  EXPECT_DOUBLE_EQ(max_score_l1(p, q, k), 25.0);
  p.mask.causal = true;
  EXPECT_DOUBLE_EQ(max_score_l1(p, q, k), 5.0);  // row 0: key 0 only (10); row 1: 2 and 7
  p.softmax_scale = -0.5;                           // the magnitude counts
  EXPECT_DOUBLE_EQ(max_score_l1(p, q, k), 5.0);
}

}  // namespace
