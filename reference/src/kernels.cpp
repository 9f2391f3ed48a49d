// Internal dense helpers of the reference (see kernels.hpp).
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace hopattn::ref::detail {
namespace {

// One 4 x 4 tile of C over `depth` products: A rows through the view, B from a packed
// (depth x 4) panel. The 16 accumulators stay in registers and the four B values of a step are
// contiguous, so the compiler can use vector lanes across columns without reordering any
// element's sum.
inline void tile4x4(int depth, MatView A, size_t i, size_t p0, const double* panel, double* C,
                    size_t ldc) {
  double c[4][4];
  for (int r = 0; r < 4; ++r)
    for (int x = 0; x < 4; ++x) c[r][x] = C[r * ldc + x];
  const double* a0 = A.data + i * A.rs + p0 * A.cs;
  const double* a1 = a0 + A.rs;
  const double* a2 = a1 + A.rs;
  const double* a3 = a2 + A.rs;
  const size_t s = A.cs;
  for (int p = 0; p < depth; ++p) {
    const double* b = panel + size_t(p) * 4;
    const double b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
    const size_t o = size_t(p) * s;
    const double x0 = a0[o], x1 = a1[o], x2 = a2[o], x3 = a3[o];
    // clang-format off
    c[0][0] += x0 * b0; c[0][1] += x0 * b1; c[0][2] += x0 * b2; c[0][3] += x0 * b3;
    c[1][0] += x1 * b0; c[1][1] += x1 * b1; c[1][2] += x1 * b2; c[1][3] += x1 * b3;
    c[2][0] += x2 * b0; c[2][1] += x2 * b1; c[2][2] += x2 * b2; c[2][3] += x2 * b3;
    c[3][0] += x3 * b0; c[3][1] += x3 * b1; c[3][2] += x3 * b2; c[3][3] += x3 * b3;
    // clang-format on
  }
  for (int r = 0; r < 4; ++r)
    for (int x = 0; x < 4; ++x) C[r * ldc + x] = c[r][x];
}

// A single element over `depth` products, same order as the tile.
inline void element(int depth, MatView A, MatView B, size_t i, size_t j, size_t p0, double* C) {
  double c = *C;
  for (int p = 0; p < depth; ++p) c += A(i, p0 + p) * B(p0 + p, j);
  *C = c;
}

}  // namespace

void gemm_acc(int m, int n, int k, MatView A, MatView B, double* C, size_t ldc) {
  if (m <= 0 || n <= 0) return;
  // Blocking: B is taken kDepth rows x kChunk columns at a time, packed as consecutive
  // (depth x 4) panels so the tile loop reads it sequentially (the natural strides here are
  // often powers of two, which would make the cache thrash) from a buffer that stays in L2.
  // Depth blocks are visited in increasing p, so each C element still sums p = 0 .. k-1 in order.
  constexpr int kChunk = 64, kDepth = 256;
  thread_local std::vector<double> panel;
  panel.resize(size_t(kDepth) * kChunk);
  for (int p0 = 0; p0 < k; p0 += kDepth) {
    const int kd = std::min(kDepth, k - p0);
    for (int j0 = 0; j0 < n; j0 += kChunk) {
      const int j1 = std::min(n, j0 + kChunk);
      const int tiles = (j1 - j0) / 4;
      for (int t = 0; t < tiles; ++t) {
        double* dst = panel.data() + size_t(t) * kd * 4;
        const size_t jb = size_t(j0 + 4 * t);
        if (B.cs == 1) {  // row-major B: read along rows
          for (int p = 0; p < kd; ++p)
            for (int x = 0; x < 4; ++x) dst[size_t(p) * 4 + x] = B(size_t(p0 + p), jb + x);
        } else {  // transposed B: read along its columns
          for (int x = 0; x < 4; ++x)
            for (int p = 0; p < kd; ++p) dst[size_t(p) * 4 + x] = B(size_t(p0 + p), jb + x);
        }
      }
      const int jt_end = j0 + 4 * tiles;
      int i = 0;
      for (; i + 4 <= m; i += 4) {
        for (int t = 0; t < tiles; ++t)
          tile4x4(kd, A, size_t(i), size_t(p0), panel.data() + size_t(t) * kd * 4,
                  C + size_t(i) * ldc + j0 + 4 * t, ldc);
        for (int j = jt_end; j < j1; ++j)
          for (int r = 0; r < 4; ++r)
            element(kd, A, B, size_t(i + r), size_t(j), size_t(p0), C + size_t(i + r) * ldc + j);
      }
      for (; i < m; ++i)
        for (int j = j0; j < j1; ++j)
          element(kd, A, B, size_t(i), size_t(j), size_t(p0), C + size_t(i) * ldc + j);
    }
  }
}

void gather_head(const std::vector<double>& src, int row0, int rows, int nh, int head, int dim,
                 std::vector<double>& dst) {
  dst.resize(size_t(rows) * dim);
  for (int j = 0; j < rows; ++j) {
    const double* s = src.data() + (size_t(row0 + j) * nh + head) * dim;
    std::copy(s, s + dim, dst.data() + size_t(j) * dim);
  }
}

void gemm_acc_masked(int m, int n, int k, MatView A, MatView B, double* C, size_t ldc) {
  bool finite = true;
  for (int p = 0; p < k && finite; ++p)
    for (int j = 0; j < n; ++j)
      if (!std::isfinite(B(size_t(p), size_t(j)))) {
        finite = false;
        break;
      }
  if (finite) {
    gemm_acc(m, n, k, A, B, C, ldc);
    return;
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double c = C[size_t(i) * ldc + j];
      for (int p = 0; p < k; ++p) {
        const double a = A(size_t(i), size_t(p));
        if (a != 0.0) c += a * B(size_t(p), size_t(j));
      }
      C[size_t(i) * ldc + j] = c;
    }
}

void HeadKV::load(const Problem& p, const std::vector<double>& kp, const std::vector<double>& vp,
                  int k0, int sk, int hk) {
  gather_head(kp, k0, sk, p.nheads_k, hk, p.head_dim, k);
  gather_head(vp, k0, sk, p.nheads_k, hk, p.head_dim_v, v);
}

void gather_rows(const std::vector<double>& src, int q0, const RowBlock& blk, int nh, int h,
                 int dim, std::vector<double>& dst) {
  dst.resize(size_t(blk.nr) * dim);
  for (int r = 0; r < blk.nr; ++r) {
    const double* s = src.data() + (size_t(q0 + blk.i0 + r) * nh + h) * dim;
    std::copy(s, s + dim, dst.data() + size_t(r) * dim);
  }
}

bool make_block(const Problem& p, int b, int i0, RowBlock& blk) {
  blk.i0 = i0;
  blk.nr = std::min(RowBlock::kMaxRows, p.seqlen_q(b) - i0);
  blk.lo = std::numeric_limits<int>::max();
  blk.hi = -1;
  for (int r = 0; r < blk.nr; ++r) {
    blk.range[r] = visible_keys(p, b, i0 + r);
    if (blk.range[r].empty()) continue;
    blk.lo = std::min(blk.lo, blk.range[r].lo);
    blk.hi = std::max(blk.hi, blk.range[r].hi);
  }
  return blk.hi >= blk.lo;
}

void check_size(const std::vector<double>& t, size_t want, const char* name) {
  if (t.size() != want)
    throw std::invalid_argument(std::string("hopattn::ref: ") + name + " has " +
                                std::to_string(t.size()) + " elements, expected " +
                                std::to_string(want));
}

}  // namespace hopattn::ref::detail
