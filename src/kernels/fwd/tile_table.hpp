// The one table of forward tile shapes, per (head dim). Reasoning, with 227 KB of shared memory
// and 64K registers per SM, one CTA per SM:
//  * smem = Q (M x d, twice where it fits) + stages * (K + V) (N x d each), 2 bytes per element;
//  * registers per consumer thread while the softmax of S_next runs under O += P V:
//    S_next (N/2 fp32) + P (N/4 packed pairs) + O (d/2 fp32) must fit 240 (2 consumer WGs) or
//    160 (3 WGs) with the addressing and softmax state.
//   d    M    N  stages  smem KB      S_next + P + O
//   64  192  128   2      24*2 + 64   64 + 32 + 32 = 128 of 160
//   96  128  128   2      24*2 + 96   64 + 32 + 48 = 144 of 240
//  128  128  176   2      32 + 176    88 + 44 + 64 = 196 of 240 (one Q buffer)
//  192  128   96   2      48 + 144    48 + 24 + 96 = 168 of 240 (one Q buffer)
//  256  128   80   2      64 + 160    40 + 20 + 128 = 188 of 240 (one Q buffer)
// The short-key (staged epilogue) and masked long-key kernels use NarrowTileShape below.
// Measured choices and their history are in docs/perf-log.md.
#pragma once

#include <type_traits>

#include "kernels/fwd/traits.hpp"
#include "kernels/fwd/traits_fp8.hpp"
#include "kernels/registry.hpp"

