// The consumer warpgroups of the backward kernel. Warpgroup w owns keys [64w, 64w + 64) of the
// tile and keeps their dK and dV accumulators in registers for the whole tile. One step per
// query block m (of every query head in the KV head's group):
//
//   S^T = K Q_m^T ; dP^T = V dO_m^T                  (SS)
//   P^T = exp2(S^T * scale_log2 - lse_log2)          (softcap, mask on the way; dP^T runs)
//   dV += P^T dO_m                                   (RS: P^T straight from registers)
//   wait dP^T: dS^T = P^T * (dP^T - dsum)             (softcap: times 1 - tanh^2)
//   dK += dS^T Q_m                                   (RS)
//   dS^T -> shared memory (stmatrix)
//   dQ half w = dS K                                 (SS over all 128 keys; needs both halves of dS;
//                                                     80-row steps: dQ^T = K^T dS^T, see traits.hpp)
//   wait dV, dK: free the Q/dO stage
//   [d > 64: issue the next step's S^T here, so that it runs under the dQ hand-off]
//   wait dQ: store the dQ half into smem.dq and arrive on dq_full.
// dK is scaled by softmax_scale in the epilogue (dQ in the postprocess kernel).
//
// Where the dQ GEMM waits for the other warpgroup's dS (T::kLagDq):
// * d > 64: on this step's dS, through a named barrier (ds_ready): the warpgroups run in
//   lockstep, both in their softmax at the same time.
// * d = 64, in key tiles of at least p.lag_dq_min_steps steps (default 3): on the previous
//   step's dS (mbarriers ds_full / ds_empty per buffer), so dQ lags one step: a warpgroup may
//   run up to a step ahead, and warpgroup 1 starts each tile once
//   warpgroup 0 has its first probabilities, so that each one's softmax runs under the other's
//   GEMMs. A tile's first step runs a discarded dQ GEMM (a step without it is a second copy of
//   the code, which made ptxas spill 280 B) and the last step's dQ is drained after the loop.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/consumer_common.hpp"
#include "kernels/bwd/dq_writer.hpp"
#include "kernels/bwd/score_grads.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/consumer.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

// The dQ GEMM's operands: (dS, K^T) as (A, B) for dQ = dS K, or as (B, A) for dQ^T = K^T dS^T
// (T::kDqTransposed). dS is (MMA, queries, keys, buf), K^T (MMA, d slice, keys).
template <class T, class ThrMma, class TdS, class TKt>
__device__ __forceinline__ auto dq_operands(ThrMma& dq, const TdS& sdS, const TKt& sKt) {
  if constexpr (T::kDqTransposed) return cute::make_tuple(dq.partition_fragment_B(sdS), dq.partition_fragment_A(sKt));
  else return cute::make_tuple(dq.partition_fragment_A(sdS), dq.partition_fragment_B(sKt));
}

// The shared-memory operands of one step as WGMMA descriptor tensors, in the order
// (K, V, Q, dO, dO^T, Q^T, dS, K^T). With T::kRebuildDescriptorsPerStep they are built inside
// the step loop from a base offset by `salt` (always 0, but read from the kernel parameters):
// left to itself, ptxas hoists the ~40 loop-invariant descriptor words out of the loop into
// regular registers and, at d = 128, spills the loop state around them; rebuilt per step they
// cost a few uniform adds each. Slicing with the warp-uniform warpgroup index keeps them in
// uniform registers.
template <class T, class MSdP, class MDkv, class MDq>
__device__ __forceinline__ auto operand_views(typename T::SharedStorage& smem, int salt, int wg, MSdP& mma_sdp,
                                              MDkv& mma_dkv, MDq& mma_dq) {
  using namespace cute;
  auto view = [salt](auto* ptr, auto layout) { return salted_smem(ptr, salt, layout); };
  auto sdp = mma_sdp.get_thread_slice(wg * 128);
  auto dkv = mma_dkv.get_thread_slice(wg * 128);
  auto dq = mma_dq.get_thread_slice(wg * 128);
  auto dq_ops = dq_operands<T>(dq, view(smem.ds.data(), typename T::SmemLayoutdS{}),
                               view(smem.k.data(), typename T::SmemLayoutKt{}));
  return make_tuple(sdp.partition_fragment_A(view(smem.k.data(), typename T::SmemLayoutK{})),      // (MMA, M, K)
                    sdp.partition_fragment_A(view(smem.v.data(), typename T::SmemLayoutV{})),
                    sdp.partition_fragment_B(view(smem.q.data(), typename T::SmemLayoutQ{})),      // (MMA, N, K, stage)
                    sdp.partition_fragment_B(view(smem.dout.data(), typename T::SmemLayoutdO{})),
                    dkv.partition_fragment_B(view(smem.dout.data(), typename T::SmemLayoutdOt{})),  // (MMA, d, q, stage)
                    dkv.partition_fragment_B(view(smem.q.data(), typename T::SmemLayoutQt{})),
                    get<0>(dq_ops),  // dS (MMA, q, keys, buf)
                    get<1>(dq_ops));  // K^T (MMA, d slice, keys)
}

