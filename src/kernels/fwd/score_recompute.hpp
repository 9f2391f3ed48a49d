// The FP8 kernels' rare path of the max-free blocks (softmax.hpp, Consumer::recompute_scores): an
// exp overflowed, the accumulator no longer holds the block's scores, and the warp rebuilds its 16
// rows of them from Q and K as stored in global memory (e4m3 codes), on the tensor cores.
//
// Why warp-level MMAs fit without moving a value: warp w of a warpgroup owns rows 16w..16w+15 of
// the m64 WGMMA accumulator, and lane (g, q) = (lane / 4, lane % 4) holds rows g and g + 8 at
// columns 8j + 2q + {0, 1} of every 8-key chunk j: the C fragment of one m16n8 mma.sync per
// chunk. d is consumed in 16-byte slices, each lane loading the 4 bytes at 4q of the slice from
// its two query rows and from key 8j + g, converting each word's four codes exactly to two f16
// pairs, and issuing one m16n8k16 f16 MMA: its k slots 2q, 2q + 1 take the slice's bytes 4q,
// 4q + 1 and slots 8 + 2q, 9 + 2q bytes 4q + 2, 4q + 3, in A and B alike, a permutation of the
// slice's 16 d that the sum does not see. (An e4m3 m16n8k32 mma.sync, tried first, compiled to
// the same conversions and two HMMA.16816 in this kernel's SASS.)
//
// Register pressure shapes the loops: the mainloop around this path holds O and S, and whatever
// this path keeps live at once is taken from the loop's registers. So chunks and slices are both
// rolled loops (each chunk's four sums placed into s_rc by a compare-and-select over the chunks),
// and only three operand words and one chunk's sums are live. Measured while writing it (d256
// FP8, ptxas): chunks unrolled in the slice loop spilled 166 bytes instead of the kernel's 78, a
// non-inlined function made the mainloop spill 266, two slices in flight 114.
#pragma once

#include <cstdint>

#include <cute/arch/mma_sm80.hpp>
#include <cute/tensor.hpp>

namespace hopattn::kernels::fwd {

// One operand word: 4 bytes at `bytes`, or zero for a row past the sequence (not read).
__device__ __forceinline__ uint32_t operand_word(const char* bytes, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint32_t*>(bytes)) : 0u;
}

// Four e4m3 codes -> their values as two f16 pairs (codes 0, 1 and 2, 3), exactly.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t codes, uint32_t& lo, uint32_t& hi) {
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(uint16_t(codes & 0xffffu)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(uint16_t(codes >> 16)));
}

// acc (row g: 0, 1; row g + 8: 2, 3) += one 16-byte slice of d: a_lo, a_hi the query rows' words,
// b the key's word.
__device__ __forceinline__ void slice_mma(float (&acc)[4], uint32_t a_lo, uint32_t a_hi, uint32_t b) {
  uint32_t a0, a1, a2, a3, b0, b1;
  e4m3x4_to_f16x2x2(a_lo, a0, a2);
  e4m3x4_to_f16x2x2(a_hi, a1, a3);
  e4m3x4_to_f16x2x2(b, b0, b1);
  cute::SM80_16x8x16_F32F16F16F32_TN::fma(acc[0], acc[1], acc[2], acc[3], a0, a1, a2, a3, b0, b1, acc[0], acc[1],
                                          acc[2], acc[3]);
}

// Fills s_rc (the warp's accumulator in row / column form: 2 rows x 2 columns per 8-key chunk per
// lane, column 2j + e in chunk j) with the raw scores: the sum over d of the Q and K codes' values.
// q_lo: this lane's first query row (g), its second 8 rows on (rows8_q_bytes); each read only
// where *_valid. k_lane: the key of chunk 0 that this lane's B operand reads (block start + g),
// the next chunk's rows8_k_bytes on; keys_left: keys from k_lane to the end of the sequence
// (chunks at or past it read zeros: a guard, since the only partial block, a sequence's last, is
// the first one processed and never recomputes). Must run on all 32 lanes of the warp (a
// warp-uniform branch).
template <int kHeadDim, class TensorS>
__device__ __forceinline__ void warp_scores_from_global(TensorS& s_rc, int lane, const uint8_t* q_lo, bool lo_valid,
                                                        bool hi_valid, int64_t rows8_q_bytes, const uint8_t* k_lane,
                                                        int64_t rows8_k_bytes, int keys_left) {
  using namespace cute;
  constexpr int kChunks = decltype(size<1>(s_rc))::value / 2;
  static_assert(kHeadDim % 16 == 0, "the MMAs step through d by 16 bytes");
  static_assert(decltype(size<0>(s_rc))::value == 2 && decltype(size<1>(s_rc))::value == 2 * kChunks,
                "a warp's accumulator is 2 rows x 2 columns per 8-key chunk per lane");
  const int lane_bytes = 4 * (lane % 4);
  const char* a_lo = reinterpret_cast<const char*>(q_lo) + lane_bytes;
  const char* b_row = reinterpret_cast<const char*>(k_lane) + lane_bytes;
#pragma unroll 1
  for (int j = 0; j < kChunks; ++j, b_row += rows8_k_bytes) {
    const bool key_valid = 8 * j < keys_left;
    float sums[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int slice = 0; slice < kHeadDim; slice += 16)
      slice_mma(sums, operand_word(a_lo + slice, lo_valid), operand_word(a_lo + rows8_q_bytes + slice, hi_valid),
                operand_word(b_row + slice, key_valid));
    CUTE_UNROLL
    for (int slot = 0; slot < kChunks; ++slot) {
      if (slot == j) {
        s_rc(0, 2 * slot) = sums[0];
        s_rc(0, 2 * slot + 1) = sums[1];
        s_rc(1, 2 * slot) = sums[2];
        s_rc(1, 2 * slot + 1) = sums[3];
      }
    }
  }
}

}  // namespace hopattn::kernels::fwd
