// The FP8 forward's V transpose (src/kernels/fwd/v_transpose*.hpp), checked on the host: the key
// permutation against the score accumulator's layout, and VTransposeLdsm's data movement, emulated
// instruction by instruction (ldmatrix.x4.trans, PRMT, stmatrix.x4 as the PTX ISA defines them)
// on a shared-memory image, against a plain transpose, with its bank-conflict claims.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "kernels/fwd/v_transpose_layout.hpp"

namespace {

using hopattn::kernels::fwd::fp8_key_of_position;
using hopattn::kernels::fwd::LdsmTransposeLanes;
using hopattn::kernels::fwd::SwizzledRows;

// A 32-bit register as the ids of the four elements in its bytes (byte 0 first).
using Reg = std::array<int, 4>;

// PRMT (__byte_perm) with selectors 0..7 per nibble: byte i of the result is byte sel_i of {a, b}.
Reg prmt(const Reg& a, const Reg& b, uint32_t sel) {
  Reg r{};
  for (int i = 0; i < 4; ++i) {
    const int s = int((sel >> (4 * i)) & 7);
    r[i] = s < 4 ? a[s] : b[s - 4];
  }
  return r;
}

// The 16-byte rows of one ldmatrix / stmatrix matrix (8 row addresses) must fall in 8 different
// 16-byte bank groups to be served in one shared-memory wavefront.
bool conflict_free(const std::array<uint32_t, 8>& rows) {
  std::set<uint32_t> groups;
  for (uint32_t a : rows) groups.insert((a / 16) % 8);
  return groups.size() == 8;
}

TEST(VTransposeLayout, PositionsHoldTheScoreAccumulatorsKeys) {
  // Thread t of a quad holds, per row and 32-key slice, the scores of keys {2t, 2t+1, 2t+8, 2t+9}
  // (and 16 + those) and gives the e4m3 A operand positions 4t..4t+3 (and 16 + those).
  std::set<int> keys;
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 2; ++h) {
      const int expect[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9};
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(fp8_key_of_position(16 * h + 4 * t + i), 16 * h + expect[i]);
        keys.insert(fp8_key_of_position(16 * h + 4 * t + i));
      }
    }
  EXPECT_EQ(keys.size(), 32u) << "positions must be a permutation of the slice's keys";
}

// One key block (128 keys) of V transposed by VTransposeLdsm's three warps, as in its run().
template <int kHeadDim>
void check_ldsm_transpose(int src_stage, int dst_stage) {
  constexpr int kKeys = 128, kWarps = 3, kRanges = kHeadDim / 16;
  constexpr int kW = kHeadDim >= 128 ? 128 : kHeadDim;  // the staging ring's swizzle atom
  constexpr int kStageBytes = kKeys * kHeadDim;
  using Src = SwizzledRows<kKeys, kW, kStageBytes>;
  using Dst = SwizzledRows<kHeadDim, LdsmTransposeLanes::kVtRow, kStageBytes>;
  // Shared-memory images (two stages each) holding element ids: V(key, d) = key * kHeadDim + d.
  std::vector<int> staging(2 * kStageBytes, -1), vt(2 * kStageBytes, -1);
  for (int key = 0; key < kKeys; ++key)
    for (int d = 0; d < kHeadDim; ++d) staging[Src::offset(key, d, src_stage)] = key * kHeadDim + d;

  for (int warp = 0; warp < kWarps; ++warp) {
    for (int range = warp; range < kRanges; range += kWarps) {
      const int d0 = 16 * range;
      for (int c = 0; c < 4; ++c) {
        // ldmatrix.x4.trans: lane 8m + j gives the address of row j of matrix m.
        std::array<std::array<uint32_t, 8>, 4> load_rows{}, store_rows{};
        for (int lane = 0; lane < 32; ++lane) {
          const int key = LdsmTransposeLanes::load_key(lane);
          const uint32_t src = uint32_t(src_stage * kStageBytes) + Src::row_base(key) +
                               Src::col_part(d0, Src::row_xor(key)) + uint32_t(c * 32 * kW);
          ASSERT_EQ(src % 16, 0u);
          load_rows[lane / 8][lane % 8] = src;
          const uint32_t dst = (uint32_t(dst_stage * kStageBytes) + uint32_t(d0 * LdsmTransposeLanes::kVtRow) +
                                LdsmTransposeLanes::store_offset(lane)) ^ uint32_t(32 * c);
          ASSERT_EQ(dst % 16, 0u);
          store_rows[lane / 8][lane % 8] = dst;
        }
        for (int m = 0; m < 4; ++m) {
          EXPECT_TRUE(conflict_free(load_rows[m])) << "d" << kHeadDim << " load, matrix " << m;
          EXPECT_TRUE(conflict_free(store_rows[m])) << "d" << kHeadDim << " store, matrix " << m;
        }
        for (int t = 0; t < 32; ++t) {
          const int p = t / 4, q = t % 4;
          // With .trans, thread (p, q) receives 16-bit elements (2q, p) and (2q + 1, p) of each
          // matrix: bytes 2p, 2p + 1 of rows 2q and 2q + 1.
          Reg v[4];
          for (int m = 0; m < 4; ++m) {
            const uint32_t r0 = load_rows[m][2 * q], r1 = load_rows[m][2 * q + 1];
            v[m] = {staging[r0 + 2 * p], staging[r0 + 2 * p + 1], staging[r1 + 2 * p], staging[r1 + 2 * p + 1]};
          }
          const uint32_t sel = LdsmTransposeLanes::selector(t);
          const Reg out[4] = {prmt(v[0], v[1], sel), prmt(v[0], v[1], sel ^ 0x1111u), prmt(v[2], v[3], sel),
                              prmt(v[2], v[3], sel ^ 0x1111u)};
          // stmatrix.x4: thread (p, q)'s register for matrix m is bytes 4q..4q+3 of that matrix's row p.
          for (int m = 0; m < 4; ++m)
            for (int i = 0; i < 4; ++i) {
              int& cell = vt[store_rows[m][p] + 4 * q + i];
              EXPECT_EQ(cell, -1) << "a V^T byte written twice";
              cell = out[m][i];
            }
        }
      }
    }
  }
  // V^T row d, position pos of slice c holds key 32c + fp8_key_of_position(pos % 32) of column d.
  int mismatches = 0;
  for (int d = 0; d < kHeadDim; ++d)
    for (int pos = 0; pos < kKeys; ++pos) {
      const int key = 32 * (pos / 32) + fp8_key_of_position(pos % 32);
      if (vt[Dst::offset(d, pos, dst_stage)] != key * kHeadDim + d) ++mismatches;
    }
  EXPECT_EQ(mismatches, 0) << "d" << kHeadDim << " stages " << src_stage << " -> " << dst_stage;
}

TEST(VTransposeLayout, LdmatrixTransposeD64) { check_ldsm_transpose<64>(0, 1); }
TEST(VTransposeLayout, LdmatrixTransposeD128) { check_ldsm_transpose<128>(1, 0); }
TEST(VTransposeLayout, LdmatrixTransposeD256) {
  check_ldsm_transpose<256>(0, 0);
  check_ldsm_transpose<256>(1, 1);
}

}  // namespace