// `a` if kFirst, else `b` (two objects of different types).
template <bool kFirst, class A, class B>
__device__ __forceinline__ auto& pick(A& a, B& b) {
  if constexpr (kFirst) return a;
  else return b;
}

// One arrival per warp on a barrier that counts warps: 256 single-thread arrivals on one
// shared-memory word, twice per step, cost more than the named barrier they replace.
__device__ __forceinline__ void warp_release(uint64_t& bar) {
  __syncwarp();
  if (cute::elect_one_sync()) fwd::release(bar);
}

template <class T>
struct BwdConsumer {
  using Element = typename T::Element;
  static constexpr bool kOverlapSteps = T::kOverlapSteps;
  static constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;

  const BwdKernelParams<T>& p;
  typename T::SharedStorage& smem;
  int tid;  // 0 .. kNumConsumerThreads-1
  int wg;   // tid / 128, computed warp-uniformly by the caller
  fwd::PackedPipeState<T::kStages> pipe;
  fwd::PackedPipeState<1> kv_pipe;
  DqPipe<T> dq_pipe;

  __device__ void run(const fwd::TileScheduler& sched) {
    using namespace cute;
    using fwd::issue_wgmma;
    typename T::MmaSdP mma_sdp;
    typename T::MmaDKV mma_dkv;
    typename T::MmaDQ mma_dq;
    // Accumulator coordinates depend on the thread.
    Tensor tScS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));

    // dS^T leaves the registers with stmatrix: the accumulator's 8x8 fragments are exactly its
    // operand layout, four of them per instruction.
    auto ds_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto ds_thr = ds_copy.get_thread_slice(tid);
    Tensor sdSt = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdSt{});  // (keys, q, buf)
    Tensor tdSsdS = ds_thr.partition_D(sdSt);  // (CPY, keys, queries, buf)

    // The operand descriptors of a step: built once, or rebuilt in every step from a base
    // offset by `salt` (T::kRebuildDescriptorsPerStep, see operand_views).
    const auto hoisted = operand_views<T>(smem, 0, wg, mma_sdp, mma_dkv, mma_dq);
    auto views = [&](int salt) {
      if constexpr (T::kRebuildDescriptorsPerStep) return operand_views<T>(smem, salt, wg, mma_sdp, mma_dkv, mma_dq);
      else return hoisted;
    };

    // S^T = K Q^T of the step in `pipe.stage()`, once its Q has landed.
    auto issue_scores = [&](auto& tSrS, int salt) {
      auto [tSrK, tSrV, tSrQ, tSrdO, tdVrdOt, tdKrQt, tdQrdS, tdQrKt] = views(salt);
      fwd::wait_full(smem.q_full[pipe.stage()], pipe.phase());
      issue_wgmma<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, pipe.stage()), tSrS);
    };

    // dS buffers: this step's dS goes to ds_pipe.stage(); `prev` is the buffer of the step whose
    // dQ GEMM is still to run (see the header comment: dQ lags one step behind).
    fwd::PackedPipeState<2> ds_pipe;
    // This warpgroup's dS^T into its half of the buffer, once both warpgroups' dQ GEMMs of two
    // steps ago have read it; published to both warpgroups' dQ GEMMs on ds_full.
    auto store_ds = [&](auto& tdSrdS) {
      if constexpr (T::kLagDq) fwd::wait_empty(smem.ds_empty[ds_pipe.stage()], ds_pipe.phase());
      copy(ds_copy, tdSrdS, tdSsdS(_, _, _, ds_pipe.stage()));
      cutlass::arch::fence_view_async_shared();  // generic writes -> WGMMA (async proxy) reads
      if constexpr (T::kLagDq) warp_release(smem.ds_full[ds_pipe.stage()]);
    };
    // dQ of the previous step = dS K over all keys: needs the other warpgroup's half of dS. A
    // tile's first step has no previous step; it runs the GEMM anyway on whatever the buffer
    // holds and drops the result, so that every step is the same code (a first step without
    // the GEMM is a second copy of the step, which made ptxas spill 280 B at d = 64).
    auto issue_prev_dq = [&](auto& tdQrdS, auto& tdQrKt, auto& tdQrdQ, const fwd::PackedPipeState<2>& prev) {
      auto tdQrdS_buf = tdQrdS(_, _, _, prev.stage());  // an lvalue: issue_wgmma takes A by reference
      if constexpr (T::kDqTransposed) issue_wgmma<true, false>(mma_dq, tdQrKt, tdQrdS_buf, tdQrdQ);
      else issue_wgmma<true, false>(mma_dq, tdQrdS_buf, tdQrKt, tdQrdQ);
    };
    // Once that GEMM has completed: its dS buffer is free again, dQ goes to the writer.
    auto finish_prev_dq = [&](auto& tdQrdQ, const fwd::PackedPipeState<2>& prev, bool real) {
      warpgroup_fence_operand(tdQrdQ);
      if (real) {
        if constexpr (T::kLagDq) warp_release(smem.ds_empty[prev.stage()]);
        hand_off_dq<T>(smem, dq_pipe, tdQrdQ, tid);
      }
    };

    for_each_key_tile(p, smem, sched, kv_pipe, mma_dkv, tid, [&](const TileWork<T>& w, int steps, auto& tdKrdK,
                                                                 auto& tdVrdV, auto& tl) HOPATTN_LAMBDA_INLINE {
      StepCursor cur{w.m_first, w.m_begin, w.m_end};
      fwd::PackedPipeState<2> prev = ds_pipe;  // meaningful once a step has stored its dS
      // Whether dQ lags one step behind in this tile (see the header comment). Lagging costs a
      // wasted GEMM in the first step and an exposed one after the last: only long tiles pay.
      const bool lag = T::kLagDq && steps >= p.lag_dq_min_steps;
      auto fresh_scores = [&] { return partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{}); };
      auto fresh_dq = [&] { return partition_fragment_C(mma_dq, typename T::DqTile{}); };
      // One step; it also runs the previous step's dQ GEMM. With kPrefetch, S^T of the next
      // step is issued behind that GEMM. The last step is a separate instance so that the
      // number of GEMM batches in flight never depends on a branch (C7518: ptxas would
      // serialize every WGMMA of the kernel). The tile's last step (kLast) frees K and V once
      // its GEMMs are done, before the dQ hand-off (unless dQ lags: drain's GEMM reads K).
      auto step = [&](int i, auto prefetch, auto last, auto& tSrS, auto& tSrdP, auto& tdQrdQ) HOPATTN_LAMBDA_INLINE {
        constexpr bool kPrefetch = decltype(prefetch)::value;
        constexpr bool kLast = decltype(last)::value;
        static_assert(!(kLast && kPrefetch), "the last step releases K/V in its non-prefetch branch");
        // The dQ GEMM of this step reads dq_src: the previous step's dS when dQ lags (none in
        // a tile's first step), else this step's (waiting for the other warpgroup's half now).
        const fwd::PackedPipeState<2> dq_src = lag ? prev : ds_pipe;
        const bool real = !lag || i > 0;
        const int s = pipe.stage(), m = cur.m;
        const int salt = i & p.opaque_zero;
        auto [tSrK, tSrV, tSrQ, tSrdO, tdVrdOt, tdKrQt, tdQrdS, tdQrKt] = views(salt);
        if constexpr (!kOverlapSteps) issue_scores(tSrS, salt);
        fwd::wait_full(smem.do_full[s], pipe.phase());
        issue_wgmma<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, s), tSrdP);
        if constexpr (!kOverlapSteps) warpgroup_wait<1>();  // else S^T completed in the previous step
        warpgroup_fence_operand(tSrS);
        scores_to_probs(p, tSrS, tScS, w, m, smem.lse_log2[s]);
        if (lag && i == 0 && wg == 0) named_barrier_arrive(kStaggerBarrier, T::kNumConsumerThreads);
        // P^T leaves the FP32 accumulator at once: 16 registers instead of 32 while dP^T is
        // live, and dV starts before dP^T is ready. dS is computed from the rounded P (2^-9
        // relative, far below what the naive baseline's 16-bit P loses).
        Tensor tdVrP = make_tensor<Element>(acc_as_a_operand_16bit(tSrS.layout()));
        convert_into(tSrS, tdVrP);
        issue_wgmma<false, true>(mma_dkv, tdVrP, tdVrdOt(_, _, _, s), tdVrdV);
        warpgroup_wait<1>();  // dP^T is ready; dV may still run
        warpgroup_fence_operand(tSrdP);
        Tensor tSrP16 = make_tensor(tdVrP.data(), tSrS.layout());  // accumulator-order view
        probs_to_dscores(p, tSrP16, tSrdP, tScS, smem.dsum[s], smem.lse_log2[s]);
        Tensor tdKrdS = make_tensor<Element>(acc_as_a_operand_16bit(tSrdP.layout()));
        convert_into(tSrdP, tdKrdS);
        issue_wgmma<false, true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, s), tdKrdK);

        Tensor tdSrdS = ds_thr.retile_S(make_tensor(tdKrdS.data(), tSrdP.layout()));  // accumulator order
        store_ds(tdSrdS);
        // Both warpgroups' halves of dq_src: the named barrier when it is this step's dS (cheaper
        // than the mbarrier, whose phases still advance), the mbarrier when it is the last step's.
        if (!lag) named_barrier_sync(kDsReadyBarrier, T::kNumConsumerThreads);
        else if (real) fwd::wait_full(smem.ds_full[dq_src.stage()], dq_src.phase());
        issue_prev_dq(tdQrdS, tdQrKt, tdQrdQ, dq_src);
        // dV and dK (the last readers of this Q/dO stage) are done once only dQ is pending.
        warpgroup_wait<1>();
        warpgroup_fence_operand(tdVrdV);
        warpgroup_fence_operand(tdKrdK);
        if constexpr (kLast) tl.mark(kBwdLastDkvDone);
        fwd::release(smem.qdo_empty[s]);
        pipe.advance();
        cur.advance();
        if constexpr (kPrefetch && T::kDqStoresFirst && !T::kLagDq) {
          // Experiment (traits.hpp): dQ's stores leave before S^T's operand reads, its fence after.
          warpgroup_wait<0>();
          warpgroup_fence_operand(tdQrdQ);
          const int b = stage_dq_piece<T, 0>(smem, dq_pipe, tdQrdQ, tid);
          issue_scores(tSrS, salt);
          publish_dq<T>(smem, b);
          warpgroup_wait<0>();
        } else if constexpr (kPrefetch) {
          // The next S^T queues behind dQ: the tensor cores stay busy through the dQ hand-off.
          // Live here: dK, dV, dQ and S^T (192 registers at d = 128). It is waited for before
          // the loop turns: an accumulator in flight across the back edge makes ptxas
          // serialize every WGMMA of the kernel (C7514).
          issue_scores(tSrS, salt);
          warpgroup_wait<1>();
          finish_prev_dq(tdQrdQ, dq_src, real);
          warpgroup_wait<0>();
        } else {
          warpgroup_wait<0>();
          if constexpr (kLast) {
            if (!lag) {
              release_kv(smem);
              tl.mark(kBwdKvReleased);
            }
          }
          finish_prev_dq(tdQrdQ, dq_src, real);
          if (kLast && !lag) tl.mark(kBwdLastStepDone);  // where dQ lags: after the drain
        }
        prev = ds_pipe;
        ds_pipe.advance();
      };
      // The last step's dQ, before K is released.
      auto drain = [&](int i, auto& tdQrdQ) {
        auto [tSrK, tSrV, tSrQ, tSrdO, tdVrdOt, tdKrQt, tdQrdS, tdQrKt] = views(i & p.opaque_zero);
        fwd::wait_full(smem.ds_full[prev.stage()], prev.phase());
        issue_prev_dq(tdQrdS, tdQrKt, tdQrdQ, prev);
        warpgroup_wait<0>();
        release_kv(smem);
        tl.mark(kBwdKvReleased);
        finish_prev_dq(tdQrdQ, prev, true);
        tl.mark(kBwdLastStepDone);
      };
      // Warpgroup 1 starts a lagging tile once warpgroup 0 has its first probabilities, so that
      // each one's softmax runs under the other's GEMMs (nothing re-aligns them until the tile
      // ends).
      if (lag && wg == 1) named_barrier_sync(kStaggerBarrier, T::kNumConsumerThreads);
      if constexpr (kOverlapSteps) {
        // With S^T crossing steps, every accumulator is created (and pinned by a fence) once
        // per tile, before any GEMM is in flight: a fragment created inside the step would
        // get its undefined initial value from a register that ptxas may have merged with the
        // in-flight S^T accumulator.
        auto tSrS = fresh_scores();
        auto tSrdP = fresh_scores();
        auto tdQrdQ_own = fresh_dq();
        // dQ^T (T::kDqTransposed) has dP^T's accumulator layout and is written only once dS^T
        // has left dP^T's registers: the two share them. Kept apart, the per-tile accumulators
        // of 80-row steps (3 x 40 + dK, dV) do not fit.
        auto& tdQrdQ = pick<T::kDqTransposed>(tSrdP, tdQrdQ_own);
        warpgroup_fence_operand(tSrS);
        warpgroup_fence_operand(tSrdP);
        warpgroup_fence_operand(tdQrdQ);
        issue_scores(tSrS, 0);
        warpgroup_wait<0>();
        tl.mark(kBwdFirstScoresDone);
        for (int i = 0; i + 1 < steps; ++i) step(i, cute::true_type{}, cute::false_type{}, tSrS, tSrdP, tdQrdQ);
        tl.mark(kBwdLastStepStarts);
        step(steps - 1, cute::false_type{}, cute::true_type{}, tSrS, tSrdP, tdQrdQ);
        if (lag) drain(steps, tdQrdQ);
      } else {
        // Fresh accumulators in every step: 1-2% faster at d64 than ones kept per tile.
        auto serial_step = [&](int i, auto last) HOPATTN_LAMBDA_INLINE {
          auto tSrS = fresh_scores();
          auto tSrdP = fresh_scores();
          auto tdQrdQ = fresh_dq();
          step(i, cute::false_type{}, last, tSrS, tSrdP, tdQrdQ);
        };
        tl.mark(kBwdFirstScoresDone);  // here: the first step starts (its S^T is not issued ahead)
        for (int i = 0; i + 1 < steps; ++i) serial_step(i, cute::false_type{});
        tl.mark(kBwdLastStepStarts);
        serial_step(steps - 1, cute::true_type{});
        auto tdQrdQ = fresh_dq();
        if (lag) drain(steps, tdQrdQ);
      }
    });
  }
};

}  // namespace hopattn::kernels::bwd
