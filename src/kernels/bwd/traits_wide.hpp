// Compile-time shape of the backward kernel for head dims 192 and 256, where 64 x d FP32 dK and
// dV accumulators per warpgroup no longer fit in registers (consumer_wide.hpp). One CTA tile is
// a block of 64 keys; both consumer warpgroups work on all of them, splitting each GEMM along
// another dimension:
//
//   S^T  = K Q^T      SS  64 keys x 32 queries each (the step's queries split)    MmaSdP
//   dP^T = V dO^T     SS  64 keys x 32 queries each                               MmaSdP
//   dV  += P^T dO     SS  64 keys x d/2 columns each, A = P^T from shared memory  MmaDKV
//   dK  += dS^T Q     SS  64 keys x d/2 columns each, A = dS^T from shared memory MmaDKV
//   dQ    = dS K      SS  64 queries x d/2 columns each, in kDqChunks GEMMs      MmaDQChunk
//
// Per consumer thread: dK, dV 2 x d/4 registers, S^T and dP^T 16 each, dQ d/4. P^T and dS^T go
// through shared memory (stmatrix) because each warpgroup's dK/dV GEMM needs the scores of both
// warpgroups' queries. Q and dO stages, dQ chunks and P/dS buffers: tile_table.hpp.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/arch/mma_sm90.hpp>

#include "kernels/bwd/traits.hpp"  // WriterTile
#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/traits.hpp"

namespace hopattn::kernels::bwd {

using namespace cute;

template <class Element_, int kHeadDim_, int kQStages_, int kDoStages_, int kDqChunks_, int kPdsBuffers_,
          int kDqPieces_, int kDqBuffers_>
struct BwdWideTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 64;  // query rows per step
  static constexpr int kBlockN = 64;  // keys per CTA tile
  static constexpr bool kDense = false;  // as BwdTraits::kDense
  // Whether the consumers store dS for the dQ kernel instead of computing dQ (StoredDsBwdTraits,
  // tile_table.hpp; stored_ds.hpp).
  static constexpr bool kStoreDs = false;
  // Q and dO have rings of their own (q_full / q_empty, do_full / do_empty): at d = 256 two Q
  // stages fit next to one dO stage, so that the next step's S^T (Q only) can be issued under
  // the dQ hand-off while dO, which lands later, is needed only by the step's dP^T.
  static constexpr bool kSplitQdoRings = true;
  static constexpr int kQStages = kQStages_;
  static constexpr int kDoStages = kDoStages_;
  static_assert(kQStages >= kDoStages, "Q is read first in a step: it never has fewer stages than dO");
  // The next step's dP^T is prefetched with its S^T only where dO has as many stages as Q
  // (consumer_wide.hpp); otherwise it is issued at the step's start.
  static constexpr bool kPrefetchDpT = kQStages == kDoStages;
  static constexpr bool kSplitHeadDim = true;
  static constexpr bool kLagDq = false;  // the narrow consumer's schedule (traits.hpp)

  static constexpr int kNumConsumerWgs = 2;
  static constexpr int kNumConsumerThreads = kNumConsumerWgs * 128;
  static constexpr int kNumThreads = kNumConsumerThreads + 128;
  static constexpr int kProducerRegs = 40;  // as traits.hpp: 40 x 128 + 232 x 256 fits the pool
  static constexpr int kConsumerRegs = 232;
  // Q before K and V at a tile's start (traits.hpp): +0.8..1.2% over the early K/V release alone
  // at d = 256 512-2k (H100, session 25).
  static constexpr bool kFirstQBeforeKv = true;

  static constexpr int kHalfDim = kHeadDim / 2;  // dK, dV, dQ columns per warpgroup
  // dQ per warpgroup in kDqChunks GEMMs, each handed to the writer (in kDqPieces pieces, through
  // a ring of kDqBuffers buffers of a piece) while the next one runs.
  static constexpr int kDqChunks = kDqChunks_;
  static constexpr int kDqPieces = kDqPieces_;    // hand-offs per chunk (dq_writer.hpp)
  static constexpr int kDqBuffers = kDqBuffers_;  // smem.dq's ring, one piece each
  static_assert(kDqPieces >= 1 && kDqBuffers >= 1, "at least one dQ piece and buffer");
  static constexpr int kDqPieceFloats = kBlockM * kHeadDim / (kDqChunks * kDqPieces);  // a buffer
  static constexpr int kDqChunkCols = kHalfDim / kDqChunks;
  // P^T and dS^T buffers: with two, a warpgroup may store the next step's while the other still
  // reads this one's; with one, the consumers also sync before storing (pds_free).
  static constexpr int kPdsBuffers = kPdsBuffers_;
  static_assert(kHeadDim == 192 || kHeadDim == 256, "the wide backward kernel is for head dims 192 and 256");
  static_assert(kHalfDim % kDqChunks == 0 && kDqChunkCols % 8 == 0, "whole WGMMA N-tiles per dQ chunk");
  static_assert(kPdsBuffers == 1 || kPdsBuffers == 2);
  // Issue the next step's S^T and dP^T under the last dQ hand-off (consumer_wide.hpp);
  // HOPATTN_EXP_SERIAL_STEPS turns it off, as in traits.hpp.
#ifdef HOPATTN_EXP_SERIAL_STEPS
  static constexpr bool kOverlapSteps = false;
#else
  static constexpr bool kOverlapSteps = true;
#endif

  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using SplitN = Layout<Shape<_1, Int<kNumConsumerWgs>, _1>>;  // warpgroup w takes the N-half w

