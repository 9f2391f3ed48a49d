// In-kernel V transpose of the FP8 forward (paper section 3.3): FP8 WGMMA reads its B operand
// K-major only, so V (keys x d, d contiguous, as TMA loads it) is rewritten as V^T (d x keys,
// keys contiguous) by warps 1..3 of the producer warpgroup, while the consumers' WGMMAs run.
//
// Key permutation. The fp32 accumulator of S gives a thread, per row and per 32-key slice, the
// keys {2t, 2t+1, 8+2t, 9+2t} and {16+2t, 17+2t, 24+2t, 25+2t} (t = lane % 4), while the e4m3 A
// operand of the k32 WGMMA expects the thread to hold positions {4t..4t+3} and {16+4t..19+4t}.
// Instead of shuffling P between threads, P is packed in the accumulator's order and V^T's
// column at position p holds key fp8_key_of_position(p): the sum over keys in P V is the same.
//
// Work split: lane (t, h, c) = (lane % 4, lane / 4 % 2, lane / 8) owns, in 32-key slice c, the
// four keys 16h + {2t, 2t+1, 2t+8, 2t+9} -> positions 16h + 4t + {0..3}; transposing warp w of
// W owns the 16-column ranges w, w + W, ... of d. Per range: four 16-byte loads (one per key), a 4x4 byte
// transpose per 4 columns (PRMT), sixteen 4-byte stores (one per column d). The 32 lanes of a
// store instruction write 32 different words of one 128-byte V^T row (no bank conflicts); the
// loads of lanes with h = 1 take the odd key first so that the 8 (t, h) pairs hit 8 different
// swizzled 16-byte chunks.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/layouts.hpp"
#include "kernels/fwd/v_transpose_layout.hpp"

namespace hopattn::kernels::fwd {

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v));
}

__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
  return __byte_perm(a, b, sel);
}

template <class T>
struct VTranspose {
  static constexpr int kWarps = T::kNumTransposeThreads / 32;
  static constexpr int kRanges = T::kHeadDim / 16;  // 16-column ranges of d
  static constexpr int kVWidth = T::kHeadDim >= 128 ? 128 : T::kHeadDim;  // staging swizzle atom
  using Src = SwizzledRows<T::kBlockN, kVWidth, T::kBlockN * T::kHeadDim>;       // (keys, d)
  using Dst = SwizzledRows<T::kHeadDim, T::kBlockN, T::kBlockN * T::kHeadDim>;   // (d, keys)
  static_assert(closed_form_matches<typename T::SmemLayoutVStage, Src, 1, T::kBlockN, T::kHeadDim, T::kStages>(),
                "staging V offsets differ from CuTe's layout");
  static_assert(closed_form_matches<typename T::SmemLayoutVt, Dst, 1, T::kHeadDim, T::kBlockN, T::kStages>(),
                "V^T offsets differ from CuTe's layout");

  // Transposes V stage `stage` of the staging ring into the same stage of the V^T ring (the two
  // rings advance together).
  // ptid: 0 .. kNumTransposeThreads-1; warp w takes the ranges w, w + kWarps, ...
  __device__ __forceinline__ static void run(uint32_t v_stage_base, uint32_t vt_base, int stage, int ptid) {
    const int lane = ptid % 32, warp = ptid / 32;
    const int t = lane % 4, h = (lane / 4) % 2, c = lane / 8;
    const int key0 = 32 * c + 16 * h + 2 * t;  // the slice's keys: key0 + {0, 1, 8, 9}
    const int pos = 32 * c + 16 * h + 4 * t;
    // With h = 1 the loads take key0 + 1 first; the selectors put the bytes back in key order.
    const uint32_t sel_lo = h ? 0x1504u : 0x5140u;
    const uint32_t sel_hi = h ? 0x3726u : 0x7362u;
    uint32_t src_row[4], src_xor[4];
    CUTE_UNROLL
    for (int k = 0; k < 4; ++k) {
      const int key = key0 + 8 * (k / 2) + ((k % 2) ^ h);
      src_row[k] = v_stage_base + uint32_t(stage * T::kBlockN * T::kHeadDim) + Src::row_base(key);
      src_xor[k] = Src::row_xor(key);
    }
    // V^T row d0 + j (d0 a multiple of 16) puts position `pos` at pos ^ ((j % 8) << 4).
    uint32_t dst_col[8];
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) dst_col[j] = uint32_t(pos) ^ (uint32_t(j) << 4);
    const uint32_t dst_stage_base = vt_base + uint32_t(stage * T::kBlockN * T::kHeadDim);
    // Not unrolled: unrolled, the compiler hoists every address of every range out of the block
    // loop and the producer spills.
#pragma unroll 1
    for (int range = warp; range < kRanges; range += kWarps) {
      const int d0 = 16 * range;
      uint4 rows[4];
      CUTE_UNROLL
      for (int k = 0; k < 4; ++k) rows[k] = lds128(src_row[k] + Src::col_part(d0, src_xor[k]));
      const uint32_t* a = reinterpret_cast<const uint32_t*>(&rows[0]);
      const uint32_t* b = reinterpret_cast<const uint32_t*>(&rows[1]);
      const uint32_t* cc = reinterpret_cast<const uint32_t*>(&rows[2]);
      const uint32_t* d = reinterpret_cast<const uint32_t*>(&rows[3]);
      const uint32_t dst_rows = dst_stage_base + Dst::row_base(d0);
      CUTE_UNROLL
      for (int w = 0; w < 4; ++w) {
        const uint32_t x = byte_perm(a[w], b[w], sel_lo), y = byte_perm(a[w], b[w], sel_hi);
        const uint32_t u = byte_perm(cc[w], d[w], sel_lo), v = byte_perm(cc[w], d[w], sel_hi);
        const uint32_t cols[4] = {byte_perm(x, u, 0x5410u), byte_perm(x, u, 0x7632u),
                                  byte_perm(y, v, 0x5410u), byte_perm(y, v, 0x7632u)};
        CUTE_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int j = 4 * w + e;  // row d0 + j of V^T
          sts32(dst_rows + Dst::row_base(j) + dst_col[j % 8], cols[e]);
        }
      }
    }
  }
};

