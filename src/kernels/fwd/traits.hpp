// Compile-time shape of one forward kernel: tile sizes, warpgroup roles and register budgets,
// shared-memory layouts, the two tiled WGMMAs and the TMA copy types. The tile table that picks
// these per head dim is tile_table.hpp.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/numeric_types.h>

#include "kernels/fwd/layouts.hpp"
#include "kernels/fwd/output_tile.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

// Experiment switch for FwdTraits::kMaxFreeBlocks: -1 = the measured choice per head dim.
#ifndef HOPATTN_MAX_FREE_16BIT
#define HOPATTN_MAX_FREE_16BIT -1
#endif
// Experiment switch for every forward kernel's pingpong policy (kPingpong): 1 on, 0 off, -1 the
// per-kernel defaults.
#ifndef HOPATTN_EXP_PINGPONG
#define HOPATTN_EXP_PINGPONG -1
#endif
// Experiment switch for FwdTraits::kNarrowFirstBlock: 0 off, 1 the scores and softmax of a narrow
// first block over its first kNarrowKeys keys (its P V over the whole block, the rest of P zero),
// 2 its P V over those keys too (the default), 3 as 2 in every kernel where it fits, whatever
// the head dim.
#ifndef HOPATTN_EXP_NARROW_FIRST_BLOCK
#define HOPATTN_EXP_NARROW_FIRST_BLOCK 2
#endif
// Experiment switch for FwdTraits::kEmptyFirstBlock: 1 on (where kNarrowFirstBlock is), 0 off.
#ifndef HOPATTN_EXP_EMPTY_FIRST_BLOCK
#define HOPATTN_EXP_EMPTY_FIRST_BLOCK 1
#endif
// Experiment switch for FwdTraits::kOutputInVRing: -1 the measured choice (every one-Q-buffer
// kernel with intra-warpgroup overlap, split wait), 0 off, 1 on in every one-Q-buffer kernel with
// the producer waiting for both stores before the next tile's first V, 2 as 1 with the split wait.
#ifndef HOPATTN_EXP_O_IN_V_RING
#define HOPATTN_EXP_O_IN_V_RING -1
#endif
// Experiment switch for kOutputWaitsRingStages (the in-ring epilogue's wait before a warpgroup
// writes its O rows into the ring): -1 the measured choice (FP8 on, 16-bit off), 0 off (named
// barrier 7: both warpgroups' last P V), 1 on in every in-ring kernel.
#ifndef HOPATTN_EXP_O_RING_STAGE_WAIT
#define HOPATTN_EXP_O_RING_STAGE_WAIT -1
#endif
// Experiment switch for FwdTraits::kClusterKV (2-CTA clusters with K/V multicast on dense
// problems without a mask): 1 on (measured, session 43), 0 off.
#ifndef HOPATTN_EXP_FWD_CLUSTER
#define HOPATTN_EXP_FWD_CLUSTER 1
#endif

