// Compile-time shape of the FP8 (e4m3) forward kernel. It differs from the 16-bit kernel in
// three places, all forced by FP8 WGMMA accepting only K-major shared-memory operands:
//  * V arrives by TMA into a staging ring (keys x d, d contiguous) and the producer warpgroup
//    transposes it into the V^T ring (d x keys, keys contiguous) that P V reads
//    (v_transpose.hpp). The consumers see the V^T ring under the names `v`, `v_full`, `v_empty`,
//    so the mainloop is the same code as for 16-bit inputs.
//  * The whole producer warpgroup works (one thread of warp 0 issues TMA, warps 1..3 transpose),
//    so it keeps more registers than the 16-bit producer.
//  * P is converted to e4m3 and its keys are permuted within each 32-key slice (see
//    fp8_key_permutation in v_transpose.hpp); V^T is written with the same permutation.
// Scores are accumulated from the codes and scaled per row (q descale) and per key block (k
// descale) inside the softmax's one FFMA per element; V's descale rescales O (consumer.hpp).
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/numeric_types.h>

#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/traits.hpp"

// Experiment switch for FwdFp8Traits::kRecomputeOnTensorCores: 0 = the per-element recompute
// everywhere, 1 = warp MMAs in FP8 d256 (the default), 2 = in d128 and d64's 128-row kernel too.
#ifndef HOPATTN_EXP_RECOMPUTE_MMA
#define HOPATTN_EXP_RECOMPUTE_MMA 1
#endif

namespace hopattn::kernels::fwd {

using namespace cute;

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kIntraWgOverlap_ = true,
          bool kStagedEpilogue_ = false>
struct FwdFp8Traits {
  using Element = cutlass::float_e4m3_t;
  static constexpr bool kFp8 = true;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;  // depth of the K, V-staging and V^T rings
  static constexpr bool kIntraWgOverlap = kIntraWgOverlap_;
  static constexpr bool kWarpSpecialized = true;  // traits.hpp (the ablation is 16-bit only)
  // Measured 3-9% slower (traits.hpp); without the pingpong token 0.98-1.00 (session 27).
  static constexpr bool kSoftmaxUnderOwnPv = false;
  static constexpr bool kNarrowFirstBlock = false;  // traits.hpp (16-bit only: P's e4m3 keys are permuted)
  static constexpr bool kNarrowFirstPv = false;
  static constexpr bool kEmptyFirstBlock = false;
  static constexpr int kNarrowKeys = kBlockN_;
  // d = 256: wait for P V of the previous block before the softmax rather than after it, so that
  // the V^T slot is released a softmax earlier (its two ring stages leave the transposers about
  // one iteration): +0.6..1.6% (H100, perf-log session 28). At d = 64 and 128 (three stages) the
  // softmax under the warpgroup's own P V is worth more: the same wait measured 0.93-0.99 there.
  static constexpr bool kPvWaitBeforeSoftmax = kHeadDim_ >= 256;
  // The idle-warpgroup path (traits.hpp) with three consumer warpgroups only: with two, the
  // warp-uniform warpgroup index it needs (kernel.hpp) measured 2-4% slower at 8k, where no
  // warpgroup idles anyway; with three (192-row tiles) it gained +4..6% at 512-1k and +0..1%
  // beyond (1024 = 5 x 192 + 64 leaves two of the last tile's warpgroups idle; perf-log,
  // session 22).
  static constexpr bool kSkipIdleWarpgroups = kBlockM_ == 192;
  // Blocks after a tile's first run their exps against the kept row offsets without taking the
  // block's row maxima (OnlineSoftmax, "max-free blocks"): +2..18% at d64, +0..4% at d128,
  // -6..+7% at d256 against taking them (perf-log, session 14).
  static constexpr bool kMaxFreeBlocks = true;
  static constexpr bool kRecomputeAfterPvWait = false;  // deferred: d64 0.84-0.97 (traits.hpp)
  // The rare recompute on warp MMAs (score_recompute.hpp): where every block recomputes, d256
  // ran 12x faster and d64's 128-row kernel 10x (perf-log, session 55). On in d256, whose hot
  // path it leaves unchanged (1k 1.006, 8k 0.998, 5 rounds, session 56). Not in d128 and d64's
  // 128-row kernel: no spills, but d128 1k read 0.983 and d64 causal 1k 0.980 (d128 causal 1k
  // and 8k 1.00-1.01; 5 rounds, session 56), an instruction-order effect (same counts in the
  // SASS); -DHOPATTN_EXP_RECOMPUTE_MMA=2 builds it there. Never in d64's 192-row kernel (three
  // consumer warpgroups of 152 registers: it spilled 40 bytes into the mainloop, -1.9% at 1k).
  static constexpr bool kRecomputeOnTensorCores =
      kBlockM_ == 128 && ((HOPATTN_EXP_RECOMPUTE_MMA >= 1 && kHeadDim_ >= 256) || HOPATTN_EXP_RECOMPUTE_MMA >= 2);
  // Pingpong (traits.hpp): d = 256 only. Since the max-free blocks shortened the softmax (session
  // 14), the token costs more than it orders at d = 64 and 128: without it d128 +5..12% unmasked
  // and +2..8% causal, d64 +1.6..3.2% (its 1k unmasked -1%; H100, perf-log session 27). At d = 256
  // (as in FlashAttention-3's FP8 kernel) causal 1k-2k +1..3% in two A/B runs, 512-1k within noise
  // (-2..+4%), 8k unchanged (H200, perf-log session 51); FwdTuning::disable_pingpong turns it off
  // there. -DHOPATTN_EXP_PINGPONG=0 / 1 builds the token out of / into every head dim.
  static constexpr bool kPingpong = HOPATTN_EXP_PINGPONG > 0 || (HOPATTN_EXP_PINGPONG < 0 && kHeadDim_ >= 256);
  // d = 256 with overlap: a Q descriptor held through the tile spilled 5 x 8 bytes inside the
  // loop at 240 registers; rebuilt per block (traits.hpp) it does not.
  static constexpr bool kRebuildQDescriptor = kHeadDim_ >= 256 && kIntraWgOverlap_;
  static_assert(kBlockN % 32 == 0, "FP8 P V consumes keys in k32 slices");
  static_assert(kBlockN == 128, "the V^T rows are one 128-byte swizzle row (v_transpose.hpp)");
  static_assert(kHeadDim % 16 == 0, "the transpose works on 16-column ranges of d");

