// The naive low-precision attention that sets the error baseline of the accuracy rule: what an
// unfused PyTorch expression (matmul, scale, softcap, masked_fill, softmax, matmul, and its
// autograd) computes when its tensors are fp16 / bf16. Every matmul accumulates in fp32, modelled
// as the exact sum rounded once to fp32, and its result is stored in the low dtype; pointwise ops
// compute in fp32 and store in the low dtype; softmax and its backward compute in fp32.
// The loop structure (blocks of query rows, one kv head at a time) is the one of reference.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "hopattn_ref/numeric.hpp"
#include "hopattn_ref/reference.hpp"
#include "kernels.hpp"

namespace hopattn::ref {
namespace {

using detail::check_size;
using detail::gather_rows;
using detail::gemm_acc;
using detail::gemm_acc_masked;
using detail::HeadKV;
using detail::make_block;
using detail::RowBlock;
using detail::rows;
using detail::transposed;
using hopattn::DType;

// Rounding to one storage dtype. Normal-range values take an inline bit-level path; everything
// else (subnormals, overflow, zero, NaN) goes through round_to, which the fast path matches.
class Store {
 public:
  explicit Store(DType dt) : dt_(dt) {
    switch (dt) {
      case DType::kFloat16:
        man_ = 10;
        min_normal_ = 0x1p-14;
        max_ = 65504.0;
        break;
      case DType::kBFloat16:
        man_ = 7;
        min_normal_ = 0x1p-126;
        max_ = 0x1.FEp127;
        break;
      case DType::kFloat8E4M3:
        man_ = 3;
        min_normal_ = 0x1p-6;
        max_ = 448.0;
        break;
      case DType::kFloat32:
        man_ = 23;
        min_normal_ = 0x1p-126;
        max_ = double(FLT_MAX);
        break;
      default:
        throw std::invalid_argument("lowp: unsupported dtype " + std::to_string(int(dt)));
    }
  }
  // The value x rounded to the dtype.
  double round(double x) const {
    const double ax = std::fabs(x);
    if (ax >= min_normal_ && ax <= max_) {
      uint64_t b;
      std::memcpy(&b, &x, 8);
      const int drop = 52 - man_;
      const uint64_t low = (uint64_t(1) << drop) - 1;
      b += (low >> 1) + ((b >> drop) & 1);
      b &= ~low;
      double r;
      std::memcpy(&r, &b, 8);
      if (std::fabs(r) <= max_) return r;
    }
    return round_to(dt_, x);
  }
  // An fp32 result stored in the dtype.
  double operator()(double x) const { return round(double(float(x))); }