namespace hopattn::kernels::fwd {

using namespace cute;

#ifdef HOPATTN_EXP_FWD_HALF_KV_LOADS
inline constexpr bool kHalfKvLoadsExperiment = true;
#else
inline constexpr bool kHalfKvLoadsExperiment = false;
#endif

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_,
          bool kIntraWgOverlap_ = true, bool kStagedEpilogue_ = false, bool kWarpSpecialized_ = true>
struct FwdTraits {
  using Element = Element_;
  static constexpr bool kFp8 = false;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per CTA tile (64 per consumer warpgroup)
  static constexpr int kBlockN = kBlockN_;  // keys per K/V block
  static constexpr int kStages = kStages_;  // depth of the K and V shared-memory rings
  static constexpr bool kIntraWgOverlap = kIntraWgOverlap_;
  // false: the Table 2 ablation without warp specialization (inline_loader.hpp): no producer
  // warpgroup; one consumer thread issues the TMA loads between its own GEMMs, tiles are taken in
  // a fixed stride, O leaves from registers, and there is no pingpong token and no cluster.
  static constexpr bool kWarpSpecialized = kWarpSpecialized_;
  static_assert(kWarpSpecialized_ || kIntraWgOverlap_, "the ablation without warp specialization keeps the overlap");
  // Keep the softmax of block n above the wait for P V of block n+1, so that it runs under the
  // warpgroup's own P V (consumer.hpp, keep_above_wgmma_wait); left alone, ptxas moves the wait
  // up. Measured per kernel (perf-log, sessions 11 and 12): +1..1.4% for d128's short-key kernel
  // (staged epilogue, 512-2k keys, bf16 and fp16) and +2.2% for its masked 128-key kernel (causal
  // 8k); -1.6% for d96's, 3-9% slower for FP8 and d64, and at d256 -3% (1k) with a 4 B spill;
  // neutral for the 176-key d128 kernel. So: the d128 kernels with 128-key tiles.
  static constexpr bool kSoftmaxUnderOwnPv = kHeadDim_ == 128 && kBlockN_ == 128 && kIntraWgOverlap_;
  static constexpr bool kPvWaitBeforeSoftmax = false;  // traits_fp8.hpp (FP8 d256 only)
  // A consumer warpgroup whose 64 rows all lie past seqlen_q skips its GEMMs and softmax
  // (Consumer::idle_mainloop): +6% at d64 1k (1024 = 5 x 192 + 64), +1..3% at 2k-4k (perf-log,
  // session 12).
  static constexpr bool kSkipIdleWarpgroups = true;
  // Blocks after a tile's first run their exps against the kept row offsets without taking the
  // block's row maxima (OnlineSoftmax, "max-free blocks"). Measured (perf-log, session 15): d96
  // and d128 gain 1..7%, d192 1..7% with the recompute after the wait for P V (below); d256
  // spills 28 bytes and loses 7-10% at 1k-2k, so it keeps the row maxima. d64 since session 22:
  // +4..10% unmasked, +0..6% causal (H200); its three-warpgroup kernel spilled Q's descriptor
  // until it was rebuilt per block (kRebuildQDescriptor).
  // Experiments: -DHOPATTN_MAX_FREE_16BIT=0 (off everywhere) or 1 (on everywhere).
  static constexpr bool kMaxFreeBlocks =
      HOPATTN_MAX_FREE_16BIT >= 0 ? HOPATTN_MAX_FREE_16BIT != 0
                                  : kHeadDim_ == 64 || kHeadDim_ == 96 || kHeadDim_ == 128 || kHeadDim_ == 192;
  // Where the rare score recompute runs (Consumer::scores_to_probs): inside the softmax, or
  // deferred until the wait for P V (then P's registers are free). d192 spills 44 bytes with
  // the first and none with the second; d96, d128 and FP8 (0.84-0.98 deferred) keep the first.
  static constexpr bool kRecomputeAfterPvWait = kHeadDim_ == 192;
  // 16-bit kernels recompute per element: on warp MMAs (m16n8k8 on the raw words) d128's and
  // d192's spilled 40-72 bytes into the mainloop (perf-log, session 55).
  static constexpr bool kRecomputeOnTensorCores = false;
  // The consumer warpgroups pass the GEMM token (pingpong, Consumer's Pingpong); the run-time
  // ablation switch (FwdTuning::disable_pingpong) can only turn it off.
  static constexpr bool kPingpong = HOPATTN_EXP_PINGPONG != 0 && kWarpSpecialized_;
  // Rebuild Q's WGMMA descriptor for every key block (Consumer::run, q_at) instead of holding
  // one per tile: the d64 kernel with three warpgroups at 160 registers spilled it (12 B, one
  // reload per block) with max-free blocks, and spills nothing this way. Only there, so that the
  // other kernels' SASS stays as measured. HOPATTN_EXP_Q_DESC (experiment): 1 on everywhere, 0 off.
#ifndef HOPATTN_EXP_Q_DESC
#define HOPATTN_EXP_Q_DESC -1
#endif
  static constexpr bool kRebuildQDescriptor =
      HOPATTN_EXP_Q_DESC >= 0 ? HOPATTN_EXP_Q_DESC != 0 : kMaxFreeBlocks && kBlockM_ == 192;