  static constexpr int kNumConsumerWgs = kBlockM / 64;
  static_assert(kNumConsumerWgs == 2 || kNumConsumerWgs == 3, "2 or 3 consumer warpgroups");
  // WindowMask::apply's relative form (traits.hpp), run at d = 64 and 128 (session 22); d = 256
  // (spills at its register limits, design/fwd-fp8.md) keeps the absolute one.
  static constexpr bool kRelativeMaskBounds = kHeadDim < 256;
  static constexpr int kNumConsumerThreads = kNumConsumerWgs * 128;
  static constexpr int kNumProducerThreads = 128;  // warp 0 loads, warps 1..3 transpose V
  static constexpr int kNumTransposeThreads = 96;
  static constexpr int kNumThreads = kNumConsumerThreads + kNumProducerThreads;
  // 56 + 2 * 224 = 504 = 3 * 168, the registers per thread the launch itself allocates
  // (65536 / 384, rounded down to 8): setmaxnreg only moves registers within that pool, so a
  // larger sum makes the consumers' increase wait forever (it did: a first 64 + 2 * 224 hung).
  // 56 fits either producer role (the loader's TMA views, the transpose's 16 loaded words) with
  // no spill. d = 256 with intra-warpgroup overlap needs 240 per consumer (O 128 + S_next 64 +
  // P 16 registers): 24 + 2 * 240, with the transpose that runs in 24 (VTransposeLdsm: its range
  // loop without spills, some of the block loop's state in local memory); without
  // overlap 40 + 2 * 232. Three consumer warpgroups (d = 64, M = 192): the pool is 65536 / 512 =
  // 128 per thread, so 56 + 3 * 152 = 512.
  static constexpr bool kSlimProducer = kHeadDim >= 256 && kIntraWgOverlap_;
  static constexpr int kProducerRegs = kHeadDim >= 256 ? (kSlimProducer ? 24 : 40) : 56;
  static constexpr int kConsumerRegs = kNumConsumerWgs == 3 ? 152 : kHeadDim >= 256 ? (kSlimProducer ? 240 : 232) : 224;
  // The transpose (v_transpose.hpp): ldmatrix.trans / stmatrix (VTransposeLdsm) at d >= 128: d = 256
  // needs it to fit 24 registers, and at d = 128 it measured +3.5..4.7% (fewer instructions); at
  // d = 64 (64-byte staging rows) 0.97-1.00, so d = 64 keeps VTranspose (H100, perf-log session 28).
  static constexpr bool kLdmatrixTranspose = kHeadDim >= 128;
  static_assert(kLdmatrixTranspose || kProducerRegs > 24, "VTranspose needs more than 24 registers");
  static_assert(kProducerRegs + kNumConsumerWgs * kConsumerRegs <= 65536 / kNumThreads / 8 * 8 * (kNumThreads / 128),
                "setmaxnreg budgets exceed the launch's register pool");

  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using ConsumerAtoms = Layout<Shape<Int<kNumConsumerWgs>, _1, _1>>;

