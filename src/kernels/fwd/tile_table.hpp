// The one table of forward tile shapes, per (head dim). Reasoning, with 227 KB of shared memory
// and 64K registers per SM, one CTA per SM:
//  * smem = Q (M x d) + stages * (K + V) (N x d each), 2 bytes per element;
//  * registers per consumer thread ~ S (N/2 fp32) + O (d/2 fp32) + P (N/4 packed) + S_next
//    when overlapping GEMM and softmax: must fit 240 (2 consumer WGs) or 160 (3 WGs).
//   d    M    N  stages  smem KB  consumer regs (S + S_next + O + P)
//   64  192  128   2       88     64 + 64 + 32 + 32 = 192 > 160? S_next reuses after copy: fits
//   96  128  128   2      120     64 + 64 + 48 + 32
//  128  128  128   2      160     64 + 64 + 64 + 32
//  192  128   96   2      192     48 + 48 + 96 + 24
//  256  128   80   2      224     40 + 40 + 128 + 20
// Measured choices and their history are in docs/perf-log.md.
#pragma once

#include "kernels/fwd/traits.hpp"
#include "kernels/fwd/traits_fp8.hpp"

namespace hopattn::kernels::fwd {

// Each row can be overridden at configure time for experiments without editing this file:
// -DHOPATTN_TILE_OVERRIDES="128:128,176,2,1" (head dim: M,N,stages,overlap) defines
// HOPATTN_TILE_HD128_M, _N, _S and _O (nvcc splits -D values at commas, hence four macros).
// overlap = 1: intra-warpgroup GEMM/softmax overlap (Algorithm 2); 0: Algorithm 1 consumer,
// fewer live registers (no S_next next to P), for tiles whose softmax share is small.
#define HOPATTN_TILE_DEFAULT_HD64 192, 96, 2, 1
#define HOPATTN_TILE_DEFAULT_HD96 128, 128, 2, 1
#define HOPATTN_TILE_DEFAULT_HD128 128, 128, 2, 1
#define HOPATTN_TILE_DEFAULT_HD192 128, 96, 2, 1
#define HOPATTN_TILE_DEFAULT_HD256 128, 64, 2, 1

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

// FP8 (e4m3): M = 128 (two consumer warpgroups), N = 128 keys (one 128-byte V^T row,
// v_transpose.hpp), 2 stages of K, staged V and V^T: smem = Q + 3 * stages * N * d bytes (d = 256:
// 32 + 192 KB, one Q buffer). Intra-warpgroup overlap except at d = 256, where S_next next to
// P and a 128-register O spilled 116 bytes: without it, 8 bytes and +12% (860 -> 960 TFLOP/s at
// 8k); at d = 128 overlap wins (731 against 642). A third stage gave nothing at d = 128.
template <int kHeadDim>
using DefaultFwdFp8Traits = FwdFp8Traits<kHeadDim, 128, 128, 2, (kHeadDim < 256), false>;

// kIntraWgOverlap = false is the ablation variant; true takes the table's choice. kStagedEpilogue:
// O through shared memory and a TMA store (output_tile.hpp); manifest.cmake lists the head dims
// that get such a kernel next to the register-store one, and for which sequence lengths.
template <class Element, int kHeadDim, bool kIntraWgOverlap = true, bool kStagedEpilogue = false>
using DefaultFwdTraits = FwdTraits<Element, kHeadDim, TileShape<kHeadDim>::M, TileShape<kHeadDim>::N,
                                   TileShape<kHeadDim>::stages, kIntraWgOverlap && TileShape<kHeadDim>::overlap,
                                   kStagedEpilogue>;

}  // namespace hopattn::kernels::fwd