  // Warpgroup 0 is the producer (TMA), warpgroups 1.. are the consumers (WGMMA + softmax).
  static constexpr int kNumConsumerWgs = kBlockM / 64;
  // The element-wise mask with bounds relative to each thread's first column (WindowMask::apply):
  // +2..4% on masked blocks of the d64 and d128 kernels with two consumer warpgroups (H200,
  // perf-log session 22); at d96, d192 and d256 since session 26 (H100, against the Q prefetch
  // alone: causal 1k +0.7% at d192, +2% at d96; d256 causal 512-2k 0.999-1.016 with both). The
  // d64 kernel with three (160 registers) spilled 4 B with it.
  static constexpr bool kRelativeMaskBounds = kNumConsumerWgs == 2;
  static constexpr int kNumConsumerThreads = kNumConsumerWgs * 128;
  static constexpr int kNumProducerThreads = kWarpSpecialized_ ? 128 : 0;  // one elected thread works
  static constexpr int kNumTransposeThreads = 0;   // FP8 only (traits_fp8.hpp)
  static constexpr int kNumThreads = kNumConsumerThreads + kNumProducerThreads;
  // setmaxnreg budgets: 64K registers / SM, one CTA per SM. 2 consumers: 24 + 2 * 240 = 504;
  // 3 consumers: 32 + 3 * 160 = 512 (per-thread counts, times 128 threads per warpgroup).
  static constexpr int kProducerRegs = kNumConsumerWgs == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kNumConsumerWgs == 2 ? 240 : 160;
  static_assert(kNumConsumerWgs == 2 || kNumConsumerWgs == 3, "2 or 3 consumer warpgroups");
  // setmaxnreg moves registers within the pool the launch allocated (65536 / threads, rounded
  // down to 8, per thread): a larger sum would make the consumers' increase wait forever.
  static_assert(!kWarpSpecialized_ ||
                    kProducerRegs + kNumConsumerWgs * kConsumerRegs <= 65536 / kNumThreads / 8 * 8 * (kNumThreads / 128),
                "setmaxnreg budgets exceed the launch's register pool");

  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using ConsumerAtoms = Layout<Shape<Int<kNumConsumerWgs>, _1, _1>>;

