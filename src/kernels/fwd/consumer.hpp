// The consumer warpgroups: per tile, S = Q K^T (SS-WGMMA), mask, online softmax, and
// O += P V (RS-WGMMA with P converted in registers), then the epilogue.
//
// Schedule (kIntraWgOverlap, Algorithm 2 of the paper), key blocks n_end-1 down to n_begin:
//   first block:   S = Q K_n ; wait ; softmax -> P
//   each next n:   issue S = Q K_n ; rescale O if a row max moved ; issue O += P V_{n+1} ;
//                  wait S ; softmax(S) ; wait PV ; P = S
//   last:          rescale O (same rule) ; O += P V_{n_begin} ; wait   (idle warpgroups: idle_mainloop)
// so the softmax of block n runs while the tensor cores do P V of block n+1.
// Pingpong: with two or more consumer warpgroups, each warpgroup issues its GEMMs only when it
// holds the token (named barrier), and hands it on right after issuing, so one warpgroup's
// softmax overlaps the other's GEMMs.
// Without warp specialization (the Table 2 ablation, T::kWarpSpecialized false) thread 0 also
// issues the loads at the points marked `loader.` (inline_loader.hpp), and tiles come in a fixed
// stride instead of from the producer's tile ring.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/epilogue.hpp"
#include "kernels/fwd/fp8_scales.hpp"
#include "kernels/fwd/inline_loader.hpp"
#include "kernels/fwd/mask.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/score_recompute.hpp"
#include "kernels/fwd/softmax.hpp"
#include "kernels/fwd/tile_scheduler.hpp"
#include "kernels/fwd/timeline.hpp"

namespace hopattn::kernels::fwd {

// Named barrier ids used by the forward kernel (0 is __syncthreads).
constexpr int kPingpongBarrierBase = 1;  // 1 + w: "warpgroup w may issue its GEMMs"
// How much of a tile's first key block a consumer warpgroup computes (FwdTraits::kNarrowFirstBlock).
constexpr int kFullBlock = 0, kNarrowBlock = 1, kEmptyBlock = 2;
// (4 + w: the epilogue's staging buffer of warpgroup w, epilogue.hpp)

// Issues one warpgroup-wide GEMM c (+)= a * b over the first kKSlices k slices (all by
// default) and commits it as a batch.
// kARegs: A comes from registers (RS) rather than shared-memory descriptors (SS).
template <bool kZeroInit, bool kARegs, int kKSlices = -1, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void issue_wgmma(Mma& mma, TA& a, TB const& b, TC& c) {
  using namespace cute;
  constexpr int kSlices = kKSlices < 0 ? int(decltype(size<2>(a))::value) : kKSlices;
  if constexpr (kARegs) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < kSlices; ++k) {
    gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kARegs) warpgroup_fence_operand(a);
}

template <int kNumWgs>
struct Pingpong {
  bool enabled;
  int wg;
  __device__ __forceinline__ void start_tile_stream() const {
    // The last warpgroup "hands over" first, so warpgroup 0 issues first.
    if (enabled && wg == kNumWgs - 1) named_barrier_arrive(kPingpongBarrierBase + 0, 256);
  }
  __device__ __forceinline__ void acquire() const {
    if (enabled) named_barrier_sync(kPingpongBarrierBase + wg, 256);
  }
  __device__ __forceinline__ void hand_over() const {
    if (enabled) named_barrier_arrive(kPingpongBarrierBase + (wg + 1) % kNumWgs, 256);
  }
};

template <class T>
struct Consumer {
  using Element = typename T::Element;
  static constexpr int kRows = 2;  // accumulator rows a thread owns in its 64-row slice

  const FwdKernelParams<T>& p;
  typename T::SharedStorage& smem;
  int tid;  // 0 .. kNumConsumerThreads-1
  Pingpong<T::kNumConsumerWgs> pingpong;
  PipeState<T::kStages> k_pipe, v_pipe;  // K and V rings advance independently
  PipeState<T::kQStages> q_pipe;
  Fp8TileScales<kRows, T::kFp8> fp8;  // this tile's descales (FP8 only; every factor 1 otherwise)
  Timeline timeline;                  // experiment probe (timeline.hpp); empty unless enabled
  BlockProbeCounter probe_k, probe_v;  // block probe (timeline.hpp): K and V^T blocks released so far
  std::conditional_t<T::kWarpSpecialized, NoInlineLoader, InlineLoader<T>> loader;  // see the header

