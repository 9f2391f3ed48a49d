// Backward preprocessing, one CTA per (query block, head, batch entry):
//   dsum[row]     = sum_c dO[row, c] * O[row, c]     (FP32; D of the paper)
//   lse_log2[row] = LSE[row] * log2(e)               (so that P = exp2(S * scale_log2 - lse_log2))
//   dq_accum block = 0                                (only where every dQ writer adds)
// Rows without a visible key (forward LSE = -inf) and the padding rows of the last block get
// lse_log2 = +inf and dsum = 0: their P is exactly 0, so the main kernel needs no row mask.
// Where clears_dq_accum (launch.hpp) says no, dq_accum is not cleared (a third of this kernel's
// traffic): the main kernel's first writer of each query block stores rather than adds
// (dq_writer.hpp). Where it is, zeroing here rather than with a separate memset lets the stores
// overlap this kernel's reads; measured the same as the memset (perf-log, session 10).
#pragma once

#include <cuda_runtime.h>
#include <cute/config.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::bwd {

constexpr int kPreprocessThreads = 256;

// A row of d elements is read as 16-byte vectors by kLanes adjacent lanes (a power of two up to
// 8 that divides d / 8), each taking kVecs vectors: d 64: 8 x 1, 96: 4 x 3, 128: 8 x 2,
// 192: 8 x 3, 256: 8 x 4.
template <int kHeadDim>
struct PreprocessShape {
  static constexpr int kVecsPerRow = kHeadDim / 8;
  static constexpr int kLanes = kVecsPerRow % 8 == 0 ? 8 : kVecsPerRow % 4 == 0 ? 4 : 2;
  static constexpr int kVecs = kVecsPerRow / kLanes;
  static constexpr int kRowsPerPass = kPreprocessThreads / kLanes;
  static_assert(kHeadDim % 16 == 0 && kVecsPerRow % kLanes == 0);
};

// One 16-byte piece of a row of O or dO: read once, so past L1 (O and dO are inputs, unchanged
// while the backward runs), with a 256-byte L2 prefetch (rows are 128-512 contiguous bytes, and
// the neighbouring heads' rows follow). Against plain loads, standalone at 16k tokens x 2048
// (H100, session 39): d64 55.1 -> 52.3 us, d128 52.8 -> 50.3, d256 52.1 -> 51.1; a plain read of
// O and dO takes 50 us there.
__device__ __forceinline__ uint4 load_row_piece(const void* src) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src));
  return v;
}

template <class Element, int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kPreprocessThreads) bwd_preprocess_kernel(const __grid_constant__ BwdPreParams<Element> p) {
  using Shape = PreprocessShape<kHeadDim>;
  // 80-row blocks (d = 128) end mid-pass: the last pass's rows past the block are left alone.
  constexpr int kPasses = (kBlockM + Shape::kRowsPerPass - 1) / Shape::kRowsPerPass;
  constexpr bool kPartialPass = kBlockM % Shape::kRowsPerPass != 0;
  // Whether this thread's row of `pass` belongs to the block (always, unless it ends mid-pass).
  auto in_block = [](int pass, int row_in_pass) {
    return !kPartialPass || pass * Shape::kRowsPerPass + row_in_pass < kBlockM;
  };
  allow_dependent_launch();  // the main kernel's setup may overlap this grid (launch.hpp, PDL)
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const fwd::SeqInfo si = fwd::seq_info(p, batch);
  if (m_block * kBlockM >= si.seqlen_q) return;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t stats_base = head * p.rows_per_head +
                             padded_row_start<kBlockM>(varlen, batch, si.q_offset, p.seqlen_q_rounded);
  const Element* out = head_rows(p.out, p.out_stride, varlen, si.q_offset, batch, head);
  const Element* dout = head_rows(p.dout, p.dout_stride, varlen, si.q_offset, batch, head);
  const float* lse = p.lse + (varlen ? si.q_offset : batch * p.lse_batch_stride) + head * p.lse_head_stride;

  const int lane_in_row = threadIdx.x % Shape::kLanes;
  const int row_in_pass = threadIdx.x / Shape::kLanes;
  // Every load of the block, the rows' LSE included, is issued before any arithmetic (rows are
  // 16-byte aligned: checked by the API); rows past seqlen_q read nothing. The block's dq_accum
  // is cleared after them. The LSE read after the sums cost a second round trip: 50.6 -> 40.9 us
  // at d64, 41.8 -> 39.7 at d128 for 16k tokens x 2048 (H200, perf-log session 24).
  uint4 o[kPasses][Shape::kVecs], d[kPasses][Shape::kVecs];
  float row_lse[kPasses];  // read by the row's first lane
  CUTE_UNROLL
  for (int pass = 0; pass < kPasses; ++pass) {
    const int row = m_block * kBlockM + pass * Shape::kRowsPerPass + row_in_pass;
    const bool reads_lse = lane_in_row == 0 && row < si.seqlen_q && in_block(pass, row_in_pass);
    row_lse[pass] = reads_lse ? lse[row] : -INFINITY;
    CUTE_UNROLL
    for (int v = 0; v < Shape::kVecs; ++v) {
      const int col = (v * Shape::kLanes + lane_in_row) * 8;
      o[pass][v] = d[pass][v] = make_uint4(0, 0, 0, 0);
      if (row < si.seqlen_q && in_block(pass, row_in_pass)) {
        o[pass][v] = load_row_piece(out + row * p.out_stride.row + col);
        d[pass][v] = load_row_piece(dout + row * p.dout_stride.row + col);
      }
    }
  }
  if (p.dq_accum_cleared) {
    float4* dq_block = reinterpret_cast<float4*>(p.dq_accum + (stats_base + m_block * kBlockM) * kHeadDim);
    constexpr int kDqVecs = kBlockM * kHeadDim / 4;
    static_assert(kDqVecs % kPreprocessThreads == 0);
    CUTE_UNROLL
    for (int i = 0; i < kDqVecs / kPreprocessThreads; ++i)
      dq_block[i * kPreprocessThreads + threadIdx.x] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  CUTE_UNROLL
  for (int pass = 0; pass < kPasses; ++pass) {
    const int row = m_block * kBlockM + pass * Shape::kRowsPerPass + row_in_pass;
    float dot = 0.f;
    CUTE_UNROLL
    for (int v = 0; v < Shape::kVecs; ++v) {
      // Pairwise from the words (indexing the vectors as Element arrays made ptxas spill 48 B at
      // fp16 d64).
      const uint32_t ow[4] = {o[pass][v].x, o[pass][v].y, o[pass][v].z, o[pass][v].w};
      const uint32_t dw[4] = {d[pass][v].x, d[pass][v].y, d[pass][v].z, d[pass][v].w};
      CUTE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const auto of = unpack_pair<Element>(ow[e]), df = unpack_pair<Element>(dw[e]);
        dot += of[0] * df[0];
        dot += of[1] * df[1];
      }
    }
    CUTE_UNROLL
    for (int off = Shape::kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffff, dot, off);
    if (lane_in_row == 0 && in_block(pass, row_in_pass)) {
      constexpr float kLog2e = 1.4426950408889634f;
      const bool valid = row < si.seqlen_q;
      const float l = row_lse[pass];
      p.dsum[stats_base + row] = valid ? dot : 0.f;
      p.lse_log2[stats_base + row] = l == -INFINITY ? INFINITY : l * kLog2e;
    }
  }
}

}  // namespace hopattn::kernels::bwd