namespace hopattn::kernels::fwd {

// Each row can be overridden at configure time for experiments without editing this file:
// -DHOPATTN_TILE_OVERRIDES="128:128,176,2,1" (head dim: M,N,stages,overlap) defines
// HOPATTN_TILE_HD128_M, _N, _S and _O (nvcc splits -D values at commas, hence four macros).
// overlap = 1: intra-warpgroup GEMM/softmax overlap (Algorithm 2); 0: Algorithm 1 consumer,
// fewer live registers (no S_next next to P), for tiles whose softmax share is small.
#define HOPATTN_TILE_DEFAULT_HD64 192, 128, 2, 1
#define HOPATTN_TILE_DEFAULT_HD96 128, 128, 2, 1
#define HOPATTN_TILE_DEFAULT_HD128 128, 176, 2, 1
#define HOPATTN_TILE_DEFAULT_HD192 128, 96, 2, 1
#define HOPATTN_TILE_DEFAULT_HD256 128, 80, 2, 1

struct TileDims {
  int M, N, stages, overlap;
};

template <int kHeadDim>
struct TileShape;

#define HOPATTN_TILE_ROW(D, ...)                                        \
  template <>                                                           \
  struct TileShape<D> {                                                 \
    static constexpr TileDims dims{__VA_ARGS__};                        \
    static constexpr int M = dims.M, N = dims.N, stages = dims.stages;  \
    static constexpr bool overlap = dims.overlap != 0;                  \
  };
#define HOPATTN_TILE_OVERRIDE(D) \
  HOPATTN_TILE_HD##D##_M, HOPATTN_TILE_HD##D##_N, HOPATTN_TILE_HD##D##_S, HOPATTN_TILE_HD##D##_O
#ifdef HOPATTN_TILE_HD64_M
HOPATTN_TILE_ROW(64, HOPATTN_TILE_OVERRIDE(64))
#else
HOPATTN_TILE_ROW(64, HOPATTN_TILE_DEFAULT_HD64)
#endif
#ifdef HOPATTN_TILE_HD96_M
HOPATTN_TILE_ROW(96, HOPATTN_TILE_OVERRIDE(96))
#else
HOPATTN_TILE_ROW(96, HOPATTN_TILE_DEFAULT_HD96)
#endif
#ifdef HOPATTN_TILE_HD128_M
HOPATTN_TILE_ROW(128, HOPATTN_TILE_OVERRIDE(128))
#else
HOPATTN_TILE_ROW(128, HOPATTN_TILE_DEFAULT_HD128)
#endif
#ifdef HOPATTN_TILE_HD192_M
HOPATTN_TILE_ROW(192, HOPATTN_TILE_OVERRIDE(192))
#else
HOPATTN_TILE_ROW(192, HOPATTN_TILE_DEFAULT_HD192)
#endif
#ifdef HOPATTN_TILE_HD256_M
HOPATTN_TILE_ROW(256, HOPATTN_TILE_OVERRIDE(256))
#else
HOPATTN_TILE_ROW(256, HOPATTN_TILE_DEFAULT_HD256)
#endif
#undef HOPATTN_TILE_OVERRIDE
#undef HOPATTN_TILE_ROW

// FP8 (e4m3): N = 128 keys (one 128-byte V^T row, v_transpose.hpp); stages of K, staged V and
// V^T: smem = Q + 3 * stages * N * d bytes (d = 256: 32 + 192 KB, one Q buffer, 2 stages). M = 128
// (two consumer warpgroups at 224-240 registers), except d = 64's default kernel: M = 192, three
// warpgroups at 152 registers, no spill, +12..33% unmasked at 512-16k and +11..27% causal from
// 2k, but 0.93-0.95x causal at 512-1k, where most tiles hold a diagonal block; so d = 64 keeps
// the 128-row kernel for masks that hide much up to 1k keys (FwdKernelUse::kMasked,
// manifest.cmake), as the 16-bit d = 64 does (perf-log, session 22). Intra-warpgroup overlap
// everywhere: at d = 128 it won early on (731 against 642); d = 256 ran without it until session
// 28 (S_next next to P and a 128-register O spilled at 232 registers) and now takes 240 with a
// 24-register transposing producer: +10.8% at 8k, +5.6% at 1k, 0.99 at 512 (H100). Stages:
// a third gave nothing at d = 128 while the warpgroups passed the pingpong token; without it
// (FwdFp8Traits::kPingpong) +1.4..3.4% at 1k-2k and causal, 8k unchanged, and at d = 64 (both
// kernels) +1.6..2.0% unmasked, causal 1.00-1.005 (H100, session 27). d = 256 has no room.
template <int kHeadDim>
constexpr int kFp8Stages = kHeadDim == 256 ? 2 : 3;
// The output is staged (O through shared memory and TMA stores, output_tile.hpp) in the
// short-key kernel of d = 128 (up to 4096 keys, manifest.cmake) and in d = 256's only kernel, whose
// buffer is the V^T ring: +3.9% at 512, +5.9% causal 512, +0.9..2.5% at 1k, +0.4..1.4% at 2k, and
// +0.4..0.9% at 8k-16k against register stores (H100, perf-log session 29).
template <int kHeadDim, FwdKernelUse kUse>
constexpr bool kFp8StagedOutput = kUse == FwdKernelUse::kShortKeys || kHeadDim == 256;
template <int kHeadDim, FwdKernelUse kUse = FwdKernelUse::kDefault>
using DefaultFwdFp8Traits = FwdFp8Traits<kHeadDim, kHeadDim == 64 && kUse == FwdKernelUse::kDefault ? 192 : 128,
                                         128, kFp8Stages<kHeadDim>, true, kFp8StagedOutput<kHeadDim, kUse>>;

// The other kernels of a head dim (manifest.cmake) keep N = 128: the short-key kernels have a
// staged epilogue whose O buffer (32 KB at d = 128) must fit next to double-buffered Q and the
// K/V rings, and the masked long-key kernel exists because 176-key tiles lose 3-5% to 128-key
// ones under a causal mask (perf-log, session 6). HOPATTN_TILE_OVERRIDES does not reach this row.
struct NarrowTileShape {
  static constexpr int M = 128, N = 128, stages = 2;
  static constexpr bool overlap = true;
};
template <int kHeadDim, FwdKernelUse kUse>
using TileRow = std::conditional_t<kUse == FwdKernelUse::kDefault, TileShape<kHeadDim>, NarrowTileShape>;

// kIntraWgOverlap = false is the ablation variant; true takes the table's choice. kUse: which
// problems the kernel serves (registry.hpp); the short-key kernels store O through a shared-memory
// buffer and a TMA store (output_tile.hpp), the kernels with one Q buffer through their V ring
// (FwdTraits::kOutputInVRing), the others from registers.
template <class Element, int kHeadDim, bool kIntraWgOverlap = true, FwdKernelUse kUse = FwdKernelUse::kDefault,
          class Row = TileRow<kHeadDim, kUse>>
using DefaultFwdTraits = FwdTraits<Element, kHeadDim, Row::M, Row::N, Row::stages, kIntraWgOverlap && Row::overlap,
                                   kUse == FwdKernelUse::kShortKeys>;

// The Table 2 ablation without warp specialization (FwdTraits::kWarpSpecialized): intra-warpgroup
// overlap, its loads issued by a consumer thread. The 128 x 128 tile, not d128's 128 x 176: with
// 176 keys the kernel spilled 60 B at 255 registers (no setmaxnreg pool to draw from). Three ring
// stages (one Q buffer) measured 0.98-0.99 of two (H100, perf-log session 44). The warp-specialized
// kernel with this tile is `fwd_sm90_bf16_hd128_masked` (the Table 2 variant `ws-128-key-tile`).
template <class Element, int kHeadDim, class Row = NarrowTileShape>
using NoWarpSpecializationFwdTraits =
    FwdTraits<Element, kHeadDim, Row::M, Row::N, Row::stages, Row::overlap, false, /*kWarpSpecialized=*/false>;

}  // namespace hopattn::kernels::fwd