  // Timing experiment (session 46, .deps/s47/c1.sh): no softcap or mask code, to see what the
  // never-taken paths cost a dense problem, as they cost the backward 2-4% (perf-log). Wrong
  // under a mask, softcap or a partial key block.
#ifdef HOPATTN_EXP_FWD_DENSE_ONLY
#pragma message("HOPATTN_EXP_FWD_DENSE_ONLY: no softcap or mask code in the forward; wrong under either")
  static constexpr bool kDenseOnlyExperiment = true;
#else
  static constexpr bool kDenseOnlyExperiment = false;
#endif
  // Softcap and mask, in place: the scores as the softmax sees them.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void prepare_scores(TensorS& s_rc, const TensorC& tScS,
                                                 const WindowMask<T::kBlockM, T::kBlockN>& mask, int m_block, int n,
                                                 const RowScales<kRows>& rs) const {
    using namespace cute;
    if constexpr (kDenseOnlyExperiment) return;
    if (p.use_softcap) {
      CUTE_UNROLL
      for (int i = 0; i < size<0>(s_rc); ++i) {
        CUTE_UNROLL
        for (int j = 0; j < size<1>(s_rc); ++j) s_rc(i, j) = fast_tanh(s_rc(i, j) * rs.softcap_mult[i]);
      }
    }
    if (mask.block_needs_mask(m_block, n)) {
      Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
      mask.template apply<T::kRelativeMaskBounds>(s_rc, c_rc, m_block, n);
    }
  }

  // Scores -> probabilities in place. Returns whether the warp's output rows need o_scale
  // (OnlineSoftmax::step). Max-free blocks (T::kMaxFreeBlocks, OnlineSoftmax) run their exps
  // against the kept offsets and fall back to lifting the offsets, or, where an exp overflowed,
  // to recomputing the scores and taking the block's maxima. With T::kRecomputeAfterPvWait the
  // recompute is left to the caller: lost is set (warp-uniform; nothing else has changed) and
  // redo_lost_block must run after the wait for P V. (Settling the block only after P is
  // converted, so that the vote waits under the conversion, measured 2-6% slower: perf-log,
  // session 14.)
  template <class TensorS, class TensorC>
  __device__ __forceinline__ bool scores_to_probs(TensorS& tSrS, const TensorC& tScS, bool first,
                                                  const WindowMask<T::kBlockM, T::kBlockN>& mask,
                                                  const TileCoord& c, const SeqInfo& si, int n,
                                                  const RowScales<kRows>& rs, OnlineSoftmax<kRows>& softmax,
                                                  float (&o_scale)[kRows], bool& lost) {
    using namespace cute;
    lost = false;
    Tensor s_rc = make_tensor(tSrS.data(), acc_as_rowcol(tSrS.layout()));
    prepare_scores(s_rc, tScS, mask, c.m_block, n, rs);
    if constexpr (T::kMaxFreeBlocks) {
      if (!first && softmax.rows_seen) {
        float block_sum[kRows];
        softmax.exps_against_offsets(s_rc, rs.log2_mult, block_sum);
        if (OnlineSoftmax<kRows>::block_within_lag(block_sum)) {
          softmax.add_block_sums(block_sum, o_scale);
          return false;
        }
        bool moved;
        if (softmax.lift_offsets(s_rc, block_sum, o_scale, moved)) return moved;
        // An exp overflowed: the scores are gone from the accumulator. Rebuild them and take
        // the block's maxima (step<false> below). (Sharing the softcap and mask code with the
        // first pass through a loop measured 7-35% slower: perf-log, session 14.)
        if constexpr (T::kRecomputeAfterPvWait) {
          lost = true;
          return false;
        } else {
          recompute_scores(s_rc, tScS, c, si, n);
          prepare_scores(s_rc, tScS, mask, c.m_block, n, rs);
        }
      }
    }
    const bool moved = first ? softmax.template step<true>(s_rc, rs.log2_mult, o_scale)
                             : softmax.template step<false>(s_rc, rs.log2_mult, o_scale);
    if constexpr (T::kMaxFreeBlocks) softmax.note_rows_seen();
    return moved;
  }

  // The deferred rare path (T::kRecomputeAfterPvWait, scores_to_probs set lost): once no WGMMA
  // reads this warpgroup's registers, rebuild block n's scores and take the block's maxima.
  // Returns whether O needs o_scale.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ bool redo_lost_block(TensorS& tSrS, const TensorC& tScS,
                                                  const WindowMask<T::kBlockM, T::kBlockN>& mask,
                                                  const TileCoord& c, const SeqInfo& si, int n, float k_scale,
                                                  OnlineSoftmax<kRows>& softmax, float (&o_scale)[kRows]) const {
    using namespace cute;
    Tensor s_rc = make_tensor(tSrS.data(), acc_as_rowcol(tSrS.layout()));
    const RowScales<kRows> rs = row_scales(k_scale);
    recompute_scores(s_rc, tScS, c, si, n);
    prepare_scores(s_rc, tScS, mask, c.m_block, n, rs);
    return softmax.template step<false>(s_rc, rs.log2_mult, o_scale);
  }

  // The raw scores of key block n (sum over d of Q times K, as stored: e4m3 codes or 16-bit
  // values), recomputed from global memory: the rare path of the max-free blocks where an exp
  // overflowed and the accumulator no longer holds them. Rows past seqlen_q and keys past seqlen_k
  // get 0 (the latter are masked afterwards). Called warp-uniformly (the softmax's votes). Any
  // recompute's FP32 sums may differ from the WGMMA's in the last bits.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void recompute_scores(TensorS& s_rc, const TensorC& tScS, const TileCoord& c,
                                                   const SeqInfo& si, int n) const {
    static_assert(T::kMaxFreeBlocks, "only kernels with max-free blocks recompute scores");
    if constexpr (T::kRecomputeOnTensorCores) recompute_scores_on_tensor_cores(s_rc, tScS, c, si, n);
    else recompute_scores_per_element(s_rc, tScS, c, si, n);
  }

  // Row 0 of this tile's sequence in Q and K as stored, for the recomputes.
  struct RawHeads {
    const Element* q;
    const Element* k;
  };
  __device__ __forceinline__ RawHeads raw_heads(const Element* q_raw, const Element* k_raw, int head, int batch,
                                                int64_t q_row_stride, int64_t k_row_stride,
                                                const SeqInfo& si) const {
    const bool varlen = p.cu_seqlens_q != nullptr;  // sequences packed along the rows
    const Element* q = q_raw + head * p.q_head_stride + (varlen ? 0 : batch * p.q_batch_stride);
    const Element* k = k_raw + (head / p.head_group) * p.k_head_stride + (varlen ? 0 : batch * p.k_batch_stride);
    return {q + int64_t(si.q_offset) * q_row_stride, k + int64_t(si.k_offset) * k_row_stride};
  }

  // T::kRecomputeOnTensorCores (FP8 kernels, by the traits' policy): the warp's 16 rows on
  // warp-level MMAs (score_recompute.hpp). The base pointers, row strides and tile coordinates
  // pass through opaque_here (volatile): what is derived from them (row addresses, head and
  // batch offsets) is loop-invariant, and the compiler would otherwise hoist it out of the
  // mainloop, holding registers through every iteration.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void recompute_scores_on_tensor_cores(TensorS& s_rc, const TensorC& tScS,
                                                                   const TileCoord& c, const SeqInfo& si,
                                                                   int n) const {
    using namespace cute;
    Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));  // pairs with s_rc element-wise
    const int64_t q_stride = opaque_here(p.q_row_stride), k_stride = opaque_here(p.k_row_stride);
    const RawHeads heads = raw_heads(opaque_here(p.q_raw), opaque_here(p.k_raw), opaque_here(c.head),
                                     opaque_here(c.batch), q_stride, k_stride, si);
    const int m_row0 = opaque_here(c.m_block) * T::kBlockM;
    const int lane = warpgroup_thread_fresh() % 32;
    const int row_lo = m_row0 + get<0>(c_rc(0, 0));
    const int row_hi = m_row0 + get<0>(c_rc(1, 0));
    const int key_lane = n * T::kBlockN + lane / 4;  // chunk 0's key for this lane's B operand
    static_assert(sizeof(Element) == 1, "e4m3 codes");
    warp_scores_from_global<T::kHeadDim>(
        s_rc, lane, reinterpret_cast<const uint8_t*>(heads.q + int64_t(row_lo) * q_stride), row_lo < si.seqlen_q,
        row_hi < si.seqlen_q, p.q_rows8_bytes, reinterpret_cast<const uint8_t*>(heads.k + int64_t(key_lane) * k_stride),
        p.k_rows8_bytes, si.seqlen_k - key_lane);
  }

  // Otherwise this thread's scores one by one. Written as rolled loops, each score placed into its
  // register by an unrolled compare-and-select, so that the path costs little code inside the
  // mainloop (fully unrolled: about as fast at d64 and d128, 172 bytes of spill at d256; perf-log,
  // session 14).
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void recompute_scores_per_element(TensorS& s_rc, const TensorC& tScS,
                                                               const TileCoord& c, const SeqInfo& si, int n) const {
    using namespace cute;
    Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));  // pairs with s_rc element-wise
    // Deferred, the base pointers are kept from being computed ahead of the rare branch.
    const Element* q_raw = T::kRecomputeAfterPvWait ? opaque_here(p.q_raw) : p.q_raw;
    const Element* k_raw = T::kRecomputeAfterPvWait ? opaque_here(p.k_raw) : p.k_raw;
    const RawHeads heads = raw_heads(q_raw, k_raw, c.head, c.batch, p.q_row_stride, p.k_row_stride, si);
    constexpr int kCount = decltype(size(s_rc))::value;
