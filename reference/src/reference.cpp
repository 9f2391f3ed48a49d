// Float64 attention reference: problem description, masks, forward and backward.
//
// Work is organised per (sequence, kv head): that head's K and V are packed into contiguous
// matrices (the packed tensors interleave heads), then every query head of the GQA group walks
// its rows in blocks of up to 64, each block against the union of its rows' key ranges, with
// the products done by a cache-blocked double GEMM of fixed summation order (kernels.cpp).
// Masked entries are exact zeros in P and dS. Cost O(total_q * seqlen_k * (d + dv)) per head;
// memory O(seqlen_k * (d + dv) + 64 * seqlen_k).
#include "hopattn_ref/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace hopattn::ref {

// ---- Problem ------------------------------------------------------------------------------

int Problem::total_q() const { return cu_seqlens_q.empty() ? 0 : cu_seqlens_q.back(); }
int Problem::total_k() const { return cu_seqlens_k.empty() ? 0 : cu_seqlens_k.back(); }
int Problem::seqlen_q(int b) const { return cu_seqlens_q.at(b + 1) - cu_seqlens_q.at(b); }
int Problem::seqlen_k(int b) const {
  if (!seqused_k.empty()) return seqused_k.at(b);
  return cu_seqlens_k.at(b + 1) - cu_seqlens_k.at(b);
}
int Problem::max_seqlen_q() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) m = std::max(m, seqlen_q(b));
  return m;
}
int Problem::max_seqlen_k() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) m = std::max(m, cu_seqlens_k.at(b + 1) - cu_seqlens_k.at(b));
  return m;
}
double Problem::scale() const {
  return softmax_scale != 0 ? softmax_scale : 1.0 / std::sqrt(double(head_dim));
}

bool Problem::is_dense() const {
  if (batch < 1) return false;
  for (int b = 0; b <= batch; ++b) {
    if (cu_seqlens_q.at(b) != b * seqlen_q(0)) return false;
    if (cu_seqlens_k.at(b) != b * (cu_seqlens_k.at(1) - cu_seqlens_k.at(0))) return false;
  }
  return true;
}

void Problem::validate() const {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("hopattn::ref::Problem: " + what);
  };
  if (batch < 0) fail("batch < 0");
  if (nheads < 1 || nheads_k < 1) fail("nheads and nheads_k must be >= 1");
  if (nheads % nheads_k != 0) fail("nheads must be a multiple of nheads_k");
  if (head_dim < 1 || head_dim_v < 1) fail("head_dim and head_dim_v must be >= 1");
  if (int(cu_seqlens_q.size()) != batch + 1) fail("cu_seqlens_q must have batch + 1 entries");
  if (int(cu_seqlens_k.size()) != batch + 1) fail("cu_seqlens_k must have batch + 1 entries");
  if (cu_seqlens_q[0] != 0 || cu_seqlens_k[0] != 0) fail("cu_seqlens must start at 0");
  for (int b = 0; b < batch; ++b) {
    if (cu_seqlens_q[b + 1] < cu_seqlens_q[b]) fail("cu_seqlens_q must be non-decreasing");
    if (cu_seqlens_k[b + 1] < cu_seqlens_k[b]) fail("cu_seqlens_k must be non-decreasing");
  }
  if (!seqused_k.empty()) {
    if (int(seqused_k.size()) != batch) fail("seqused_k must be empty or have batch entries");
    for (int b = 0; b < batch; ++b)
      if (seqused_k[b] < 0 || seqused_k[b] > cu_seqlens_k[b + 1] - cu_seqlens_k[b])
        fail("seqused_k[" + std::to_string(b) + "] outside [0, seqlen_k]");
  }
  if (mask.window_left < -1 || mask.window_right < -1) fail("window sizes must be >= -1");
  if (softcap < 0 || !std::isfinite(softcap)) fail("softcap must be finite and >= 0");
  if (!std::isfinite(softmax_scale)) fail("softmax_scale must be finite");
}

Problem dense_problem(int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int head_dim,
                      int head_dim_v) {
  Problem p;
  p.batch = batch;
  p.nheads = nheads;
  p.nheads_k = nheads_k;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v < 0 ? head_dim : head_dim_v;
  p.cu_seqlens_q.resize(size_t(batch) + 1);
  p.cu_seqlens_k.resize(size_t(batch) + 1);
  for (int b = 0; b <= batch; ++b) {
    p.cu_seqlens_q[b] = b * seqlen_q;
    p.cu_seqlens_k[b] = b * seqlen_k;
  }
  p.validate();
  return p;
}

