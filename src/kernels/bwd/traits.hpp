// Compile-time shape of one backward kernel: one CTA tile is a block of kBlockN keys (the dK, dV
// rows it owns); it walks the query blocks of kBlockM rows that see those keys. Each consumer
// warpgroup owns 64 of the keys, so S^T, dP^T, dK and dV of its rows stay in its registers.
//
// The GEMMs, all per warpgroup (M = 64 keys of the warpgroup unless noted):
//   S^T  = K Q^T        SS   A = K (smem)         B = Q (smem, K-major)       MmaSdP
//   dP^T = V dO^T       SS   A = V (smem)         B = dO (smem, K-major)      MmaSdP
//   dV  += P^T dO       RS   A = P^T (registers)  B = dO^T (smem, MN-major)   MmaDKV
//   dK  += dS^T Q       RS   A = dS^T (registers) B = Q^T (smem, MN-major)    MmaDKV
//   dQ   = dS K         SS   A = dS (smem, MN-major, all keys of both warpgroups)
//                             B = K^T (smem, MN-major)   MmaDQ: M = queries, N = d, split in two
// Computing the transposes S^T and dP^T (keys as rows) is what lets P^T and dS^T feed the dV and
// dK GEMMs straight from registers. dQ is split between the warpgroups so that each holds only
// half of it (registers are the limit: dK and dV already take d/2 each per thread); in exchange
// both warpgroups' dS must be in shared memory before either dQ GEMM starts. With 64-row steps
// the split is along d (64 x d/2 each); with 128-row steps (d = 64) along the queries (64 x d
// each), so that the GEMM's N is d = 64 rather than 32: an SS WGMMA with N = 32 reads 3 KB of
// shared memory per 16 tensor-core cycles, more than the 128 B per cycle the SM delivers.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/numeric_types.h>

#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/traits.hpp"

namespace hopattn::kernels::bwd {

// What the dQ writer needs of its current tile (dq_writer.hpp). In deterministic mode it keeps
// this in shared memory (SharedStorage::writer_tile) and reads each field where it is used: in
// warpgroup 0's few registers the ordering's search and polls left no room to hold them.
struct WriterTile {
  int64_t stats_row0;
  int n_block, kv_head, m_begin, m_end, m_first, seqlen_q, seqlen_k;
};

// The dQ hand-off's pieces per step (dq_writer.hpp): with 2, smem.dq is a ring of two half
// buffers, so that the consumers fill one while the writer's bulk op still reads the other. Here
// (d <= 128) one: two measured 0.83-0.90 at d64 and 0.94-0.97 at d128 unmasked (H100, session
// 31): a second fence and barrier arrival per step cost more than the overlap gains where a
// step's dQ is one 32 KB op. The wide kernel takes two at d = 256 (tile_table.hpp).
// Experiments: =2.
#ifndef HOPATTN_BWD_DQ_PIECES
#define HOPATTN_BWD_DQ_PIECES 1
#endif

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_ = 64, int kBlockN_ = 128, int kStages_ = 2>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kBlockN = kBlockN_;  // keys per CTA tile
  static constexpr int kStages = kStages_;  // depth of the Q / dO ring
  // Whether this instance takes only dense problems (no mask, softcap or partial key tile:
  // tile_table.hpp's DenseBwdTraits; the dispatch rule is is_dense_bwd_problem, bwd_args.hpp).
  static constexpr bool kDense = false;
  // Whether dQ comes from a stored dS (stored_ds.hpp): the wide kernel only.
  static constexpr bool kStoreDs = false;
  // One ring for Q and dO (one empty barrier per stage, qdo_empty); the wide kernel may give Q
  // more stages than dO (traits_wide.hpp, kSplitQdoRings).
  static constexpr bool kSplitQdoRings = false;