  using MmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM / 2>, Int<kHeadDim>>>(), SplitN{}));
  using MmaDKV = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kHalfDim>, Int<kBlockM>>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      SplitN{}));
  // The whole block's dQ as two warpgroups would hold it in one GEMM each: the register order
  // the dQ accumulator in global memory is kept in (dq_writer.hpp, postprocess.hpp).
  using MmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kHalfDim>, Int<kBlockN>>, GMMA::Major::MN,
                           GMMA::Major::MN>(),
      SplitN{}));
  static constexpr bool kDqTransposed = false;  // as traits.hpp: dQ's tile is (queries, d)
  using DqTile = Shape<Int<kBlockM>, Int<kHeadDim>>;
  // One warpgroup's chunk of it, the GEMM the consumers issue (B sliced per warpgroup and chunk).
  using MmaDQChunk = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqChunkCols>, Int<kBlockN>>, GMMA::Major::MN,
                           GMMA::Major::MN>()));

  // Swizzle atoms must not straddle the column ranges a warpgroup's GEMM reads: Q and dO are
  // split in halves (dK, dV), K in dQ chunks.
  using SmemLayoutQ = decltype(tile_to_shape(fwd::k_major_smem_atom<Element, kHalfDim>(),
                                             Shape<Int<kBlockM>, Int<kHeadDim>, Int<kQStages>>{}));
  using SmemLayoutdO = decltype(tile_to_shape(fwd::k_major_smem_atom<Element, kHalfDim>(),
                                              Shape<Int<kBlockM>, Int<kHeadDim>, Int<kDoStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(fwd::k_major_smem_atom<Element, kDqChunkCols>(),
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutV = decltype(tile_to_shape(fwd::k_major_smem_atom<Element, kHeadDim>(),
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kQStages>>{},
                                 Stride<Int<kBlockM>, _1, Int<kHeadDim * kBlockM>>{})));
  using SmemLayoutdOt = decltype(composition(
      SmemLayoutdO{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kDoStages>>{},
                                  Stride<Int<kBlockM>, _1, Int<kHeadDim * kBlockM>>{})));
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Stride<Int<kBlockN>, _1>{})));
  // P^T and dS^T: (keys, queries, buffer), queries contiguous: the K-major A operand of the
  // dV/dK GEMMs. dS is the same bytes as (queries, keys, buffer), the MN-major A of dQ.
  using SmemLayoutPt = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                              Shape<Int<kBlockN>, Int<kBlockM>, Int<kPdsBuffers>>{}));
  using SmemLayoutdS = decltype(composition(
      SmemLayoutPt{}, make_layout(Shape<Int<kBlockM>, Int<kBlockN>, Int<kPdsBuffers>>{},
                                  Stride<Int<kBlockN>, _1, Int<kBlockM * kBlockN>>{})));

  using GmemShape = typename fwd::GmemView<Element>::Shape_;
  using GmemTensor = typename fwd::GmemView<Element>::Tensor_;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}), TileQ{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutK{}, TileKV{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutV{}, TileKV{}, _1{}));

  // The stored dS (stored_ds.hpp): dS^T tiles of (64 keys, 64 queries) as in smem.ds, written
  // by the main kernel's TMA stores and read back by the dQ kernel's TMA loads. Its global
  // tensor is (keys, queries, heads, batch), queries contiguous: the GmemView type, with the
  // query count in the place of the head dim.
  using TileDs = Shape<Int<kBlockN>, Int<kBlockM>>;
  using SmemLayoutDsTile = decltype(take<0, 2>(SmemLayoutPt{}));
  using TmaDsStore = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, SmemLayoutDsTile{}, TileDs{}, _1{}));
  using TmaDsLoad = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutDsTile{}, TileDs{}, _1{}));

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesKV = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesDs = kBlockN * kBlockM * sizeof(Element);
  static constexpr uint32_t kBytesRowStats = kBlockM * sizeof(float);
  static constexpr int kDqPerThread = kBlockM * kHeadDim / kNumConsumerThreads;
  // dK and dV from registers (no shared memory left for a staging buffer; traits.hpp).
  static constexpr bool kStagedGrads = false;
  using GradTileWg = TileKV;
  using SmemLayoutGrad = SmemLayoutV;
  using TmaGrad = TmaV;
  static_assert(kDqPerThread % (4 * kDqChunks * kDqPieces) == 0, "dQ pieces move as float4");

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutdO>> dout;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutPt>> pt;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutPt>> ds;
    // kDqBuffers pieces of the block's dQ in the consumers' register order (dq_writer.hpp).
    alignas(128) float dq[kDqPieceFloats * kDqBuffers];
    alignas(16) float lse_log2[kQStages][kBlockM];  // loaded with Q
    alignas(16) float dsum[kDoStages][kBlockM];     // loaded with dO
    alignas(8) uint64_t kv_full, kv_empty;
    uint64_t q_full[kQStages], q_empty[kQStages], do_full[kDoStages], do_empty[kDoStages];
    uint64_t dq_full[kDqBuffers], dq_empty[kDqBuffers];  // one pair per buffer of smem.dq
    fwd::TileRing tiles;
    WriterTile writer_tile;  // deterministic mode only (traits.hpp)
    int writer_pair;         // the dQ writer's current pair (concurrent dQ conversion only, traits.hpp)
    int* tile_counter;       // the scheduler's counter, read at each claim (traits.hpp)
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in shared memory");
};

}  // namespace hopattn::kernels::bwd
