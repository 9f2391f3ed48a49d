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

namespace hopattn::kernels::fwd {

template <int kHeadDim>
struct TileShape;
template <> struct TileShape<64>  { static constexpr int M = 192, N = 128, stages = 2; };
template <> struct TileShape<96>  { static constexpr int M = 128, N = 128, stages = 2; };
template <> struct TileShape<128> { static constexpr int M = 128, N = 128, stages = 2; };
template <> struct TileShape<192> { static constexpr int M = 128, N = 96, stages = 2; };
template <> struct TileShape<256> { static constexpr int M = 128, N = 80, stages = 2; };

template <class Element, int kHeadDim, bool kIntraWgOverlap = true>
using DefaultFwdTraits = FwdTraits<Element, kHeadDim, TileShape<kHeadDim>::M, TileShape<kHeadDim>::N,
                                   TileShape<kHeadDim>::stages, kIntraWgOverlap>;

}  // namespace hopattn::kernels::fwd