  // Warpgroup 0: warp 0 loads (TMA), warp 1 writes dQ. Warpgroups 1..: consumers, 64 keys each.
  static constexpr int kNumConsumerWgs = kBlockN / 64;
  static constexpr int kNumConsumerThreads = kNumConsumerWgs * 128;
  static constexpr int kNumThreads = kNumConsumerThreads + 128;
  // The pool setmaxnreg redistributes is what the launch allocated, 168 x 384 threads; asking
  // for more faults. 40 x 128 + 232 x 256 = 64512 fits exactly: the consumers need 226 at
  // d = 128. The consumers get what warpgroup 0 leaves, rounded down to a multiple of 8: 232
  // (the same with 32 or 40 for warpgroup 0), or 240 with 24 for warpgroup 0: at d = 64, where
  // the consumers spilled 24 B at 232 and run 2-4% faster at 240 (session 21; warpgroup 0's
  // loops were slimmed to fit 24: producer.hpp, dq_writer.hpp), and for 80-row steps
  // (kDqTransposed), which at 232 serialize every WGMMA. d > 64 keeps 40 (at d128, 24 measured
  // 0.5-1% below it). Experiments: -DHOPATTN_BWD_PRODUCER_REGS=24, 32 or 40 overrides.
  static_assert(kNumConsumerWgs == 2, "the dQ hand-off assumes two consumer warpgroups");

  // Measured choices (docs/perf-log.md, session 8), by the size of the dK + dV accumulators:
  // * kRebuildDescriptorsPerStep: rebuild the shared-memory operand descriptors in every step
  //   rather than once per kernel. Once per kernel, ptxas holds them in ~40 registers, which at
  //   d = 128 pushed the loop state out to local memory (320 B of spills, 11 reloads per step);
  //   at d = 64 the hoisted descriptors fit and let the short GEMMs issue back to back.
  // * kOverlapSteps: issue the next step's S^T = K Q^T behind this step's dQ GEMM, so that the
  //   dQ hand-off runs under a GEMM (needs 32 more live registers; at d = 64 it measured slower).
  //   HOPATTN_EXP_SERIAL_STEPS turns it off everywhere, for the ablation.
#ifdef HOPATTN_EXP_REBUILD_DESCRIPTORS
  static constexpr bool kRebuildDescriptorsPerStep = true;
#else
  static constexpr bool kRebuildDescriptorsPerStep = kHeadDim > 64;
#endif
#ifdef HOPATTN_EXP_SERIAL_STEPS
  static constexpr bool kOverlapSteps = false;
#elif defined(HOPATTN_EXP_OVERLAP_STEPS)
  static constexpr bool kOverlapSteps = true;
#else
  static constexpr bool kOverlapSteps = kHeadDim > 64;
#endif
  static_assert(kBlockM % 16 == 0, "query rows per step: a multiple of the WGMMA K slice");
  // 128-row steps (d = 64): one WGMMA M-tile of queries per consumer warpgroup.
  static constexpr bool kWideSteps = kBlockM == 64 * kNumConsumerWgs;
  // Steps of a row count that is no WGMMA M (80 at d = 128): dQ is computed transposed,
  // dQ^T = K^T dS^T, with d as M (64 per warpgroup) and the step's queries as N.
  static constexpr bool kDqTransposed = kBlockM % 64 != 0;
  static_assert(!kDqTransposed || kHeadDim == 64 * kNumConsumerWgs, "dQ^T: one 64-row M-tile of d per warpgroup");
#ifdef HOPATTN_BWD_PRODUCER_REGS
  static constexpr int kProducerRegs = HOPATTN_BWD_PRODUCER_REGS;
#else
  static constexpr int kProducerRegs = kDqTransposed || kHeadDim == 64 ? 24 : 40;
#endif
  static constexpr int kConsumerRegs = (168 * 3 - kProducerRegs) / kNumConsumerWgs / 8 * 8;  // 232 (24: 240)
  static_assert(kProducerRegs * 128 + kConsumerRegs * kNumConsumerThreads <= 168 * kNumThreads);
  // The producer loads a tile's first Q and dO before its K and V (producer.hpp): +0.3..2.9% at
  // d128 (H100, session 25); at d = 64 its flag spilled 16 B of warpgroup 0's 24 registers.
  static constexpr bool kFirstQBeforeKv = kProducerRegs > 24;
  // How the dQ GEMM is split between the two warpgroups (see the header comment).
#ifndef HOPATTN_BWD_DQ_SPLIT_ROWS
#define HOPATTN_BWD_DQ_SPLIT_ROWS 1
#endif
  static constexpr bool kDqSplitRows = HOPATTN_BWD_DQ_SPLIT_ROWS && kWideSteps;
  static constexpr int kDqCols = kDqSplitRows ? kHeadDim : kHeadDim / kNumConsumerWgs;  // N per warpgroup
  // dQ one step behind dS (consumer.hpp): +7..17% at d = 64 (128-row steps) unmasked from 1k
  // on an H200; at d = 128 (64-row steps, the next S^T already prefetched behind dQ) 0.94-1.08
  // over three calls, and the mbarrier bookkeeping alone cost 4-9% at 1k-4k (docs/perf-log.md,
  // session 16).
#ifdef HOPATTN_EXP_BWD_LAG_ALL
  static constexpr bool kLagDq = true;  // experiments: the lagged schedule at d96 / d128 too
#else
  static constexpr bool kLagDq = kWideSteps;
#endif
  // Experiment, measured neutral (0.995-1.015 at d128, H200, perf-log session 21): in the steps
  // that prefetch the next S^T, wait for dQ first, store it, then issue S^T and only then fence
  // and publish dQ, so that dQ's shared stores do not queue behind S^T's operand reads (the
  // fence was ~12% of the samples at d128, session 19). Lockstep kernels only.
#ifdef HOPATTN_EXP_DQ_STORES_FIRST
  static constexpr bool kDqStoresFirst = true;
#else
  static constexpr bool kDqStoresFirst = false;
#endif

  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using ConsumerAtoms = Layout<Shape<Int<kNumConsumerWgs>, _1, _1>>;