 private:
  DType dt_;
  int man_ = 0;
  double min_normal_ = 0, max_ = 0;
};

// Storage dtypes of the emulated computation.
struct Prec {
  Store in;  // q, k, v, dout
  Store s;   // scores and their gradients
  Store p;   // probabilities (operand of P V)
  Store o;   // out and the input gradients
};

Prec precision_for(DType dt, bool backward) {
  switch (dt) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat32:
      return Prec{Store(dt), Store(dt), Store(dt), Store(dt)};
    case DType::kFloat8E4M3:
      if (backward)
        throw std::invalid_argument("backward_lowp: fp8 (e4m3) backward is not defined");
      return Prec{Store(DType::kFloat8E4M3), Store(DType::kBFloat16), Store(DType::kFloat8E4M3),
                  Store(DType::kBFloat16)};
    default:
      break;
  }
  throw std::invalid_argument("forward_lowp/backward_lowp: unsupported dtype " +
                              std::to_string(int(dt)));
}

std::vector<double> rounded_with(const Store& st, const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = st.round(x[i]);
  return r;
}

inline double f32(double x) { return double(float(x)); }

// The emulated forward of one block up to P: P (nr x width) holds the stored probabilities,
// exactly 0 outside each row's keys; T the stored tanh outputs (softcap); lse the fp32 LSE; e
// (nr x width) the fp32 exponentials before normalisation, over each row's keys.
void lowp_probs(const Problem& pr, const Prec& prec, const RowBlock& blk,
                const std::vector<double>& qb, const HeadKV& kv, std::vector<double>& P,
                std::vector<double>& T, std::vector<float>& e, double* lse) {
  const int d = pr.head_dim, w = blk.width();
  const double fscale = f32(pr.scale()), fcap = f32(pr.softcap);
  P.assign(size_t(blk.nr) * w, 0.0);
  gemm_acc(blk.nr, w, d, rows(qb.data(), size_t(d)),
           transposed(kv.k.data() + size_t(blk.lo) * d, size_t(d)), P.data(), size_t(w));
  if (pr.softcap > 0) T.assign(P.size(), 0.0);
  e.resize(size_t(blk.nr) * w);
  for (int r = 0; r < blk.nr; ++r) {
    double* row = P.data() + size_t(r) * w;
    const KeyRange kr = blk.range[r];
    lse[r] = -std::numeric_limits<double>::infinity();
    if (kr.empty()) {
      std::fill(row, row + w, 0.0);
      continue;
    }
    const int x0 = kr.lo - blk.lo, x1 = kr.hi - blk.lo;
    std::fill(row, row + x0, 0.0);
    std::fill(row + x1 + 1, row + w, 0.0);
    float m = -std::numeric_limits<float>::infinity();
    for (int x = x0; x <= x1; ++x) {
      double s = prec.s(row[x]);  // X = Q K^T stored
      s = prec.s(s * fscale);     // S = X * scale stored
      if (pr.softcap > 0) {
        const double a = prec.s(s / fcap);
        const double t = prec.s(std::tanh(float(a)));
        T[size_t(r) * w + x] = t;
        s = prec.s(t * fcap);
      }
      row[x] = s;
      m = std::max(m, float(s));
    }
    // Softmax in fp32 over the visible keys.
    float sum = 0.f;
    float* er = e.data() + size_t(r) * w;
    for (int x = x0; x <= x1; ++x) {
      er[x] = std::exp(float(row[x]) - m);
      sum += er[x];
    }
    for (int x = x0; x <= x1; ++x) row[x] = prec.p.round(double(er[x] / sum));
    lse[r] = double(m + std::log(sum));
  }
}

// D = rowsum(dO * O) of one row whose keys are [x0, x1] (not empty), with O normalised the way
// a FlashAttention forward does it: the exponentials e rounded to the low precision, O = e V
// accumulated in fp32 and normalised by the fp32 sum of e only then, stored in the low
// precision; the products summed in fp32 (modelled as the exact sum). e_row and v_rows start at
// the same key.
double delta_from_output(const float* e_row, int x0, int x1, const double* v_rows, const double* do_row,
                         int dv, const Prec& prec) {
  float sum = 0.f;
  for (int x = x0; x <= x1; ++x) sum += e_row[x];
  double D = 0;
  for (int c = 0; c < dv; ++c) {
    double o = 0;
    for (int x = x0; x <= x1; ++x) o += prec.p.round(double(e_row[x])) * v_rows[size_t(x) * dv + c];
    D += do_row[c] * prec.o(f32(f32(o) / sum));
  }
  return D;
}

}  // namespace

FwdResult forward_lowp(const Problem& pr, const std::vector<double>& q0,
                       const std::vector<double>& k0, const std::vector<double>& v0, DType dt) {
  pr.validate();
  check_size(q0, pr.q_size(), "q");
  check_size(k0, pr.k_size(), "k");
  check_size(v0, pr.v_size(), "v");
  const Prec prec = precision_for(dt, false);
  const std::vector<double> q = rounded_with(prec.in, q0), k = rounded_with(prec.in, k0),
                            v = rounded_with(prec.in, v0);
  std::vector<float> e;  // scratch of lowp_probs
  return detail::forward_by_blocks(
      pr, q, k, v,
      [&](const RowBlock& blk, const std::vector<double>& qb, const HeadKV& kv, std::vector<double>& P,
          std::vector<double>& T, double* lse) { lowp_probs(pr, prec, blk, qb, kv, P, T, e, lse); },
      [&](double x) { return prec.o(x); });  // O stored in the low precision
}