Problem varlen_problem(const std::vector<int>& seqlens_q, const std::vector<int>& seqlens_k,
                       int nheads, int nheads_k, int head_dim, int head_dim_v) {
  if (seqlens_q.size() != seqlens_k.size())
    throw std::invalid_argument("varlen_problem: seqlens_q and seqlens_k differ in length");
  Problem p;
  p.batch = int(seqlens_q.size());
  p.nheads = nheads;
  p.nheads_k = nheads_k;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v < 0 ? head_dim : head_dim_v;
  p.cu_seqlens_q.assign(1, 0);
  p.cu_seqlens_k.assign(1, 0);
  for (size_t b = 0; b < seqlens_q.size(); ++b) {
    if (seqlens_q[b] < 0 || seqlens_k[b] < 0)
      throw std::invalid_argument("varlen_problem: negative sequence length");
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + seqlens_q[b]);
    p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + seqlens_k[b]);
  }
  p.validate();
  return p;
}

KeyRange visible_keys(const Problem& p, int b, int i) {
  const int sq = p.seqlen_q(b), sk = p.seqlen_k(b);
  const int wl = p.mask.window_left;
  const int wr = p.mask.causal ? 0 : p.mask.window_right;
  // 64-bit: i + shift - window may leave the int range for huge windows.
  const long long diag = (long long)i + sk - sq;
  long long lo = 0, hi = sk - 1;
  if (wl >= 0) lo = std::max(lo, diag - wl);
  if (wr >= 0) hi = std::min(hi, diag + wr);
  KeyRange r;
  if (hi < lo) return r;  // empty
  r.lo = int(lo);
  r.hi = int(hi);
  return r;
}

FwdResult combine(const std::vector<FwdResult>& splits, int nheads) {
  if (splits.empty() || nheads <= 0) throw std::invalid_argument("combine: needs at least one split and one head");
  const size_t rows_heads = splits[0].lse.size();
  const size_t rows = rows_heads / size_t(nheads);
  if (rows_heads % size_t(nheads) != 0) throw std::invalid_argument("combine: lse size is not nheads * total_q");
  const size_t dv = rows == 0 ? 0 : splits[0].out.size() / rows_heads;
  for (const FwdResult& s : splits)
    if (s.lse.size() != rows_heads || s.out.size() != rows_heads * dv)
      throw std::invalid_argument("combine: the splits' shapes differ");
  FwdResult r;
  r.out.assign(rows_heads * dv, 0.0);
  r.lse.assign(rows_heads, -std::numeric_limits<double>::infinity());
  for (int h = 0; h < nheads; ++h)
    for (size_t row = 0; row < rows; ++row) {
      const size_t l = size_t(h) * rows + row;  // lse (nheads, total_q)
      double m = -std::numeric_limits<double>::infinity();
      for (const FwdResult& s : splits) m = std::max(m, s.lse[l]);
      if (m == -std::numeric_limits<double>::infinity()) continue;
      double sum = 0;
      for (const FwdResult& s : splits) sum += std::exp(s.lse[l] - m);
      r.lse[l] = m + std::log(sum);
      double* o = &r.out[(row * size_t(nheads) + size_t(h)) * dv];
      for (const FwdResult& s : splits) {
        if (s.lse[l] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(s.lse[l] - r.lse[l]);
        const double* x = &s.out[(row * size_t(nheads) + size_t(h)) * dv];
        for (size_t d = 0; d < dv; ++d) o[d] += w * x[d];
      }
    }
  return r;
}

double max_score_l1(const Problem& p, const std::vector<double>& q, const std::vector<double>& k) {
  const int D = p.head_dim, H = p.nheads, Hk = p.nheads_k, group = H / Hk;
  double best = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < p.seqlen_q(b); ++i) {
        const KeyRange kr = visible_keys(p, b, i);
        const double* qi = &q[(size_t(p.cu_seqlens_q[b] + i) * H + h) * D];
        for (int j = kr.lo; j <= kr.hi; ++j) {
          const double* kj = &k[(size_t(p.cu_seqlens_k[b] + j) * Hk + h / group) * D];
          double a = 0;
          for (int d = 0; d < D; ++d) a += std::fabs(qi[d] * kj[d]);
          best = std::max(best, a);
        }
      }
  return best * std::fabs(p.scale());
}

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