  using MmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kHeadDim>>>(),
      ConsumerAtoms{}));
  using MmaDKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      ConsumerAtoms{}));
  using MmaDQ = std::conditional_t<
      kDqTransposed,
      decltype(make_tiled_mma(  // dQ^T = K^T dS^T: A = K^T, B = dS^T, both MN-major in smem
          GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kBlockN>>,
                               GMMA::Major::MN, GMMA::Major::MN>(),
          ConsumerAtoms{})),
      decltype(make_tiled_mma(
          GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqCols>, Int<kBlockN>>,
                               GMMA::Major::MN, GMMA::Major::MN>(),
          std::conditional_t<kDqSplitRows, ConsumerAtoms, Layout<Shape<_1, Int<kNumConsumerWgs>, _1>>>{}))>;
  // The dQ accumulator's tile: (queries, d), or (d, queries) when transposed.
  using DqTile = std::conditional_t<kDqTransposed, Shape<Int<kHeadDim>, Int<kBlockM>>, Shape<Int<kBlockM>, Int<kHeadDim>>>;

  using SmemAtom = decltype(fwd::k_major_smem_atom<Element, kHeadDim>());
  // K is also the MN-major B operand of the dQ GEMM: where its N = d is split between the
  // warpgroups, K's swizzle atom must not straddle d/2 (d = 96: 32-byte atoms).
  using SmemAtomK = decltype(fwd::k_major_smem_atom<Element, kDqCols>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutdO = SmemLayoutQ;
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // Transposed views of the same bytes, as MN-major B operands.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                 Stride<Int<kBlockM>, _1, Int<kHeadDim * kBlockM>>{})));
  using SmemLayoutdOt = SmemLayoutQt;
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Stride<Int<kBlockN>, _1>{})));
  // dS: (queries, keys, buffer), queries contiguous (MN-major A of the dQ GEMM, or its B when
  // transposed), double-buffered so that a warpgroup may write the next step's dS while the
  // other still reads this one. dSt is the (keys, queries, buffer) view the consumers write
  // through. The swizzle is the widest whose atom (64, 32 or 16 queries) divides the step's rows.
  using SmemAtomdS = std::conditional_t<
      kBlockM % 64 == 0, GMMA::Layout_MN_SW128_Atom<Element>,
      std::conditional_t<kBlockM % 32 == 0, GMMA::Layout_MN_SW64_Atom<Element>, GMMA::Layout_MN_SW32_Atom<Element>>>;
  using SmemLayoutdS = decltype(tile_to_shape(SmemAtomdS{}, Shape<Int<kBlockM>, Int<kBlockN>, _2>{}));
  using SmemLayoutdSt = decltype(composition(
      SmemLayoutdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>, _2>{},
                                  Stride<Int<kBlockM>, _1, Int<kBlockM * kBlockN>>{})));

  using GmemShape = typename fwd::GmemView<Element>::Shape_;
  using GmemTensor = typename fwd::GmemView<Element>::Tensor_;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}), TileQ{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutK{}, TileKV{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutV{}, TileKV{}, _1{}));

  // dK and dV leave through a shared buffer, one 64-row half per warpgroup, and a TMA store per
  // half (epilogue.hpp), so that the consumers do not wait on the store pipe at every tile's end.
  // -DHOPATTN_BWD_STAGED_GRADS=0: register stores only.
