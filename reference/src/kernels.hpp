// Internal helpers of the reference (not installed, not part of its interface): a small
// cache-blocked dense matrix product in double with a fixed summation order, and the packing
// of one head of a packed (rows, heads, dim) tensor into a contiguous matrix.
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "hopattn_ref/reference.hpp"

namespace hopattn::ref::detail {

// A read-only matrix view with arbitrary strides: element (i, j) is data[i * rs + j * cs].
struct MatView {
  const double* data;
  size_t rs, cs;
  double operator()(size_t i, size_t j) const { return data[i * rs + j * cs]; }
};
// Row-major matrix with row stride ld, and the transpose of one (element (i, j) = data[j*ld + i]).
inline MatView rows(const double* data, size_t ld) { return MatView{data, ld, 1}; }
inline MatView transposed(const double* data, size_t ld) { return MatView{data, 1, ld}; }

// C (m x n, row-major, row stride ldc) += A (m x k) * B (k x n). Every element of C adds its k
// products one after the other in order p = 0 .. k-1 onto its previous value, whatever the
// blocking, so results are deterministic and independent of the tiling.
void gemm_acc(int m, int n, int k, MatView A, MatView B, double* C, size_t ldc);

// Copies rows [row0, row0 + rows) of head `head` of a packed (total, nh, dim) tensor into dst
// (rows x dim, contiguous).
void gather_head(const std::vector<double>& src, int row0, int rows, int nh, int head, int dim,
                 std::vector<double>& dst);

// Like gemm_acc, for products whose A operand is a probability-like matrix with exact zeros at
// masked positions: a masked (zero) A entry must never meet a NaN or inf of B, since
// 0 * inf = NaN would leak into rows that cannot see that key. When B is all finite the
// products with zero are exact zeros and the blocked gemm_acc gives the same numbers; otherwise
// terms with A == 0 are skipped (same order for the rest).
void gemm_acc_masked(int m, int n, int k, MatView A, MatView B, double* C, size_t ldc);

// One (sequence, kv head) of K and V as contiguous (sk x d) and (sk x dv) matrices.
struct HeadKV {
  std::vector<double> k, v;
  void load(const Problem& p, const std::vector<double>& kp, const std::vector<double>& vp, int k0,
            int sk, int hk);
};

// The query rows [i0, i0 + nr) of sequence b and the union [lo, hi] of their key ranges.
struct RowBlock {
  static constexpr int kMaxRows = 64;
  int i0 = 0, nr = 0;
  KeyRange range[kMaxRows];
  int lo = 0, hi = -1;
  int width() const { return hi - lo + 1; }
  bool sees(int r, int j) const { return j >= range[r].lo && j <= range[r].hi; }
};
// Fills blk for rows [i0, min(i0 + kMaxRows, seqlen_q)); returns false when none sees a key.
bool make_block(const Problem& p, int b, int i0, RowBlock& blk);

// Copies the block's rows of head h of a packed (total, nh, dim) tensor, for the sequence
// starting at row q0, into dst (nr x dim).
void gather_rows(const std::vector<double>& src, int q0, const RowBlock& blk, int nh, int h,
                 int dim, std::vector<double>& dst);

void check_size(const std::vector<double>& t, size_t want, const char* name);

// The forward pass shared by the float64 reference and the low-precision baseline, which differ
// only in how a block's probabilities are formed and how O is stored:
//   probs(blk, qb, kv, P, T, lse)  fills P (nr x width) and the rows' LSE;
//   store(x)                       maps an O element to what is stored (identity, or rounding).
// Rows that see no key keep O = 0 and LSE = -inf.
template <class ProbsFn, class StoreFn>
FwdResult forward_by_blocks(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, ProbsFn&& probs, StoreFn&& store) {
  const int d = p.head_dim, dv = p.head_dim_v, H = p.nheads, Hk = p.nheads_k;
  const int group = H / Hk, tq = p.total_q();
  FwdResult res;
  res.out.assign(p.out_size(), 0.0);
  res.lse.assign(p.lse_size(), -std::numeric_limits<double>::infinity());
  HeadKV kv;
  std::vector<double> qb, P, T, ob;
  RowBlock blk;
  double lse[RowBlock::kMaxRows];
  for (int b = 0; b < p.batch; ++b) {
    const int sq = p.seqlen_q(b), sk = p.seqlen_k(b);
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    if (sq == 0 || sk == 0) continue;
    for (int hk = 0; hk < Hk; ++hk) {
      kv.load(p, k, v, k0, sk, hk);
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int i0 = 0; i0 < sq; i0 += RowBlock::kMaxRows) {
          if (!make_block(p, b, i0, blk)) continue;
          gather_rows(q, q0, blk, H, h, d, qb);
          probs(blk, qb, kv, P, T, lse);
          const int w = blk.width();
          ob.assign(size_t(blk.nr) * dv, 0.0);
          gemm_acc_masked(blk.nr, dv, w, rows(P.data(), size_t(w)),
                          rows(kv.v.data() + size_t(blk.lo) * dv, size_t(dv)), ob.data(), size_t(dv));
          for (int r = 0; r < blk.nr; ++r) {
            if (blk.range[r].empty()) continue;  // stays 0 / -inf
            const int row = q0 + i0 + r;
            double* orow = res.out.data() + (size_t(row) * H + h) * dv;
            for (int c = 0; c < dv; ++c) orow[c] = store(ob[size_t(r) * dv + c]);
            res.lse[size_t(h) * tq + row] = lse[r];
          }
        }
      }
    }
  }
  return res;
}

}  // namespace hopattn::ref::detail