#pragma unroll 1
    for (int e = 0; e < kCount; ++e) {
      const int row = c.m_block * T::kBlockM + get<0>(c_rc(e));
      const int col = n * T::kBlockN + get<1>(c_rc(e));
      float acc = 0.f;
      if (row < si.seqlen_q && col < si.seqlen_k) {
        const Element* q = heads.q + row * p.q_row_stride;
        const Element* k = heads.k + col * p.k_row_stride;
#pragma unroll 1
        for (int d = 0; d < T::kHeadDim; d += 2) {
          const float2 qf = load_pair_as_float2(q + d);
          const float2 kf = load_pair_as_float2(k + d);
          acc = fmaf(qf.x, kf.x, fmaf(qf.y, kf.y, acc));
        }
      }
      CUTE_UNROLL
      for (int slot = 0; slot < kCount; ++slot)
        if (slot == e) s_rc(slot) = acc;
    }
  }

  // The score multipliers of a key block whose K descale is k_scale (read_key_descales; 1 for 16-bit
  // inputs, where every block uses the same constants).
  __device__ __forceinline__ RowScales<kRows> row_scales(float k_scale) const {
    RowScales<kRows> rs;
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      float qk = 1.f;
      if constexpr (T::kFp8) qk = fmaxf(fp8.q[i] * k_scale, FLT_MIN);  // > 0 keeps -inf * qk = -inf
      rs.softcap_mult[i] = p.softcap_prescale * qk;
      rs.log2_mult[i] = p.use_softcap ? p.scale_log2 : p.scale_log2 * qk;
    }
    return rs;
  }

  // Named steps of the schedule. Each issue_* waits for its operand stage to land and issues
  // one WGMMA batch (the caller holds the pingpong token); each release_* frees a stage.
  template <class MmaQK, class TQ, class TK, class TS>
  __device__ __forceinline__ void issue_scores(MmaQK& mma_qk, TQ& tSrQ, TK& tSrK, TS& tSrS) {
    using namespace cute;
    wait_full(smem.k_full[k_pipe.stage], k_pipe.phase);
    probe_k.mark(kPbKWaited, tid == 0);
    issue_wgmma<true, false>(mma_qk, tSrQ, tSrK(_, _, _, k_pipe.stage), tSrS);
  }
  // width: the block's width for this warpgroup, kFullBlock unless it was a tile's first block
  // run narrow (T::kNarrowFirstPv: P V over its first T::kNarrowKeys keys) or empty
  // (T::kEmptyFirstBlock: one k16 slice of zero P, a batch like any other for the waits).
  template <class MmaPV, class TP, class TV, class TO>
  __device__ __forceinline__ void issue_pv(MmaPV& mma_pv, TP& tOrP, TV& tOrVt, TO& tOrO, int width = kFullBlock) {
    using namespace cute;
    wait_full(smem.v_full[v_pipe.stage], v_pipe.phase);
    probe_v.mark(kPbPvIssued, tid == 0);
    constexpr int kNarrowSlices = T::kNarrowFirstPv ? T::kNarrowKeys / 16 : -1;  // k16 slices
    auto tOrVt_stage = tOrVt(_, _, _, v_pipe.stage);
    if (T::kEmptyFirstBlock && width == kEmptyBlock) {
      // One k16 slice of zero P: O += 0. A batch without a GEMM left O's registers defined by the
      // fences alone on that path, and ptxas serialized every WGMMA of the kernel (C7515).
      issue_wgmma<false, true, 1>(mma_pv, tOrP, tOrVt_stage, tOrO);
    } else if (T::kNarrowFirstPv && width == kNarrowBlock) {
      issue_wgmma<false, true, kNarrowSlices>(mma_pv, tOrP, tOrVt_stage, tOrO);
    } else {
      issue_wgmma<false, true>(mma_pv, tOrP, tOrVt_stage, tOrO);
    }
  }
  // Tile n's K and V descales, stored by the producer next to the K stage just waited for; read
  // before that stage is released (FP8 only).
  __device__ __forceinline__ void read_key_descales(float& k_scale, float& v_block) const {
    if constexpr (T::kFp8) {
      k_scale = smem.k_descale[k_pipe.stage];
      v_block = smem.v_descale[k_pipe.stage];
    } else {
      k_scale = v_block = 1.f;
    }
  }
  __device__ __forceinline__ void release_k() {
    release(smem.k_empty[k_pipe.stage]);
    k_pipe.advance();
    probe_k.mark(kPbKReleased, tid == 128);
    probe_k.next();
  }
  __device__ __forceinline__ void release_v() {
    release(smem.v_empty[v_pipe.stage]);
    v_pipe.advance();
    probe_v.mark(kPbVReleased, tid == 128);
    probe_v.next();
  }
  __device__ __forceinline__ void release_q() {
    release(smem.q_empty[q_pipe.stage]);
    q_pipe.advance();
  }

  // A tile's first block that this warpgroup's rows see no key of (T::kEmptyFirstBlock): its turn
  // for the GEMM token and its K stage pass without a GEMM; the softmax has seen no key yet (row
  // maxima -inf, sums 0), as after a fully masked block; its P V is one k16 slice of zeros.
  template <class TP>
  __device__ __forceinline__ void empty_first_block(TP& tOrP) {
    CUTE_UNROLL
    for (int i = 0; i < 8; ++i) tOrP(i) = typename T::Element(0.f);  // the first k16 slice
    pingpong.acquire();
    wait_full(smem.k_full[k_pipe.stage], k_pipe.phase);
    pingpong.hand_over();
    timeline.mark(kFirstScoresIssued);
    timeline.mark(kFirstScoresDone);
    release_k();
  }

  // A tile's first block, narrow (T::kNarrowFirstBlock: this warpgroup's rows see none of its
  // keys past the first T::kNarrowKeys): S = Q K^T over those keys into an accumulator of their
  // width, mask and softmax as for any first block, and P in the first k16 slices of tOrP (the
  // score accumulator's order is P's, so the narrow block's P is a prefix of the full one's); the
  // others zero where the block's P V reads them (experiment switch 1). 16-bit only: the
  // descales are 1.
  template <class TQ, class TP>
  __device__ __forceinline__ void narrow_first_block(TQ tSrQ, TP& tOrP, const WindowMask<T::kBlockM, T::kBlockN>& mask,
                                                     const TileCoord& c, const SeqInfo& si, int n,
                                                     OnlineSoftmax<kRows>& softmax, float (&o_scale)[kRows]) {
    using namespace cute;
    if constexpr (T::kNarrowFirstBlock) {
      static_assert(!T::kFp8);
      using Narrow = Shape<Int<T::kBlockM>, Int<T::kNarrowKeys>>;
      typename T::MmaQKNarrow mma;
      auto thr = mma.get_thread_slice(tid);
      Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutKNarrow{});
      Tensor tSrK = thr.partition_fragment_B(sK);  // the stage's first kNarrowKeys keys
      Tensor tScS = thr.partition_C(make_identity_tensor(Narrow{}));
      Tensor tSrS = partition_fragment_C(mma, Narrow{});
      pingpong.acquire();
      issue_scores(mma, tSrQ, tSrK, tSrS);
      pingpong.hand_over();
      timeline.mark(kFirstScoresIssued);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);  // no read of S may move above the wait
      timeline.mark(kFirstScoresDone);
      release_k();
      bool lost;
      scores_to_probs(tSrS, tScS, true, mask, c, si, n, row_scales(1.f), softmax, o_scale, lost);
      constexpr int kCount = decltype(size(tSrS))::value;
      Tensor tOrP_narrow = make_tensor(tOrP.data(), make_layout(Int<kCount>{}));
      convert_into(tSrS, tOrP_narrow);
      if constexpr (!T::kNarrowFirstPv) {  // the block's P V runs over every key: the rest of P is 0
        CUTE_UNROLL
        for (int i = kCount; i < size(tOrP); ++i) tOrP(i) = typename T::Element(0.f);
      }
    }
  }

  // O *= o_scale (online softmax) * v_ratio (FP8 V block descales: O is kept in units of the
  // descale of the last V block added, so moving to the next block multiplies by old / new).
  // Skipped, by a warp-uniform branch, when both factors are 1 for the whole warp (most blocks
  // once the row maxima settle: OnlineSoftmax::kMaxLag).
  template <class TensorO>
  __device__ __forceinline__ void rescale_output(TensorO& tOrO, const float (&o_scale)[kRows], float v_ratio,
                                                 bool softmax_moved) {
    using namespace cute;
    if (!softmax_moved && (!T::kFp8 || v_ratio == 1.f)) return;
    Tensor o_rc = make_tensor(tOrO.data(), acc_as_rowcol(tOrO.layout()));
    CUTE_UNROLL
    for (int i = 0; i < size<0>(o_rc); ++i) {
      const float f = T::kFp8 ? o_scale[i] * v_ratio : o_scale[i];
      CUTE_UNROLL
      for (int j = 0; j < size<1>(o_rc); ++j) o_rc(i, j) *= f;
    }
  }

  // ptxas schedules wgmma.wait_group as early as its basic block allows: left alone, it puts the
  // wait for P V of block n+1 above the softmax of block n, so that the softmax no longer runs
  // under the warpgroup's own P V (SASS, perf-log session 11). It keeps memory operations in
  // program order around the wait, so a shared store of the row sums, which depend on every exp
  // of the block, placed before the wait keeps the whole softmax above it. The store never
  // executes: its predicate is p.opaque_zero (always 0, unknown to the compiler).
  __device__ __forceinline__ void keep_above_wgmma_wait(const OnlineSoftmax<kRows>& softmax) const {
    static_assert(kRows == 2);
    const uint32_t addr = cute::cast_smem_ptr_to_uint(&smem.tiles);
    asm volatile(
        "{\n .reg .pred never;\n setp.ne.b32 never, %2, 0;\n @never st.shared.v2.f32 [%3], {%0, %1};\n}\n" ::"f"(
            softmax.row_sum[0]),
        "f"(softmax.row_sum[1]), "r"(p.opaque_zero), "r"(addr)
        : "memory");
  }

  // P (fp32 scores after the softmax) into the A-operand registers of O += P V.
  template <class TS, class TP>
  __device__ __forceinline__ static void convert_p(const TS& tSrS, TP& tOrP) {
    if constexpr (T::kFp8) convert_scores_to_e4m3_a(tSrS, tOrP);
    else convert_into(tSrS, tOrP);
  }

  __device__ void run(const TileScheduler& sched) {
    using namespace cute;
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutVt{});
    typename T::MmaQK mma_qk;
    typename T::MmaPV mma_pv;
    auto thr_qk = mma_qk.get_thread_slice(tid);
    auto thr_pv = mma_pv.get_thread_slice(tid);
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);  // (MMA, M, K, q stage)
    Tensor tSrK = thr_qk.partition_fragment_B(sK);    // (MMA, N, K, stage)
    Tensor tOrVt = thr_pv.partition_fragment_B(sVt);  // (MMA, d, keys, stage)
    Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kBlockN>>{}));
    Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{}));

    pingpong.start_tile_stream();
    TileRingState ring;
    auto next_tile = [&](int tile) {
      if constexpr (T::kWarpSpecialized) return receive_tile(smem.tiles, ring);
      else return tile < 0 ? sched.first_tile() : sched.strided_next(tile);
    };
    for (int tile = next_tile(-1); tile < sched.num_tiles; tile = next_tile(tile)) {
      timeline.next_tile();
      timeline.mark(kTileReceived);
      const TileCoord c = sched.decode(tile);
      const SeqInfo si = seq_info(p, c.batch);
      if (c.m_block * T::kBlockM >= si.seqlen_q) continue;
      const WindowMask<T::kBlockM, T::kBlockN> mask{si.seqlen_q, si.seqlen_k, p.window_left, p.window_right};
      int n_begin, n_end;
      mask.block_range(c.m_block, n_begin, n_end);
      if constexpr (!T::kWarpSpecialized) {
        if (n_end > n_begin) loader.begin_tile(p, smem, tid == 0, c, si, n_begin, n_end);
      }
      if (T::kSkipIdleWarpgroups && c.m_block * T::kBlockM + pingpong.wg * 64 >= si.seqlen_q) {
        if (n_end > n_begin) {
          wait_full(smem.q_full[q_pipe.stage], q_pipe.phase);
          idle_mainloop(n_begin, n_end);
          if constexpr (T::Output::kInVRing) Epilogue<T>::skip_v_ring_output(smem);
        }
        continue;
      }

      Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
      clear(tOrO);
      OnlineSoftmax<kRows> softmax;
      if constexpr (T::kFp8) fp8 = Fp8TileScales<kRows, T::kFp8>::load(p, c, tScS, si.seqlen_q, T::kBlockM);
      float o_units = 1.f;  // FP8: the V block descale O is currently expressed in
      if (n_end > n_begin) {
        timeline.mark(kSetupDone);
        timeline.record(kQReadyAtSetup,
                        [&] { return FullBarrier::test_wait(&smem.q_full[q_pipe.stage], q_pipe.phase, 1u) ? 1 : 0; });
        wait_full(smem.q_full[q_pipe.stage], q_pipe.phase);
        if constexpr (T::kFp8) {
          compiler_memory_fence();  // the reads below stay after the wait
          fp8.take_tensor_factors(smem.q_tensor_descale[q_pipe.stage], smem.v_tensor_descale[q_pipe.stage]);
        }
        timeline.mark(kQLanded);
        auto tSrQ_tile = tSrQ(_, _, _, q_pipe.stage);
        // Q's operand for key block n. With kRebuildQDescriptor it is rebuilt for every block
        // from a base ptxas cannot prove constant (offset by n & opaque_zero, always 0), instead
        // of one descriptor held through the tile: at d64's three warpgroups with max-free
        // blocks, that descriptor was the 12 B the kernel spilled (perf-log, session 22).
        auto q_at = [&](int n) {
          if constexpr (T::kRebuildQDescriptor) {
            Tensor sQ_salted = make_tensor(make_smem_ptr(smem.q.data() + (n & p.opaque_zero)), typename T::SmemLayoutQ{});
            return thr_qk.partition_fragment_A(sQ_salted)(_, _, _, q_pipe.stage);
          } else {
            return tSrQ_tile;
          }
        };
        o_units = mainloop(mma_qk, mma_pv, q_at, tSrK, tOrVt, tScS, tOrO, softmax, mask, c, si, n_begin, n_end);
      }
      Epilogue<T>::store(p, smem, tOrO, tOcO, softmax, T::kFp8 ? o_units * fp8.v_tensor : 1.f, c, si, tid,
                         n_end > n_begin, v_pipe, timeline);
      timeline.mark(kEpilogueDone);
    }
    Epilogue<T>::drain(tid);
  }

  // A warpgroup whose 64 rows all lie past seqlen_q (the last m-block of a sequence whose length
  // is not a multiple of kBlockM: 1024 = 5 x 192 + 64 at d64) computes nothing. It keeps the
  // protocol of mainloop() below, in the same order: it takes and passes the pingpong token as
  // often, and waits for and releases every Q, K and V stage (waiting keeps its arrivals in the
  // barriers' current phase). It has no epilogue either, except its arrival where O is staged in
  // the V ring (Epilogue::skip_v_ring_output).
  __device__ __forceinline__ void idle_mainloop(int n_begin, int n_end) {
    auto turn = [&] {
      pingpong.acquire();
      pingpong.hand_over();
    };
    auto skip_k = [&] {
      wait_full(smem.k_full[k_pipe.stage], k_pipe.phase);
      release_k();
    };
    auto skip_v = [&] {
      wait_full(smem.v_full[v_pipe.stage], v_pipe.phase);
      release_v();
    };
    if constexpr (T::kIntraWgOverlap) {
      turn();
      skip_k();
      for (int n = n_end - 2; n >= n_begin; --n) {
        turn();
        skip_k();
        skip_v();
      }
      release_q();
      turn();
      skip_v();
    } else {
      for (int n = n_end - 1; n >= n_begin; --n) {
        turn();
        skip_k();
        if (n == n_begin) release_q();
        turn();
        skip_v();
      }
    }
  }

  // Returns the V descale the output accumulator is expressed in (1 for 16-bit inputs).
  template <class MmaQK, class MmaPV, class TQ, class TK, class TV, class TC, class TO>
  __device__ __forceinline__ float mainloop(MmaQK& mma_qk, MmaPV& mma_pv, const TQ& q_at, TK& tSrK, TV& tOrVt,
                                           const TC& tScS, TO& tOrO, OnlineSoftmax<kRows>& softmax,
                                           const WindowMask<T::kBlockM, T::kBlockN>& mask, const TileCoord& c,
                                           const SeqInfo& si, int n_begin, int n_end) {
    using namespace cute;
    float o_scale[kRows];
    auto scores = [&] { return partition_fragment_C(mma_qk, Shape<Int<T::kBlockM>, Int<T::kBlockN>>{}); };
    // P lives in registers laid out as the A operand of O += P V: the score accumulator's own
    // order for 16-bit types; for e4m3, k32 slices with permuted keys (v_transpose.hpp).
    using ScoreLayout = decltype(scores().layout());
    Tensor tOrP = make_tensor<Element>(p_operand_layout<T::kFp8>(ScoreLayout{}));
    using Scales = Fp8TileScales<kRows, T::kFp8>;
    float k_scale, v_block;
    float v_units = 1.f;  // the V descale O is expressed in (FP8 block descales)

    if constexpr (T::kIntraWgOverlap) {
      // First block: S only. A narrow or empty one (T::kNarrowFirstBlock, T::kEmptyFirstBlock)
      // has a branch of its own from the issue to P: where the forms met with S still in flight,
      // ptxas copied the accumulator at the join and had to wait for the GEMM there (C7517).
      bool lost;  // never on a tile's first block
      int pv_width = kFullBlock;  // the width of the block whose P V is issued next
      if constexpr (T::kNarrowFirstBlock) {
        if (T::kEmptyFirstBlock && mask.keys_hidden_from(c.m_block, pingpong.wg, n_end - 1, 0)) pv_width = kEmptyBlock;
        else if (mask.keys_hidden_from(c.m_block, pingpong.wg, n_end - 1, T::kNarrowKeys)) pv_width = kNarrowBlock;
      }
      if (T::kEmptyFirstBlock && pv_width == kEmptyBlock) {
        empty_first_block(tOrP);
      } else if (pv_width == kNarrowBlock) {
        narrow_first_block(q_at(n_end - 1), tOrP, mask, c, si, n_end - 1, softmax, o_scale);
      } else {
        Tensor tSrS = scores();
        pingpong.acquire();
        auto tSrQ = q_at(n_end - 1);
        issue_scores(mma_qk, tSrQ, tSrK, tSrS);
        pingpong.hand_over();
        timeline.mark(kFirstScoresIssued);
        read_key_descales(k_scale, v_block);
        v_units = Scales::v_units(v_block, 1.f);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrS);  // no read of S may move above the wait
        timeline.mark(kFirstScoresDone);
        release_k();
        // Without warp specialization: the first block's K stage is free (T::kWarpSpecialized).
        if constexpr (!T::kWarpSpecialized) loader.refill(p, smem, tid == 0, n_end - 1 - T::kStages, n_end);
        scores_to_probs(tSrS, tScS, true, mask, c, si, n_end - 1, row_scales(k_scale), softmax, o_scale, lost);
        convert_p(tSrS, tOrP);
      }
      bool softmax_moved = false;  // the first block's P V adds to a zero O
      // O is rescaled for block n+1's softmax only right before P V of block n+1 is issued, while
      // Q K^T of block n runs: the multiply leaves the softmax window between the GEMMs.
      float v_ratio = 1.f;
      for (int n = n_end - 2; n >= n_begin; --n) {
        Tensor tSrS_next = scores();
        pingpong.acquire();
        auto tSrQ = q_at(n);
        issue_scores(mma_qk, tSrQ, tSrK, tSrS_next);
        rescale_output(tOrO, o_scale, v_ratio, softmax_moved);
        if (n == n_end - 2) {
          timeline.mark(kFirstPvReached);
          timeline.record(kVtReadyAtFirstPv, [&] {
            return FullBarrier::test_wait(&smem.v_full[v_pipe.stage], v_pipe.phase, 1u) ? 1 : 0;
          });
        }
        issue_pv(mma_pv, tOrP, tOrVt, tOrO, pv_width);
        pv_width = kFullBlock;
        pingpong.hand_over();
        if (n == n_end - 2) timeline.mark(kFirstPvIssued);
        read_key_descales(k_scale, v_block);
        const float v_next = Scales::v_units(v_block, v_units);
        warpgroup_wait<1>();  // S of block n is ready; P V of block n+1 still runs
        warpgroup_fence_operand(tSrS_next);
        release_k();
        // Without warp specialization: K_n's stage is free, so the load into it goes out now rather
        // than after the softmax (+4..7% for that kernel, H100, perf-log session 44).
        if constexpr (!T::kWarpSpecialized) loader.refill(p, smem, tid == 0, n - T::kStages, n_end);
        if constexpr (T::kPvWaitBeforeSoftmax) {
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          release_v();
        }
        softmax_moved =
            scores_to_probs(tSrS_next, tScS, false, mask, c, si, n, row_scales(k_scale), softmax, o_scale, lost);
        if constexpr (T::kSoftmaxUnderOwnPv) keep_above_wgmma_wait(softmax);
        if constexpr (!T::kPvWaitBeforeSoftmax) {
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
        }
        if constexpr (T::kRecomputeAfterPvWait) {
          if (lost) softmax_moved = redo_lost_block(tSrS_next, tScS, mask, c, si, n, k_scale, softmax, o_scale);
        }
        if constexpr (!T::kPvWaitBeforeSoftmax) release_v();
        v_ratio = v_units / v_next;
        v_units = v_next;
        convert_p(tSrS_next, tOrP);
        // This warpgroup freed V_{n+1}'s stage in this iteration (and K_n's, refilled above).
        if constexpr (!T::kWarpSpecialized) loader.refill(p, smem, tid == 0, n - T::kStages, n + 1 - T::kStages);
      }
      release_q();  // every Q K^T of this tile has completed
      pingpong.acquire();
      rescale_output(tOrO, o_scale, v_ratio, softmax_moved);
      issue_pv(mma_pv, tOrP, tOrVt, tOrO, pv_width);
      pingpong.hand_over();
      timeline.mark(kLastPvIssued);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      timeline.mark(kLastPvDone);
      release_v();
    } else {
      // Ablation: no intra-warpgroup overlap; each GEMM is waited for before the softmax.
      for (int n = n_end - 1; n >= n_begin; --n) {
        Tensor tSrS = scores();
        pingpong.acquire();
        auto tSrQ = q_at(n);
        issue_scores(mma_qk, tSrQ, tSrK, tSrS);
        pingpong.hand_over();
        read_key_descales(k_scale, v_block);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrS);
        release_k();
        if (n == n_begin) release_q();
        bool lost;
        bool moved =
            scores_to_probs(tSrS, tScS, n == n_end - 1, mask, c, si, n, row_scales(k_scale), softmax, o_scale, lost);
        if constexpr (T::kRecomputeAfterPvWait) {
          if (lost) moved = redo_lost_block(tSrS, tScS, mask, c, si, n, k_scale, softmax, o_scale);
        }
        const float v_next = Scales::v_units(v_block, n == n_end - 1 ? 1.f : v_units);
        if (n != n_end - 1) rescale_output(tOrO, o_scale, v_units / v_next, moved);
        v_units = v_next;
        convert_p(tSrS, tOrP);
        pingpong.acquire();
        issue_pv(mma_pv, tOrP, tOrVt, tOrO);
        pingpong.hand_over();
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrO);
        release_v();
      }
    }
    return v_units;
  }
};

}  // namespace hopattn::kernels::fwd