BwdResult backward_lowp(const Problem& pr, const std::vector<double>& q0,
                        const std::vector<double>& k0, const std::vector<double>& v0,
                        const std::vector<double>& dout0, DType dt, LowpDelta delta) {
  pr.validate();
  check_size(q0, pr.q_size(), "q");
  check_size(k0, pr.k_size(), "k");
  check_size(v0, pr.v_size(), "v");
  check_size(dout0, pr.out_size(), "dout");
  const Prec prec = precision_for(dt, true);
  const std::vector<double> q = rounded_with(prec.in, q0), k = rounded_with(prec.in, k0),
                            v = rounded_with(prec.in, v0), dout = rounded_with(prec.in, dout0);
  const int d = pr.head_dim, dv = pr.head_dim_v, H = pr.nheads, Hk = pr.nheads_k;
  const int group = H / Hk;
  const double fscale = f32(pr.scale()), fcap = f32(pr.softcap);
  BwdResult res;
  res.dq.assign(pr.q_size(), 0.0);
  res.dk.assign(pr.k_size(), 0.0);
  res.dv.assign(pr.v_size(), 0.0);
  HeadKV kv;
  std::vector<double> qb, dob, P, T, dX, dqb;
  std::vector<double> dkh, dvh, dkg, dvg;  // per query head (exact sums), per group (stored)
  std::vector<float> e;
  RowBlock blk;
  double lse[RowBlock::kMaxRows];
  for (int b = 0; b < pr.batch; ++b) {
    const int sq = pr.seqlen_q(b), sk = pr.seqlen_k(b);
    const int qs = pr.cu_seqlens_q[b], ks = pr.cu_seqlens_k[b];
    if (sq == 0 || sk == 0) continue;
    for (int hk = 0; hk < Hk; ++hk) {
      kv.load(pr, k, v, ks, sk, hk);
      dkg.assign(size_t(sk) * d, 0.0);
      dvg.assign(size_t(sk) * dv, 0.0);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        dkh.assign(size_t(sk) * d, 0.0);
        dvh.assign(size_t(sk) * dv, 0.0);
        for (int i0 = 0; i0 < sq; i0 += RowBlock::kMaxRows) {
          if (!make_block(pr, b, i0, blk)) continue;
          const int nr = blk.nr, w = blk.width();
          gather_rows(q, qs, blk, H, h, d, qb);
          gather_rows(dout, qs, blk, H, h, dv, dob);
          lowp_probs(pr, prec, blk, qb, kv, P, T, e, lse);
          // dP = dO V^T stored, then the fp32 softmax backward and the pointwise chain.
          dX.assign(size_t(nr) * w, 0.0);
          gemm_acc(nr, w, dv, rows(dob.data(), size_t(dv)),
                   transposed(kv.v.data() + size_t(blk.lo) * dv, size_t(dv)), dX.data(), size_t(w));
          for (int r = 0; r < nr; ++r) {
            const double* pr_row = P.data() + size_t(r) * w;
            double* g = dX.data() + size_t(r) * w;
            const KeyRange kr = blk.range[r];
            const int x0 = kr.empty() ? 0 : kr.lo - blk.lo, x1 = kr.empty() ? -1 : kr.hi - blk.lo;
            double D = 0;  // PyTorch's softmax backward: rowsum(P * dP)
            for (int x = x0; x <= x1; ++x) {
              g[x] = prec.s(g[x]);  // dP stored
              D += pr_row[x] * g[x];
            }
            if (delta == LowpDelta::kFromOutput && !kr.empty()) {
              D = delta_from_output(e.data() + size_t(r) * w, x0, x1, kv.v.data() + size_t(blk.lo) * dv,
                                    dob.data() + size_t(r) * dv, dv, prec);
            }
            D = f32(D);
            std::fill(g, g + x0, 0.0);  // masked keys carry no gradient
            for (int x = x0; x <= x1; ++x) {
              double t = prec.s(pr_row[x] * f32(g[x] - D));  // softmax backward, fp32
              if (pr.softcap > 0) {
                const double y = T[size_t(r) * w + x];
                t = prec.s(t * fcap);           // through c * u
                t = prec.s(t * (1.0 - y * y));  // through tanh
                t = prec.s(t / fcap);           // through x / c
              }
              g[x] = prec.s(t * fscale);  // through scale * X
            }
            std::fill(g + x1 + 1, g + w, 0.0);
          }
          // dQ = dX K, complete for these rows: store it.
          dqb.assign(size_t(nr) * d, 0.0);
          gemm_acc_masked(nr, d, w, rows(dX.data(), size_t(w)),
                          rows(kv.k.data() + size_t(blk.lo) * d, size_t(d)), dqb.data(), size_t(d));
          for (int r = 0; r < nr; ++r) {
            double* dqrow = res.dq.data() + (size_t(qs + i0 + r) * H + h) * d;
            for (int c = 0; c < d; ++c) dqrow[c] = prec.o(dqb[size_t(r) * d + c]);
          }
          // dK_h += dX^T Q and dV_h += P^T dO, exact until the head is complete.
          gemm_acc_masked(w, d, nr, transposed(dX.data(), size_t(w)), rows(qb.data(), size_t(d)),
                          dkh.data() + size_t(blk.lo) * d, size_t(d));
          gemm_acc_masked(w, dv, nr, transposed(P.data(), size_t(w)), rows(dob.data(), size_t(dv)),
                          dvh.data() + size_t(blk.lo) * dv, size_t(dv));
        }
        for (size_t x = 0; x < dkh.size(); ++x) dkg[x] += prec.o(dkh[x]);
        for (size_t x = 0; x < dvh.size(); ++x) dvg[x] += prec.o(dvh[x]);
      }
      // The group sum (backward of repeat_interleave) is stored again; a no-op without GQA.
      for (int j = 0; j < sk; ++j) {
        double* dkrow = res.dk.data() + (size_t(ks + j) * Hk + hk) * d;
        double* dvrow = res.dv.data() + (size_t(ks + j) * Hk + hk) * dv;
        for (int c = 0; c < d; ++c) dkrow[c] = prec.o(dkg[size_t(j) * d + c]);
        for (int c = 0; c < dv; ++c) dvrow[c] = prec.o(dvg[size_t(j) * dv + c]);
      }
    }
  }
  return res;
}