// P (nr x width): the block's probabilities, exactly 0 outside each row's key range. T holds
// tanh(x / softcap) when softcap is on. lse[r] is -inf for rows that see nothing.
void block_probs(const Problem& p, const RowBlock& blk, const std::vector<double>& qb,
                 const HeadKV& kv, std::vector<double>& P, std::vector<double>& T, double* lse) {
  const int d = p.head_dim, w = blk.width();
  const double scale = p.scale();
  P.assign(size_t(blk.nr) * w, 0.0);
  gemm_acc(blk.nr, w, d, rows(qb.data(), size_t(d)),
           transposed(kv.k.data() + size_t(blk.lo) * d, size_t(d)), P.data(), size_t(w));
  if (p.softcap > 0) T.assign(P.size(), 0.0);
  for (int r = 0; r < blk.nr; ++r) {
    double* row = P.data() + size_t(r) * w;
    const KeyRange kr = blk.range[r];
    lse[r] = -std::numeric_limits<double>::infinity();
    if (kr.empty()) {
      std::fill(row, row + w, 0.0);
      continue;
    }
    const int x0 = kr.lo - blk.lo, x1 = kr.hi - blk.lo;  // this row's columns
    std::fill(row, row + x0, 0.0);
    std::fill(row + x1 + 1, row + w, 0.0);
    double m = -std::numeric_limits<double>::infinity();
    for (int x = x0; x <= x1; ++x) {
      double s = scale * row[x];
      if (p.softcap > 0) {
        const double t = std::tanh(s / p.softcap);
        T[size_t(r) * w + x] = t;
        s = p.softcap * t;
      }
      row[x] = s;
      m = std::max(m, s);
    }
    double sum = 0;
    for (int x = x0; x <= x1; ++x) {
      row[x] = std::exp(row[x] - m);
      sum += row[x];
    }
    const double inv = 1.0 / sum;
    for (int x = x0; x <= x1; ++x) row[x] *= inv;
    lse[r] = m + std::log(sum);
  }
}

}  // namespace

FwdResult forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v) {
  p.validate();
  check_size(q, p.q_size(), "q");
  check_size(k, p.k_size(), "k");
  check_size(v, p.v_size(), "v");
  return detail::forward_by_blocks(
      p, q, k, v,
      [&](const RowBlock& blk, const std::vector<double>& qb, const HeadKV& kv, std::vector<double>& P,
          std::vector<double>& T, double* lse) { block_probs(p, blk, qb, kv, P, T, lse); },
      [](double x) { return x; });
}