  using MmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      ConsumerAtoms{}));
  // O += P V^T: both operands K-major (keys contiguous), which is why V is transposed.
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>>(),
      ConsumerAtoms{}));

  static constexpr int kSmemQBytes = kBlockM * kHeadDim;
  static constexpr int kSmemKVBytes = 3 * kStages * kBlockN * kHeadDim;  // K, V staging, V^T
  static constexpr int kQStages = 2 * kSmemQBytes + kSmemKVBytes + 1024 <= 227 * 1024 ? 2 : 1;
  static constexpr bool kPrefetchNextQ = kQStages == 1;  // traits.hpp; d = 256 here

  using SmemAtom = decltype(k_major_smem_atom<Element, kHeadDim>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kQStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutVStage = SmemLayoutK;  // V as TMA writes it: (keys, d)
  using SmemLayoutV = SmemLayoutVStage;  // the name the launcher builds the V tensor map with
  using SmemLayoutVt = decltype(tile_to_shape(k_major_smem_atom<Element, kBlockN>(),
                                              Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}));

  using GmemShape = typename GmemView<Element>::Shape_;
  using GmemTensor = typename GmemView<Element>::Tensor_;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}), TileQ{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutK{}), TileKV{}, _1{}));
  // 2-CTA clusters as in traits.hpp: K and the V staging ring are multicast (each CTA loads half
  // of a block into both CTAs' stages); the transposers and the V^T ring stay local. Against one
  // CTA per tile (H100, perf-log session 44): d256 +2.4..3.5% at 1k-16k keys, 512 within +-2.6%
  // over two runs; d64 -7% at 1k and d128 -3% at 512, within 1% beyond, and d64's masked kernel
  // spilled 20 B with the cluster path: d256 only.
  static constexpr bool kClusterKV = HOPATTN_EXP_FWD_CLUSTER != 0 && kHeadDim_ >= 256;
  using TmaKVMulticast = decltype(make_tma_copy(SM90_TMA_LOAD_MULTICAST{}, GmemTensor{}, take<0, 2>(SmemLayoutK{}),
                                                TileKV{}, _2{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim;
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim;

  // The output is 16-bit (bf16 or fp16), staged or not as in FwdTraits. Where no buffer fits next
  // to the rings (d = 256: 224 KB), a staged O goes into the V^T ring (output_tile.hpp): 2 x 128
  // keys x 256 bytes is exactly 128 rows of 256 16-bit values.
  static constexpr bool kOutputInVRing =
      kStagedEpilogue_ &&
      kQStages * kSmemQBytes + kSmemKVBytes + OutputTile<kHeadDim, kNumConsumerWgs, true>::kBytes + 2048 > 227 * 1024;
  // As FwdTraits: each warpgroup waits only for the P Vs that read its own V^T slot (epilogue.hpp).
  static constexpr bool kOutputWaitsRingStages = kOutputInVRing && HOPATTN_EXP_O_RING_STAGE_WAIT != 0;
  using Output = OutputTile<kHeadDim, kNumConsumerWgs, kStagedEpilogue_, kOutputInVRing>;
  static_assert(!kOutputInVRing || Output::kBytes <= kStages * kBlockN * kHeadDim,
                "the staged output does not fit in the V^T ring");
  static_assert(!kOutputInVRing || !kSkipIdleWarpgroups,
                "every consumer warpgroup runs the in-ring epilogue's wait and arrives on o_staged");

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutVStage>> v_stage;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>> v;  // V^T
    typename Output::Storage o;
    alignas(8) uint64_t q_full[kQStages], q_empty[kQStages];
    uint64_t o_staged;  // Output::kInVRing: every consumer thread has written its O rows into the V^T ring
    uint64_t k_full[kStages], k_empty[kStages];
    uint64_t v_stage_full[kStages], v_stage_empty[kStages];  // TMA -> transposing warps
    uint64_t v_full[kStages], v_empty[kStages];              // transposing warps -> consumers
    float k_descale[kStages], v_descale[kStages];  // of the key tile in K stage s (fp8_scales.hpp)
    float q_tensor_descale[kQStages], v_tensor_descale[kQStages];  // of the tile in Q stage s (fp8_scales.hpp)
    // cluster_kv: the peer CTA's loader has seen its copy of K / V staging stage s freed.
    uint64_t k_peer_free[kStages], v_peer_free[kStages];
    uint64_t peer_done;  // cluster_kv: every consumer thread of the peer CTA is done (kernel.hpp)
    TileRing tiles;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");
};

}  // namespace hopattn::kernels::fwd
