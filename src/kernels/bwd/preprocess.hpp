// Backward preprocessing, per (query block, head, batch entry):
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

#include <algorithm>
#include <cute/algorithm/tuple_algorithms.hpp>
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
// O and dO takes 50 us there. kEvictFirst (the concurrent form): the lines leave L2 first, so
// that the stream does not push the main kernel's working set (dq_accum, the pairs' Q and dO) out
// of L2 while both run (the policy lives in a uniform register).
// The piece kByteOffset bytes past `base`, as an immediate of the load: one address register
// pair serves all pieces of a row (inline asm cannot fold an offset computed outside it, and the
// concurrent form's 64 registers a thread had no room for a pair per piece at d256).
template <bool kEvictFirst, int kByteOffset>
__device__ __forceinline__ uint4 load_row_piece(const void* base) {
  uint4 v;
  if constexpr (kEvictFirst) {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));  // pure: computed once
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4+%5], %6;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(base), "n"(kByteOffset), "l"(policy));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4+%5];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(base), "n"(kByteOffset));
  }
  return v;
}

// Query block m_block of (head, batch), by kPreprocessThreads threads (tid: 0 ..
// kPreprocessThreads - 1, whole warps); false if the block has no rows (varlen). The passes go in
// rounds of at most kMaxVecsInFlight 16-byte pieces of each tensor per thread (0: one round): the
// concurrent form's 1024-thread CTAs have 64 registers a thread, which d256's 2 x 8 pieces filled.
template <class Element, int kHeadDim, int kBlockM, bool kEvictFirst = false, int kMaxVecsInFlight = 0>
__device__ __forceinline__ bool preprocess_block(const BwdPreParams<Element>& p, int m_block, int head, int batch,
                                                 int tid) {
  using Shape = PreprocessShape<kHeadDim>;
  // 80-row blocks (d = 128) end mid-pass: the last pass's rows past the block are left alone.
  constexpr int kPasses = (kBlockM + Shape::kRowsPerPass - 1) / Shape::kRowsPerPass;
  constexpr bool kPartialPass = kBlockM % Shape::kRowsPerPass != 0;
  constexpr int kRoundPasses =
      kMaxVecsInFlight == 0 ? kPasses : std::max(1, std::min(kPasses, kMaxVecsInFlight / Shape::kVecs));
  // Whether this thread's row of `pass` belongs to the block (always, unless it ends mid-pass).
  auto in_block = [](int pass, int row_in_pass) {
    return pass < kPasses && (!kPartialPass || pass * Shape::kRowsPerPass + row_in_pass < kBlockM);
  };
  const fwd::SeqInfo si = fwd::seq_info(p, batch);
  if (m_block * kBlockM >= si.seqlen_q) return false;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t stats_base = head * p.rows_per_head +
                             padded_row_start<kBlockM>(varlen, batch, si.q_offset, p.seqlen_q_rounded);
  const Element* out = head_rows(p.out, p.out_stride, varlen, si.q_offset, batch, head);
  const Element* dout = head_rows(p.dout, p.dout_stride, varlen, si.q_offset, batch, head);
  const float* lse = p.lse + (varlen ? si.q_offset : batch * p.lse_batch_stride) + head * p.lse_head_stride;

  const int lane_in_row = tid % Shape::kLanes;
  const int row_in_pass = tid / Shape::kLanes;
  // Not unrolled: unrolled, ptxas hoisted the later rounds' loads above the first round's sums
  // and spilled (36 B at d256).
#pragma unroll 1
  for (int round = 0; round < kPasses; round += kRoundPasses) {
    // Every load of the round, the rows' LSE included, is issued before any arithmetic (rows are
    // 16-byte aligned: checked by the API); rows past seqlen_q read nothing. The block's dq_accum
    // is cleared after the first round's loads. The LSE read after the sums cost a second round
    // trip: 50.6 -> 40.9 us at d64, 41.8 -> 39.7 at d128 for 16k tokens x 2048 (H200, perf-log
    // session 24).
    uint4 o[kRoundPasses][Shape::kVecs], d[kRoundPasses][Shape::kVecs];
    float row_lse[kRoundPasses];  // read by the row's first lane
    CUTE_UNROLL
    for (int i = 0; i < kRoundPasses; ++i) {
      const int pass = round + i;
      const int row = m_block * kBlockM + pass * Shape::kRowsPerPass + row_in_pass;
      const bool reads_lse = lane_in_row == 0 && row < si.seqlen_q && in_block(pass, row_in_pass);
      row_lse[i] = reads_lse ? lse[row] : -INFINITY;
      const bool loads = row < si.seqlen_q && in_block(pass, row_in_pass);
      const Element* o_row = out + row * p.out_stride.row + lane_in_row * 8;
      const Element* d_row = dout + row * p.dout_stride.row + lane_in_row * 8;
      cute::for_each(cute::make_int_sequence<Shape::kVecs>{}, [&](auto v) {
        constexpr int kOffset = decltype(v)::value * Shape::kLanes * 8 * int(sizeof(Element));
        o[i][v] = loads ? load_row_piece<kEvictFirst, kOffset>(o_row) : make_uint4(0, 0, 0, 0);
        d[i][v] = loads ? load_row_piece<kEvictFirst, kOffset>(d_row) : make_uint4(0, 0, 0, 0);
      });
    }
    if (round == 0 && p.dq_accum_cleared) {
      float4* dq_block = reinterpret_cast<float4*>(p.dq_accum + (stats_base + m_block * kBlockM) * kHeadDim);
      constexpr int kDqVecs = kBlockM * kHeadDim / 4;
      static_assert(kDqVecs % kPreprocessThreads == 0);
      CUTE_UNROLL
      for (int i = 0; i < kDqVecs / kPreprocessThreads; ++i)
        dq_block[i * kPreprocessThreads + tid] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    CUTE_UNROLL
    for (int i = 0; i < kRoundPasses; ++i) {
      const int pass = round + i;
      const int row = m_block * kBlockM + pass * Shape::kRowsPerPass + row_in_pass;
      float dot = 0.f;
      CUTE_UNROLL
      for (int v = 0; v < Shape::kVecs; ++v) {
        // Pairwise from the words (indexing the vectors as Element arrays made ptxas spill 48 B at
        // fp16 d64).
        const uint32_t ow[4] = {o[i][v].x, o[i][v].y, o[i][v].z, o[i][v].w};
        const uint32_t dw[4] = {d[i][v].x, d[i][v].y, d[i][v].z, d[i][v].w};
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
        const float l = row_lse[i];
        p.dsum[stats_base + row] = valid ? dot : 0.f;
        p.lse_log2[stats_base + row] = l == -INFINITY ? INFINITY : l * kLog2e;
      }
    }
  }
  return true;
}

// One CTA per (query block, head, batch entry), before the main kernel.
template <class Element, int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kPreprocessThreads) bwd_preprocess_kernel(const __grid_constant__ BwdPreParams<Element> p) {
  allow_dependent_launch();  // the main kernel's setup may overlap this grid (launch.hpp, PDL)
  preprocess_block<Element, kHeadDim, kBlockM>(p, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
}

// The concurrent form (launch.hpp, concurrent_preprocess_sms): a few CTAs of kPreprocessGroups
// groups of kPreprocessThreads, one CTA per SM (a main-kernel CTA needs a whole SM, so each of
// these keeps one SM from it). They allow the main kernel's launch first thing: its CTAs start at
// once on the SMs this grid leaves free, the rest as these CTAs finish. Each group claims query
// blocks in (batch entry, KV head) pair order, the order of the main kernel's tiles, and counts
// each finished block for its pair (p.pair_stats_ready); the main kernel's load warp waits for a
// pair's count before it loads the pair's lse_log2 and dsum rows (producer.hpp). So the main
// kernel runs while the rest of the preprocess streams O and dO from memory, instead of after it.
// Nothing here waits for another grid, so the main kernel's waits always end. Not where dq_accum
// is cleared (launch.hpp).
constexpr int kPreprocessGroups = 4;

template <class Element, int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kPreprocessThreads* kPreprocessGroups, 1)
    bwd_preprocess_concurrent_kernel(const __grid_constant__ BwdPreParams<Element> p) {
  allow_dependent_launch();
  __shared__ int claimed[kPreprocessGroups][2];  // the block claimed for each group's next turn, by parity
  // The group's index, its named barrier (1 + group) and the thread's index in it are read again
  // where used rather than held through the block's loads: at d64 (128-row blocks, 4 passes) the
  // 64 registers of a 1024-thread CTA spilled 4 bytes with them held.
  auto group = [] { return int(threadIdx.x) / kPreprocessThreads; };
  auto leader = [] { return threadIdx.x % kPreprocessThreads == 0; };
  auto group_sync = [&] { named_barrier_sync(1 + group(), kPreprocessThreads); };
  const int blocks_per_pair = p.head_group * p.num_m_blocks;
  if (leader()) claimed[group()][0] = atomicAdd(p.item_counter, 1);
  group_sync();
  for (int turn = 0;; ++turn) {
    const int item = claimed[group()][turn % 2];
    if (item >= p.batch * p.nheads_k * blocks_per_pair) break;
    // Claimed a turn ahead: the atomic's round trip overlaps this block's loads.
    if (leader()) claimed[group()][(turn + 1) % 2] = atomicAdd(p.item_counter, 1);
    const int pair = item / blocks_per_pair, in_pair = item % blocks_per_pair;
    const int head = pair % p.nheads_k * p.head_group + in_pair / p.num_m_blocks;
    const bool has_rows = preprocess_block<Element, kHeadDim, kBlockM, /*kEvictFirst=*/true, /*kMaxVecsInFlight=*/4>(
        p, in_pair % p.num_m_blocks, head, pair / p.nheads_k, threadIdx.x % kPreprocessThreads);
    group_sync();  // every row of the block written; claimed[group][turn % 2] read by all
    if (leader() && has_rows) {
      // The release covers the group's row writes, which the barrier ordered before it
      // (session 39's first form added a __threadfence here; its cost was not measured alone).
      const int done_pair = claimed[group()][turn % 2] / blocks_per_pair;
      asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(p.pair_stats_ready + done_pair) : "memory");
    }
  }
}

}  // namespace hopattn::kernels::bwd
