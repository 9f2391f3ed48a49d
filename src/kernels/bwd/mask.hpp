// The forward's windowed mask seen from a block of keys: which query blocks see any of its keys
// (the transpose of fwd::WindowMask::block_range), and the element-wise mask on S^T, whose rows
// are keys and columns are queries. Rows past seqlen_q need no mask: their LSE is +inf, so P = 0.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/fwd/mask.hpp"

namespace hopattn::kernels::bwd {

template <int kBlockM, int kBlockN>
struct KeyBlockMask {
  int seqlen_q, seqlen_k, window_left, window_right;

  // Query blocks [m_begin, m_end) that hold a row (< seqlen_q) seeing a key of block n_block.
  __host__ __device__ __forceinline__ void m_block_range(int n_block, int& m_begin, int& m_end) const {
    m_begin = m_end = 0;
    const int shift = seqlen_k - seqlen_q;
    const int col_lo = n_block * kBlockN;
    const int col_hi = min(seqlen_k, col_lo + kBlockN) - 1;
    if (col_lo > col_hi || seqlen_q <= 0) return;
    int row_lo = 0, row_hi = seqlen_q - 1;
    if (window_right >= 0) row_lo = max(row_lo, col_lo - shift - window_right);
    if (window_left >= 0) row_hi = min(row_hi, col_hi - shift + window_left);
    if (row_hi < row_lo) return;
    m_begin = row_lo / kBlockM;
    m_end = row_hi / kBlockM + 1;
  }

  __device__ __forceinline__ bool block_needs_mask(int m_block, int n_block) const {
    return fwd::WindowMask<kBlockM, kBlockN>{seqlen_q, seqlen_k, window_left, window_right}
        .block_needs_mask(m_block, n_block);
  }

  // Sets masked entries of S^T to -inf. st_rc / coord_rc: (keys, queries) views of the
  // accumulator and of the identity tensor partitioned like it (tile-local coordinates). A thread
  // holds few keys (rows) and many queries (columns), and its columns in a row are its first
  // column plus compile-time offsets: so each key row gets its visible query range relative to
  // that column once (opaque_int keeps it there), and each element costs a compare against an
  // immediate and a select (two with a left window bound), as fwd::WindowMask::apply<true>.
  // Key `key` sees query r iff r + shift - window_left <= key <= r + shift + window_right and
  // key < seqlen_k, i.e. key - shift - window_right <= r <= key - shift + window_left.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void apply(TensorS& st_rc, const TensorC& coord_rc, int m_block, int n_block) const {
    using namespace cute;
    constexpr int kNone = 1 << 30;  // beyond any column offset
    const int shift = seqlen_k - seqlen_q;
    const int row0 = m_block * kBlockM;
    const int col0 = n_block * kBlockN;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(st_rc); ++i) {
      const int key = col0 + get<0>(coord_rc(i, 0));
      const int first = row0 + get<1>(coord_rc(i, 0));  // this thread's first query of the row
      // Queries below lo_rel (relative to first) are masked; a key past seqlen_k masks them all.
      int lo_rel = window_right >= 0 ? key - shift - window_right - first : -kNone;
      if (key >= seqlen_k) lo_rel = kNone;
      lo_rel = opaque_int(lo_rel);
      if (window_left < 0) {
        CUTE_UNROLL
        for (int j = 0; j < size<1>(st_rc); ++j)
          if (get<1>(coord_rc(i, j)) - get<1>(coord_rc(i, 0)) < lo_rel) st_rc(i, j) = -INFINITY;
      } else {
        const int hi_rel = opaque_int(key - shift + window_left - first);  // inclusive
        CUTE_UNROLL
        for (int j = 0; j < size<1>(st_rc); ++j) {
          const int c = get<1>(coord_rc(i, j)) - get<1>(coord_rc(i, 0));  // a compile-time constant
          if (c < lo_rel || c > hi_rel) st_rc(i, j) = -INFINITY;
        }
      }
    }
  }
};

}  // namespace hopattn::kernels::bwd