  // S = Q K^T: A = Q (smem, K-major), B = K (smem, K-major).
  using MmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      ConsumerAtoms{}));
  // A consumer warpgroup whose rows see none of the keys past the first kNarrowKeys of its
  // tile's first key block (the last visible one: the diagonal block under a causal mask;
  // WindowMask::keys_hidden_from) runs that block narrow: S = Q K^T over those keys only
  // (MmaQKNarrow on SmemLayoutKNarrow), the mask and softmax over them, and O += P V over them
  // (Consumer::mainloop). With 128 x 128 tiles under a square causal mask that is warpgroup 0 of
  // every tile: a quarter of the tile's diagonal work. kNarrowKeys is half the block rounded up to
  // whole k16 slices of P V (64 of 128, 48 of 96, 48 of 80). Measured (H100, perf-log session
  // 34, against the full block): d64 causal 512 / 1k / 2k / 8k +2.9 / +2.5 / +3.8 / +0.8%, d192
  // causal 1k / 4k +2.4 / +0.7%; d96 causal 1k +0.7% but 4k -1.1%, d256 causal +0.0..0.7% and
  // unmasked 1k -0.3%, d128 causal 1k-8k 1.005-0.985 and unmasked 2k 0.987 (where no block is
  // narrow: the code shape's cost): d64 and d192 only.
  static constexpr int kNarrowKeys = (kBlockN_ / 2 + 15) / 16 * 16;
  static constexpr bool kNarrowFirstBlock =
      HOPATTN_EXP_NARROW_FIRST_BLOCK != 0 && kNarrowKeys < kBlockN_ && kIntraWgOverlap_ &&
      (kHeadDim_ == 64 || kHeadDim_ == 192 || HOPATTN_EXP_NARROW_FIRST_BLOCK == 3);
  static constexpr bool kNarrowFirstPv = kNarrowFirstBlock && HOPATTN_EXP_NARROW_FIRST_BLOCK >= 2;
  static_assert(kWarpSpecialized_ || !kNarrowFirstBlock, "the inline loader refills only after a full first block");
  // A warpgroup whose rows see no key of that block at all (d64's 192-row tiles: warpgroups 0 and 1
  // of every other causal tile; d192 at times) skips it: no S GEMM, no softmax, a P V of one k16
  // slice of zeros (Consumer::empty_first_block). Measured against narrow blocks alone (H100,
  // perf-log session 34): d64 causal 2k / 4k / 8k +1.9 / +1.9 / +1.0%, 1k 0.999 (its 128-row
  // kernel has no such warpgroup), d192 causal 1k / 4k +0.5 / +0.1%.
  static constexpr bool kEmptyFirstBlock = kNarrowFirstPv && HOPATTN_EXP_EMPTY_FIRST_BLOCK != 0;
  using MmaQKNarrow = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kNarrowKeys>, Int<kHeadDim>>>(),
      ConsumerAtoms{}));
  // O += P V: A = P (registers), B = V^T (smem, MN-major: V rows are stored d-contiguous).
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      ConsumerAtoms{}));

  // Q is double-buffered where shared memory allows (d64, d96, and d128's 128-key kernels; not
  // d128's 176-key kernel, d192 or d256), so that the producer loads the next tile's Q while this
  // tile runs instead of after its last Q K^T.
  static constexpr int kSmemKVBytes = 2 * kStages * kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kSmemQBytes = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kQStages = 2 * kSmemQBytes + kSmemKVBytes + 1024 <= 227 * 1024 ? 2 : 1;

  using SmemAtom = decltype(k_major_smem_atom<Element, kHeadDim>());
  using SmemLayoutQ = decltype(tile_to_shape(
      SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kQStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(
      SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // The first kNarrowKeys keys of each K stage (same addresses as SmemLayoutK; kNarrowFirstBlock).
  using SmemLayoutKNarrow = decltype(composition(
      SmemLayoutK{}, make_layout(Shape<Int<kNarrowKeys>, Int<kHeadDim>, Int<kStages>>{},
                                 Stride<_1, Int<kBlockN>, Int<kBlockN * kHeadDim>>{})));
  using SmemLayoutV = SmemLayoutK;
  // V^T as the B operand of P V: the same bytes viewed as (head_dim, keys, stage).
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{},
                                 Stride<Int<kBlockN>, _1, Int<kHeadDim * kBlockN>>{})));

  // Global tensors as TMA sees them: (rows, head_dim, heads, batch).
  using GmemShape = typename GmemView<Element>::Shape_;
  using GmemTensor = typename GmemView<Element>::Tensor_;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}),
                                      TileQ{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{},
                                       take<0, 2>(SmemLayoutK{}), TileKV{}, _1{}));
  // 2-CTA clusters (FwdKernelParams::cluster_kv, producer.hpp): each CTA loads half of a K or V
  // block and multicasts it to both, so the two query blocks of a pair read their keys from L2
  // once. -DHOPATTN_EXP_FWD_CLUSTER=0 compiles their code out (the barriers stay in
  // SharedStorage, unused); the half-loads timing experiment (producer.hpp) runs without them.
  static constexpr bool kClusterKV = HOPATTN_EXP_FWD_CLUSTER != 0 && !kHalfKvLoadsExperiment && kWarpSpecialized_;
  using TmaKVMulticast = decltype(make_tma_copy(SM90_TMA_LOAD_MULTICAST{}, GmemTensor{},
                                                take<0, 2>(SmemLayoutK{}), TileKV{}, _2{}));

  // With one Q buffer the producer prefetches the next tile's Q to L2 when it claims that tile
  // (producer.hpp): +0.4..1.2% at d256 512-2k, neutral at 4k and at d128's 176-key kernel (H100,
  // perf-log session 26).
  static constexpr bool kPrefetchNextQ = kQStages == 1;

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);

  // kStagedEpilogue_: O leaves through a shared-memory buffer and a TMA store (output_tile.hpp);
  // the buffer must fit next to the rings, with 2 KB kept for the barriers and the tile ring.
  // kOutputInVRing: O is staged in the V ring, which is free between the tile's last P V and the
  // next tile's first V load; the producer stores it by TMA before that load (producer.hpp), so
  // the consumers no longer drain 16-byte global stores at each tile's end. Only where Q has one
  // buffer (d128's 176-key kernel, d192, d256: no room for an O buffer of its own). With the split
  // wait (kOutputInVRingSplit), measured against register stores (H100, perf-log session 42): d256
  // +0.4..1.3% at 512-16k and causal 512-2k (8k 0.99-1.00), d192 +0.5..1.6% at 1k-8k and causal
  // 2k, d128's 176-key kernel +0.3% at 8k-16k; session 29 measured the unsplit form at 0.99-1.00
  // and left it out. Not in the Table 2 ablation kernel (no intra-warpgroup overlap, not measured).
  static constexpr int kOutputInVRingMode =
      HOPATTN_EXP_O_IN_V_RING >= 0 ? HOPATTN_EXP_O_IN_V_RING : (kIntraWgOverlap_ ? 2 : 0);
  static constexpr bool kOutputInVRing =
      kOutputInVRingMode != 0 && !kStagedEpilogue_ && kQStages == 1 && kNumConsumerWgs == 2 && kWarpSpecialized_;
  static constexpr bool kOutputInVRingSplit = kOutputInVRing && kOutputInVRingMode == 2;
  // kOutputWaitsRingStages: before its stmatrix a warpgroup waits only for the P Vs that read the
  // ring stages under its own O rows (epilogue.hpp); otherwise for both warpgroups' last P V.
  static constexpr bool kOutputWaitsRingStages = kOutputInVRing && HOPATTN_EXP_O_RING_STAGE_WAIT > 0;
  using Output = OutputTile<kHeadDim, kNumConsumerWgs, kStagedEpilogue_ || kOutputInVRing, kOutputInVRing>;
  static_assert(!kOutputInVRing || Output::kBytes <= kSmemKVBytes / 2, "the staged O does not fit in the V ring");
  static_assert(!kStagedEpilogue_ ||
                    kQStages * kSmemQBytes + kSmemKVBytes + Output::kBytes + 2048 <= 227 * 1024,
                "no shared memory left for the staged epilogue's buffer");

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutV>> v;
    typename Output::Storage o;
    // Pipeline barriers: see docs/design/fwd.md for what each one means.
    alignas(8) uint64_t q_full[kQStages], q_empty[kQStages];
    uint64_t k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages];
    uint64_t o_staged;  // kOutputInVRing: every consumer thread has written its O rows into the V ring
    // cluster_kv: the peer CTA's producer has seen its copy of K / V stage s freed (producer.hpp).
    uint64_t k_peer_free[kStages], v_peer_free[kStages];
    uint64_t peer_done;  // cluster_kv: every consumer thread of the peer CTA is done (kernel.hpp)
    TileRing tiles;  // producer -> consumers: which tile comes next
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");
};

}  // namespace hopattn::kernels::fwd