namespace {

// One block of rows of backward_flash: the probabilities P (rounded to dt) and the score
// gradients dS (rounded to dt) of the rows' visible keys, from the exact sums S = Q K^T and
// dP = dO V^T (nr x w each, overwritten), the rows' stored LSE and D.
void flash_probs_and_dscores(const Problem& pr, const Store& st, const RowBlock& blk, const double* lse,
                             const double* delta, std::vector<double>& S, std::vector<double>& dP) {
  constexpr double kLog2e = double(1.4426950408889634f);
  const int w = blk.width();
  const bool softcap = pr.softcap > 0;
  const double scale_log2 = f32(f32(softcap ? pr.softcap : pr.scale()) * kLog2e);
  const double prescale = softcap ? f32(f32(pr.scale()) / f32(pr.softcap)) : 1.0;
  for (int r = 0; r < blk.nr; ++r) {
    double* s_row = S.data() + size_t(r) * w;
    double* dp_row = dP.data() + size_t(r) * w;
    const KeyRange kr = blk.range[r];
    const int x0 = kr.empty() ? 0 : kr.lo - blk.lo, x1 = kr.empty() ? -1 : kr.hi - blk.lo;
    const double lse_log2 = f32(f32(lse[r]) * kLog2e);
    for (int x = 0; x < w; ++x) {
      if (x < x0 || x > x1) {  // masked: P = 0, dS = 0
        s_row[x] = dp_row[x] = 0.0;
        continue;
      }
      double t = f32(s_row[x]);
      if (softcap) t = f32(std::tanh(f32(t * prescale)));
      const double p16 = st.round(f32(std::exp2(f32(t * scale_log2 - lse_log2))));  // one FFMA, ex2
      double ds = f32(p16 * f32(f32(dp_row[x]) - delta[r]));
      if (softcap) {
        const double tp = p16 > 0 ? f32(f32(std::log2(p16) + lse_log2) / scale_log2) : 0.0;
        ds = p16 > 0 ? f32(ds * f32(1.0 - f32(tp * tp))) : 0.0;
      }
      s_row[x] = p16;
      dp_row[x] = st.round(ds);
    }
  }
}

}  // namespace