#ifndef HOPATTN_BWD_STAGED_GRADS
#define HOPATTN_BWD_STAGED_GRADS 1
#endif
  // Not with 80-row steps (kDqTransposed): their 40 KB Q, dO, dS and dQ leave no room.
  static constexpr bool kStagedGrads = HOPATTN_BWD_STAGED_GRADS && !kDqTransposed;
  using GradTileWg = Shape<_64, Int<kHeadDim>>;
  using SmemLayoutGrad = decltype(tile_to_shape(fwd::k_major_smem_atom<Element, kHeadDim>(),
                                                Shape<_64, Int<kHeadDim>, Int<kNumConsumerWgs>>{}));
  using TmaGrad = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, take<0, 2>(SmemLayoutGrad{}), GradTileWg{}, _1{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesRowStats = kBlockM * sizeof(float);
  // Per-thread share of a block's dQ (64 x d floats over both warpgroups).
  static constexpr int kDqPerThread = kBlockM * kHeadDim / kNumConsumerThreads;
  static_assert(kDqPerThread % 4 == 0, "dQ partials move as float4");
  static constexpr int kDqChunks = 1;  // dQ GEMMs per step and warpgroup (dq_writer.hpp)
  static constexpr int kDqPieces = HOPATTN_BWD_DQ_PIECES;  // hand-offs per chunk (dq_writer.hpp)
  static constexpr int kDqBuffers = kDqPieces;             // smem.dq's ring, one piece each
  static constexpr int kDqPieceFloats = kBlockM * kHeadDim / (kDqChunks * kDqPieces);  // a buffer
  static_assert(kDqPerThread % (4 * kDqPieces) == 0, "dQ pieces move as float4");
  static_assert(!kDqStoresFirst || kDqPieces == 1, "the stores-first experiment hands dQ off in one piece");
  static constexpr bool kSplitHeadDim = false;  // this consumer (consumer.hpp), not consumer_wide.hpp

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutdO>> dout;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutdS>> ds;
    // dK, then dV, of the finished tile on their way to the TMA store (kStagedGrads).
    alignas(1024) cute::array_aligned<Element, kStagedGrads ? cute::cosize_v<SmemLayoutGrad> : 8> grad;
    // The block's dQ in the consumers' register order (see consumer.hpp), bulk-added to global
    // memory by the dQ writer: kDqBuffers buffers of one piece each.
    alignas(128) float dq[kDqPieceFloats * kDqBuffers];
    alignas(16) float lse_log2[kStages][kBlockM];  // LSE * log2(e); +inf for rows without keys
    alignas(16) float dsum[kStages][kBlockM];      // D = rowsum(dO * O)
    // Barriers: see docs/design/bwd.md for what each one means.
    alignas(8) uint64_t kv_full, kv_empty;
    uint64_t q_full[kStages], do_full[kStages], qdo_empty[kStages];
    uint64_t dq_full[kDqBuffers], dq_empty[kDqBuffers];  // one pair per buffer of smem.dq
    uint64_t ds_full[2], ds_empty[2];  // dS buffer b: both warpgroups stored / read it
    fwd::TileRing tiles;
    WriterTile writer_tile;  // deterministic mode only
    int writer_pair;         // the dQ writer's current (batch, KV head) pair (concurrent dQ conversion only)
    // The tile scheduler's counter (BwdKernelParams::tile_counter), read from here at each claim:
    // a copy held in a register through the producer's loop was spilled at 24 registers.
    int* tile_counter;
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");
};

}  // namespace hopattn::kernels::bwd