BwdResult backward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const std::vector<double>& dout) {
  p.validate();
  check_size(q, p.q_size(), "q");
  check_size(k, p.k_size(), "k");
  check_size(v, p.v_size(), "v");
  check_size(dout, p.out_size(), "dout");
  const int d = p.head_dim, dv = p.head_dim_v, H = p.nheads, Hk = p.nheads_k;
  const int group = H / Hk;
  const double scale = p.scale();
  BwdResult res;
  res.dq.assign(p.q_size(), 0.0);
  res.dk.assign(p.k_size(), 0.0);
  res.dv.assign(p.v_size(), 0.0);
  HeadKV kv;
  std::vector<double> dk, dvv, qb, dob, P, T, dS, dqb;
  RowBlock blk;
  double lse[RowBlock::kMaxRows];
  for (int b = 0; b < p.batch; ++b) {
    const int sq = p.seqlen_q(b), sk = p.seqlen_k(b);
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    if (sq == 0 || sk == 0) continue;
    for (int hk = 0; hk < Hk; ++hk) {
      kv.load(p, k, v, k0, sk, hk);
      dk.assign(size_t(sk) * d, 0.0);
      dvv.assign(size_t(sk) * dv, 0.0);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int i0 = 0; i0 < sq; i0 += RowBlock::kMaxRows) {
          if (!make_block(p, b, i0, blk)) continue;
          const int nr = blk.nr, w = blk.width();
          gather_rows(q, q0, blk, H, h, d, qb);
          gather_rows(dout, q0, blk, H, h, dv, dob);
          block_probs(p, blk, qb, kv, P, T, lse);
          // dP = dO V^T (kept in dS), D = rowsum(P * dP), dS = P * (dP - D) (* tanh'), and
          // the scale folded in: dS becomes the gradient of the unscaled Q K^T.
          dS.assign(size_t(nr) * w, 0.0);
          gemm_acc(nr, w, dv, rows(dob.data(), size_t(dv)),
                   transposed(kv.v.data() + size_t(blk.lo) * dv, size_t(dv)), dS.data(), size_t(w));
          for (int r = 0; r < nr; ++r) {
            const double* pr = P.data() + size_t(r) * w;
            double* ds = dS.data() + size_t(r) * w;
            const KeyRange kr = blk.range[r];
            const int x0 = kr.empty() ? 0 : kr.lo - blk.lo, x1 = kr.empty() ? -1 : kr.hi - blk.lo;
            double D = 0;
            for (int x = x0; x <= x1; ++x) D += pr[x] * ds[x];
            std::fill(ds, ds + x0, 0.0);  // masked keys: no gradient (whatever dP holds there)
            for (int x = x0; x <= x1; ++x) {
              double g = pr[x] * (ds[x] - D);
              if (p.softcap > 0) {
                const double t = T[size_t(r) * w + x];
                g *= 1.0 - t * t;
              }
              ds[x] = scale * g;
            }
            std::fill(ds + x1 + 1, ds + w, 0.0);
          }
          // dQ = dS K; dK += dS^T Q; dV += P^T dO.
          dqb.assign(size_t(nr) * d, 0.0);
          gemm_acc_masked(nr, d, w, rows(dS.data(), size_t(w)),
                          rows(kv.k.data() + size_t(blk.lo) * d, size_t(d)), dqb.data(), size_t(d));
          for (int r = 0; r < nr; ++r)
            std::copy(dqb.data() + size_t(r) * d, dqb.data() + size_t(r + 1) * d,
                      res.dq.data() + (size_t(q0 + i0 + r) * H + h) * d);
          gemm_acc_masked(w, d, nr, transposed(dS.data(), size_t(w)), rows(qb.data(), size_t(d)),
                          dk.data() + size_t(blk.lo) * d, size_t(d));
          gemm_acc_masked(w, dv, nr, transposed(P.data(), size_t(w)), rows(dob.data(), size_t(dv)),
                          dvv.data() + size_t(blk.lo) * dv, size_t(dv));
        }
      }
      for (int j = 0; j < sk; ++j) {
        std::copy(dk.data() + size_t(j) * d, dk.data() + size_t(j + 1) * d,
                  res.dk.data() + (size_t(k0 + j) * Hk + hk) * d);
        std::copy(dvv.data() + size_t(j) * dv, dvv.data() + size_t(j + 1) * dv,
                  res.dv.data() + (size_t(k0 + j) * Hk + hk) * dv);
      }
    }
  }
  return res;
}

std::vector<double> lse_packed_to_dense(const Problem& p, const std::vector<double>& lse_packed) {
  if (!p.is_dense()) throw std::invalid_argument("lse_packed_to_dense: problem is not dense");
  check_size(lse_packed, p.lse_size(), "lse_packed");
  const int sq = p.batch > 0 ? p.seqlen_q(0) : 0, H = p.nheads, tq = p.total_q();
  std::vector<double> dense(lse_packed.size());
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < sq; ++i)
        dense[(size_t(b) * H + h) * sq + i] = lse_packed[size_t(h) * tq + size_t(b) * sq + i];
  return dense;
}

std::vector<double> lse_dense_to_packed(const Problem& p, const std::vector<double>& lse_dense) {
  if (!p.is_dense()) throw std::invalid_argument("lse_dense_to_packed: problem is not dense");
  check_size(lse_dense, p.lse_size(), "lse_dense");
  const int sq = p.batch > 0 ? p.seqlen_q(0) : 0, H = p.nheads, tq = p.total_q();
  std::vector<double> packed(lse_dense.size());
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < sq; ++i)
        packed[size_t(h) * tq + size_t(b) * sq + i] = lse_dense[(size_t(b) * H + h) * sq + i];
  return packed;
}

}  // namespace hopattn::ref