BwdResult backward_flash(const Problem& pr, const std::vector<double>& q0, const std::vector<double>& k0,
                         const std::vector<double>& v0, const std::vector<double>& dout0,
                         const std::vector<double>& out0, const std::vector<double>& lse, DType dt) {
  pr.validate();
  check_size(q0, pr.q_size(), "q");
  check_size(k0, pr.k_size(), "k");
  check_size(v0, pr.v_size(), "v");
  check_size(dout0, pr.out_size(), "dout");
  check_size(out0, pr.out_size(), "out");
  check_size(lse, pr.lse_size(), "lse");
  if (dt != DType::kFloat16 && dt != DType::kBFloat16)
    throw std::invalid_argument("backward_flash: dt must be fp16 or bf16");
  const Store st(dt);
  const std::vector<double> q = rounded_with(st, q0), k = rounded_with(st, k0), v = rounded_with(st, v0),
                            dout = rounded_with(st, dout0), out = rounded_with(st, out0);
  const int d = pr.head_dim, dv = pr.head_dim_v, H = pr.nheads, Hk = pr.nheads_k;
  const int group = H / Hk, tq = pr.total_q();
  const double fscale = f32(pr.scale());
  BwdResult res;
  res.dq.assign(pr.q_size(), 0.0);
  res.dk.assign(pr.k_size(), 0.0);
  res.dv.assign(pr.v_size(), 0.0);
  HeadKV kv;
  std::vector<double> qb, dob, ob, S, dP, dqb, dkg, dvg;  // dkg, dvg: the group's fp32 accumulators
  RowBlock blk;
  double row_lse[RowBlock::kMaxRows], delta[RowBlock::kMaxRows];
  for (int b = 0; b < pr.batch; ++b) {
    const int sq = pr.seqlen_q(b), sk = pr.seqlen_k(b);
    const int qs = pr.cu_seqlens_q[b], ks = pr.cu_seqlens_k[b];
    if (sq == 0 || sk == 0) continue;
    for (int hk = 0; hk < Hk; ++hk) {
      kv.load(pr, k, v, ks, sk, hk);
      dkg.assign(size_t(sk) * d, 0.0);
      dvg.assign(size_t(sk) * dv, 0.0);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int i0 = 0; i0 < sq; i0 += RowBlock::kMaxRows) {
          if (!make_block(pr, b, i0, blk)) continue;
          const int nr = blk.nr, w = blk.width();
          gather_rows(q, qs, blk, H, h, d, qb);
          gather_rows(dout, qs, blk, H, h, dv, dob);
          gather_rows(out, qs, blk, H, h, dv, ob);
          for (int r = 0; r < nr; ++r) {  // the preprocess: D in fp32, the stored LSE
            double D = 0;
            for (int c = 0; c < dv; ++c) D += dob[size_t(r) * dv + c] * ob[size_t(r) * dv + c];
            delta[r] = f32(D);
            row_lse[r] = lse[size_t(h) * tq + qs + i0 + r];
          }
          S.assign(size_t(nr) * w, 0.0);
          dP.assign(size_t(nr) * w, 0.0);
          gemm_acc(nr, w, d, rows(qb.data(), size_t(d)), transposed(kv.k.data() + size_t(blk.lo) * d, size_t(d)),
                   S.data(), size_t(w));
          gemm_acc(nr, w, dv, rows(dob.data(), size_t(dv)),
                   transposed(kv.v.data() + size_t(blk.lo) * dv, size_t(dv)), dP.data(), size_t(w));
          flash_probs_and_dscores(pr, st, blk, row_lse, delta, S, dP);  // S := P_dt, dP := dS_dt
          dqb.assign(size_t(nr) * d, 0.0);
          gemm_acc_masked(nr, d, w, rows(dP.data(), size_t(w)), rows(kv.k.data() + size_t(blk.lo) * d, size_t(d)),
                          dqb.data(), size_t(d));
          for (int r = 0; r < nr; ++r) {
            double* dqrow = res.dq.data() + (size_t(qs + i0 + r) * H + h) * d;
            for (int c = 0; c < d; ++c) dqrow[c] = st(f32(dqb[size_t(r) * d + c]) * fscale);
          }
          gemm_acc_masked(w, d, nr, transposed(dP.data(), size_t(w)), rows(qb.data(), size_t(d)),
                          dkg.data() + size_t(blk.lo) * d, size_t(d));
          gemm_acc_masked(w, dv, nr, transposed(S.data(), size_t(w)), rows(dob.data(), size_t(dv)),
                          dvg.data() + size_t(blk.lo) * dv, size_t(dv));
        }
      }
      for (int j = 0; j < sk; ++j) {
        double* dkrow = res.dk.data() + (size_t(ks + j) * Hk + hk) * d;
        double* dvrow = res.dv.data() + (size_t(ks + j) * Hk + hk) * dv;
        for (int c = 0; c < d; ++c) dkrow[c] = st(f32(dkg[size_t(j) * d + c]) * fscale);
        for (int c = 0; c < dv; ++c) dvrow[c] = st(dvg[size_t(j) * dv + c]);
      }
    }
  }
  return res;
}

}  // namespace hopattn::ref
