// Layout arithmetic of the FP8 forward's in-kernel V transpose (v_transpose.hpp), free of CuTe and
// of device-only code so that the CPU tests check it (tests/cpu/test_v_transpose_layout.cpp: the
// key permutation, the ldmatrix transposer's data movement and its bank-conflict claims).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOPATTN_HOST_DEVICE __host__ __device__
#else
#define HOPATTN_HOST_DEVICE
#endif

namespace hopattn::kernels::fwd {

// The key (0..31, within a 32-key slice) whose column V^T stores at position p.
HOPATTN_HOST_DEVICE constexpr int fp8_key_of_position(int p) {
  const int h = p / 16, t = (p % 16) / 4, i = p % 4;
  return 16 * h + 8 * (i / 2) + 2 * t + (i % 2);
}

// Byte offset of (row, col, stage) in closed form, for a K-major GMMA layout of kRows rows whose
// swizzle atom is kWidth bytes wide (32, 64 or 128: 8 rows x kWidth bytes, 16-byte chunks XORed
// with row bits) tiled rows-first: the 16-byte chunk index of (row, col) within its atom is XORed
// with (row * kWidth / 128) mod (kWidth / 16); v_transpose.hpp checks it against CuTe's layouts at
// compile time. Cheap enough for the transpose's inner loop, where
// CuTe's generic evaluation cost several integer operations per access.
template <int kRows, int kWidth, int kStageBytes>
struct SwizzledRows {
  HOPATTN_HOST_DEVICE static constexpr uint32_t row_base(int row) { return uint32_t(row * kWidth); }
  HOPATTN_HOST_DEVICE static constexpr uint32_t row_xor(int row) {
    return uint32_t(((row * kWidth) >> 7) & (kWidth / 16 - 1)) << 4;
  }
  HOPATTN_HOST_DEVICE static constexpr uint32_t col_part(int col, uint32_t xor_bits) {
    return ((uint32_t(col) % kWidth) ^ xor_bits) + uint32_t(col / kWidth) * uint32_t(kRows * kWidth);
  }
  HOPATTN_HOST_DEVICE static constexpr uint32_t stage_base(int stage) { return uint32_t(stage * kStageBytes); }
  HOPATTN_HOST_DEVICE static constexpr uint32_t offset(int row, int col, int stage) {
    return row_base(row) + col_part(col, row_xor(row)) + stage_base(stage);
  }
};

// The addresses each lane gives VTransposeLdsm's ldmatrix.x4.trans and stmatrix.x4 (lane L gives
// row L % 8 of matrix L / 8) and the PRMT selector of the register it gives matrices 0 and 2 (1 and
// 3 take selector ^ 0x1111); see VTransposeLdsm for the data flow.
struct LdsmTransposeLanes {
  static constexpr int kVtRow = 128;  // bytes per V^T row: one 128-key tile
  // Load: matrix m is keys 8m..8m+7 of the 32-key slice, so lane L addresses key L.
  HOPATTN_HOST_DEVICE static constexpr int load_key(int lane) { return lane; }
  // Store: matrix 0 (2) row j is V^T row 2j (2j + 1 for j >= 4), positions 0..15 (16..31) of the
  // slice; matrices 1 and 3 take the other row of the pair.
  HOPATTN_HOST_DEVICE static constexpr int store_row(int lane) {
    const int m = lane / 8, j = lane % 8;
    return 2 * j + (((j >= 4) ? 1 : 0) ^ (m & 1));
  }
  HOPATTN_HOST_DEVICE static constexpr int store_position(int lane) { return 16 * ((lane / 8) >> 1); }
  // Byte offset of that row segment from the range's first V^T row, slice 0 (the V^T ring's
  // 128-byte swizzle; a range starts at a multiple of 16 rows, so row mod 8 is the same).
  HOPATTN_HOST_DEVICE static constexpr uint32_t store_offset(int lane) {
    using VtRows = SwizzledRows<16, kVtRow, 0>;
    const int row = store_row(lane);
    return VtRows::row_base(row) + (uint32_t(store_position(lane)) ^ VtRows::row_xor(row));
  }
  // Thread (p, q) = (lane / 4, lane % 4) gives matrix 0 its bytes of V^T row 2p (V column 2p; rows
  // p >= 4: 2p + 1): bytes 0, 2 of register 0 and 0, 2 of register 1 (selector 0x6420), else 1, 3.
  HOPATTN_HOST_DEVICE static constexpr uint32_t selector(int lane) { return lane / 4 >= 4 ? 0x7531u : 0x6420u; }
};

}  // namespace hopattn::kernels::fwd
