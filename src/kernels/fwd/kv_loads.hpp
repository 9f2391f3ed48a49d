// How a loader issues one K or V block into a freed stage, for its block walk: whole blocks from
// this CTA, or, in 2-CTA clusters (FwdKernelParams::cluster_kv), this CTA's half of each block
// multicast into both CTAs' stages, so that the pair reads its keys from L2 once (a stage's full
// barrier still expects the whole block, half from the peer's load). The 16-bit producer and the
// FP8 loader both walk their blocks through these.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

// A K stage's bytes, with the loader's arrive (kArrive) or without it (the caller arrives later).
template <bool kArrive>
__device__ __forceinline__ void announce_k_bytes(uint64_t& k_full, uint32_t bytes) {
  if constexpr (kArrive) expect_bytes(k_full, bytes);
  else expect_bytes_only(k_full, bytes);
}

// Runs `walk_blocks(issue_k, issue_v)` (a loader's block walk; issue(n, stage, lap parity) is
// called once the loader's own side freed the stage) with issuers that load whole blocks into
// this CTA's stages. sK/gK, sV/gV: the rings' shared stages and the global blocks; v_full: the
// full barriers of the ring V lands in (the V ring; FP8: the staging ring). `load` false (a
// timing experiment of producer.hpp) arrives with no bytes and loads nothing. With kKArrives
// false the K issuer only announces the block's bytes (announce_k_bytes): the caller arrives on
// k_full itself once it has stored what it publishes with the stage (the FP8 loader's descales).
template <bool kKArrives = true, class T, class SK, class GK, class SV, class GV, class Walk>
__device__ __forceinline__ void walk_whole_blocks(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                  const SK& sK, const GK& gK, const SV& sV, const GV& gV,
                                                  uint64_t* v_full, Walk&& walk_blocks, bool load = true) {
  using namespace cute;
  auto k_views = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto v_views = tma_partition(p.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  walk_blocks(
      [&](int n, int stage, uint32_t) {
        announce_k_bytes<kKArrives>(smem.k_full[stage], load ? T::kBytesKV : 0);
        if (load) copy(p.tma_k.with(smem.k_full[stage]), get<0>(k_views)(_, n), get<1>(k_views)(_, stage));
      },
      [&](int n, int stage, uint32_t) {
        expect_bytes(v_full[stage], load ? T::kBytesKV : 0);
        if (load) copy(p.tma_v.with(v_full[stage]), get<0>(v_views)(_, n), get<1>(v_views)(_, stage));
      });
}

// As walk_whole_blocks, in 2-CTA clusters: the issuers first exchange the word
// that the stage is free with the peer (exchange_stage_free), then load this CTA's half of block
// n into stage `stage` of both CTAs. The multicast descriptors tma_k_mc / tma_v_mc describe the
// same tensors with the same layouts as tma_k / tma_v (launch.hpp), so their views partition the
// blocks alike. kKArrives: as walk_whole_blocks.
template <bool kKArrives = true, class T, class SK, class GK, class SV, class GV, class Walk>
__device__ __forceinline__ void walk_multicast_halves(const FwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                      const SK& sK, const GK& gK, const SV& sV, const GV& gV,
                                                      uint64_t* v_full, Walk&& walk_blocks) {
  using namespace cute;
  const uint32_t rank = uint32_t(TileScheduler::cluster_rank());
  constexpr uint16_t kBothCtas = 0b11;
  auto k_half = tma_partition(p.tma_k_mc, rank, Layout<_2>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto v_half = tma_partition(p.tma_v_mc, rank, Layout<_2>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  walk_blocks(
      [&](int n, int stage, uint32_t phase) {
        exchange_stage_free(smem.k_peer_free[stage], phase, rank ^ 1u);
        announce_k_bytes<kKArrives>(smem.k_full[stage], T::kBytesKV);
        copy(p.tma_k_mc.with(smem.k_full[stage], kBothCtas), get<0>(k_half)(_, n), get<1>(k_half)(_, stage));
      },
      [&](int n, int stage, uint32_t phase) {
        exchange_stage_free(smem.v_peer_free[stage], phase, rank ^ 1u);
        expect_bytes(v_full[stage], T::kBytesKV);
        copy(p.tma_v_mc.with(v_full[stage], kBothCtas), get<0>(v_half)(_, n), get<1>(v_half)(_, stage));
      });
}

}  // namespace hopattn::kernels::fwd