// The same transpose in fewer instructions and registers (d >= 128, FwdFp8Traits::
// kLdmatrixTranspose): a transposing ldmatrix does the 16-bit part of the transpose, two PRMT per
// register pair the byte part, and stmatrix writes 16-byte rows: per thread and 16 bytes, 1 load,
// 4 PRMT and 1 store against VTranspose's 1, 8 and 4 (plus the stores' address adds), and fewer
// address registers: it runs in the 24 registers per thread that leave the consumers 240 at
// d = 256 (intra-warpgroup overlap; O alone is 128 registers), its range loop without spills
// (the block loop around it keeps some state in local memory there).
//
// Unit: one 32-key slice c x one 16-column range of d (512 bytes), per warp one ldmatrix.x4.trans
// and one stmatrix.x4. Matrix m of the load is keys 8m..8m+7 of the slice (rows, 16 bytes = 8
// column pairs each); with .trans, thread (p, q) = (lane / 4, lane % 4) receives column pair p
// (columns d0 + 2p, 2p + 1) of keys 8m + 2q and 8m + 2q + 1, i.e. bytes
//   reg m = [V[8m+2q][2p], V[8m+2q][2p+1], V[8m+2q+1][2p], V[8m+2q+1][2p+1]].
// V^T positions 4q..4q+3 of the slice's first half hold keys 2q, 2q+1, 2q+8, 2q+9
// (fp8_key_of_position): for V^T row d0 + 2p that is PRMT(reg 0, reg 1) bytes 0, 2, 4, 6
// (selector 0x6420), for row d0 + 2p + 1 bytes 1, 3, 5, 7 (0x7531); the second half (positions
// 16..31) likewise from regs 2 and 3. Thread (p, q) thus stores 4 bytes at byte 4q of 16-byte
// row segments, which is what stmatrix (non-transposed) writes: matrix m' row p.
//   m' = 0: V^T row d0 + 2p,     positions 0..15 of the slice   (regs 0, 1)
//   m' = 1: V^T row d0 + 2p + 1, positions 0..15                (regs 0, 1)
//   m' = 2, 3: the same rows, positions 16..31                  (regs 2, 3)
// except that rows p >= 4 of matrices 0 and 2 take row d0 + 2p + 1 and those of 1 and 3 row
// d0 + 2p (selectors swapped for p >= 4): then the 8 rows of each matrix differ in (row mod 8),
// the V^T swizzle spreads them over 8 different 16-byte chunks, and every stmatrix is
// conflict-free. The loads are too: the 8 keys of a matrix are consecutive.
template <class T>
struct VTransposeLdsm {
  static constexpr int kWarps = T::kNumTransposeThreads / 32;
  static constexpr int kRanges = T::kHeadDim / 16;
  static constexpr int kVWidth = VTranspose<T>::kVWidth;
  using Src = typename VTranspose<T>::Src;
  static constexpr int kVtRow = LdsmTransposeLanes::kVtRow;  // bytes per V^T row (one swizzle row)
  static_assert(kVtRow == T::kBlockN, "the store offsets assume 128-byte V^T rows (one key tile)");

  __device__ __forceinline__ static void ldsm_x4_trans(uint32_t addr, uint32_t (&v)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr));
  }

  __device__ __forceinline__ static void run(uint32_t v_stage_base, uint32_t vt_base, int stage, int ptid) {
    using Lanes = LdsmTransposeLanes;
    const int lane = ptid % 32, warp = ptid / 32;
    const int key = Lanes::load_key(lane);  // in slice 0; slice c adds 32c keys (same swizzle)
    const uint32_t src_lane =
        v_stage_base + uint32_t(stage * T::kBlockN * T::kHeadDim) + Src::row_base(key);
    const uint32_t src_xor = Src::row_xor(key);
    // Slice c flips bits 5-6 (32c) of the store offset, which the adds below never carry into
    // (the range base has bits 0-9 clear).
    const uint32_t dst_lane = Lanes::store_offset(lane);
    const uint32_t sel_a = Lanes::selector(lane);
    const uint32_t dst_stage_base = vt_base + uint32_t(stage * T::kBlockN * T::kHeadDim);
#pragma unroll 1
    for (int range = warp; range < kRanges; range += kWarps) {
      const int d0 = 16 * range;
      const uint32_t src = src_lane + Src::col_part(d0, src_xor);
      const uint32_t dst = dst_stage_base + uint32_t(d0 * kVtRow) + dst_lane;
      // All four slices' loads first, so that their latencies overlap (one or two at a time
      // measured 0.94 and 0.98 of this at 8k, H100, perf-log session 28).
      uint32_t v[4][4];
      CUTE_UNROLL
      for (int c = 0; c < 4; ++c) ldsm_x4_trans(src + uint32_t(c * 32 * kVWidth), v[c]);
      CUTE_UNROLL
      for (int c = 0; c < 4; ++c)
        stmatrix_x4(dst ^ uint32_t(32 * c), byte_perm(v[c][0], v[c][1], sel_a), byte_perm(v[c][0], v[c][1], sel_a ^ 0x1111u),
                byte_perm(v[c][2], v[c][3], sel_a), byte_perm(v[c][2], v[c][3], sel_a ^ 0x1111u));
    }
  }
};

}  // namespace hopattn::kernels::fwd
