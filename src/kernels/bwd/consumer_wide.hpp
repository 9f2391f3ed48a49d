// The consumer warpgroups of the backward kernel for head dims 192 and 256 (traits_wide.hpp).
// The tile is 64 keys; both warpgroups work on all of them and split every GEMM: warpgroup w
// computes the scores of queries [32w, 32w + 32) of the step and owns columns
// [w d/2, (w + 1) d/2) of dK, dV and dQ. One step per query block m:
//
//   S^T = K Q_m^T ; dP^T = V dO_m^T          (SS, 64 keys x this warpgroup's 32 queries)
//   P^T = exp2(S^T * scale_log2 - lse_log2)  (softcap, mask on the way; dP^T runs)
//   P^T -> shared memory (stmatrix)
//   wait dP^T: dS^T = P^T (dP^T - dsum) -> shared memory
//   both warpgroups sync (ds_ready): all 64 queries' P^T and dS^T are in shared memory
//   dV[:, half w] += P^T dO_m[:, half w]     (SS)
//   dK[:, half w] += dS^T Q_m[:, half w]     (SS)
//   dQ[:, half w]  = dS K[:, half w]         (SS, in kDqChunks GEMMs)
//   wait dV, dK: free the Q and dO stages; then hand each dQ chunk to the writer as it
//   completes, the next step's S^T issued before the last one (it runs under the hand-off), and
//   its dP^T too where dO has as many stages as Q (d = 192); else (d = 256: two Q stages, one
//   dO) dP^T is issued at the step's start, when its dO has had the hand-off's time to land.
//   The tile's last step frees K and V before its last hand-off (which waits for the writer).
// With a stored dS (T::kStoreDs, stored_ds.hpp) there are no dQ GEMMs: once both warpgroups'
// dS^T is in shared memory, thread 0 stores it to global memory (TMA) for the dQ kernel, and
// the next step's S^T (and dP^T, kPrefetchDpT: d = 192) is issued right after dV and dK.
// Registers per thread at d = 256: dK, dV 64 each for the whole tile, S^T, dP^T 16 each, the dQ
// chunks 64 together. The dQ chunks do not reuse the registers of S^T and dP^T (dead by
// then): sharing them made ptxas serialize every WGMMA (C7511).
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/consumer_common.hpp"
#include "kernels/bwd/dq_writer.hpp"
#include "kernels/bwd/score_grads.hpp"
#include "kernels/bwd/stored_ds.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/consumer.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

// The shared-memory operands of one step as WGMMA descriptor tensors, rebuilt in every step
// from a base offset by `salt` (always 0, read from the kernel parameters) so that ptxas does
// not hoist the descriptor words into registers (see operand_views in consumer.hpp). Order:
// (K, V, Q, dO) of the score GEMMs, (P^T, dS^T, dO^T, Q^T) of the dV/dK GEMMs, dS of dQ.
template <class T, class MSdP, class MDkv, class MDq>
__device__ __forceinline__ auto wide_operand_views(typename T::SharedStorage& smem, int salt, int wg, MSdP& mma_sdp,
                                                   MDkv& mma_dkv, MDq& mma_dq) {
  using namespace cute;
  auto view = [salt](auto* ptr, auto layout) { return salted_smem(ptr, salt, layout); };
  auto sdp = mma_sdp.get_thread_slice(wg * 128);
  auto dkv = mma_dkv.get_thread_slice(wg * 128);
  auto dq = mma_dq.get_thread_slice(0);
  return make_tuple(sdp.partition_fragment_A(view(smem.k.data(), typename T::SmemLayoutK{})),      // (MMA, M, K)
                    sdp.partition_fragment_A(view(smem.v.data(), typename T::SmemLayoutV{})),
                    sdp.partition_fragment_B(view(smem.q.data(), typename T::SmemLayoutQ{})),      // (MMA, N, K, stage)
                    sdp.partition_fragment_B(view(smem.dout.data(), typename T::SmemLayoutdO{})),
                    dkv.partition_fragment_A(view(smem.pt.data(), typename T::SmemLayoutPt{})),    // (MMA, keys, q, buf)
                    dkv.partition_fragment_A(view(smem.ds.data(), typename T::SmemLayoutPt{})),
                    dkv.partition_fragment_B(view(smem.dout.data(), typename T::SmemLayoutdOt{})),  // (MMA, d, q, stage)
                    dkv.partition_fragment_B(view(smem.q.data(), typename T::SmemLayoutQt{})),
                    dq.partition_fragment_A(view(smem.ds.data(), typename T::SmemLayoutdS{})));    // (MMA, q, keys, buf)
}

// K^T columns [c0, c0 + chunk) as the B operand of a dQ chunk GEMM.
template <class T, class MDq>
__device__ __forceinline__ auto kt_chunk_view(typename T::SharedStorage& smem, int salt, int chunk_idx, MDq& mma_dq) {
  using namespace cute;
  Tensor sKt = salted_smem(smem.k.data(), salt, typename T::SmemLayoutKt{});  // (d, keys)
  Tensor chunk = local_tile(sKt, Shape<Int<T::kDqChunkCols>, Int<T::kBlockN>>{}, make_coord(chunk_idx, _0{}));
  return mma_dq.get_thread_slice(0).partition_fragment_B(chunk);  // (MMA, d chunk, keys)
}

template <class T>
struct BwdWideConsumer {
  using Element = typename T::Element;
  static constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;
  static constexpr int kDqChunks = T::kDqChunks;
  static constexpr bool kOverlapSteps = T::kOverlapSteps;

  using LayoutS = typename decltype(partition_fragment_C(std::declval<typename T::MmaSdP&>(),
                                                         Shape<Int<kBlockN>, Int<kBlockM>>{}))::layout_type;
  // Compact, like the chunk dimension appended to it below.
  using LayoutDq = typename decltype(partition_fragment_C(std::declval<typename T::MmaDQChunk&>(),
                                                          Shape<Int<kBlockM>, Int<T::kDqChunkCols>>{}))::layout_type;

  const BwdKernelParams<T>& p;
  typename T::SharedStorage& smem;
  int tid;  // 0 .. kNumConsumerThreads-1
  int wg;   // tid / 128, computed warp-uniformly by the caller
  fwd::PackedPipeState<T::kQStages> q_pipe;
  fwd::PackedPipeState<T::kDoStages> do_pipe;
  fwd::PackedPipeState<1> kv_pipe;
  DqPipe<T> dq_pipe;

  __device__ void run(const fwd::TileScheduler& sched) {
    using namespace cute;
    using fwd::issue_wgmma;
    typename T::MmaSdP mma_sdp;
    typename T::MmaDKV mma_dkv;
    typename T::MmaDQChunk mma_dq;
    // Accumulator coordinates depend on the thread.
    Tensor tScS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));

    // P^T and dS^T leave the registers with stmatrix (the accumulator's 8x8 fragments are the
    // matrices it stores), into the (keys, queries, buffer) tiles.
    auto st_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto st_thr = st_copy.get_thread_slice(tid);
    Tensor tPsP = st_thr.partition_D(make_tensor(make_smem_ptr(smem.pt.data()), typename T::SmemLayoutPt{}));
    Tensor tdSsdS = st_thr.partition_D(make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutPt{}));

    int buf = 0;
    for_each_key_tile(p, smem, sched, kv_pipe, mma_dkv, tid, [&](const TileWork<T>& w, int steps, auto& tdKrdK,
                                                                 auto& tdVrdV, auto& tl) {
      // Every accumulator is created and pinned here, before any GEMM is in flight (consumer.hpp
      // says why: otherwise ptxas may serialize every WGMMA of the kernel). The S^T, dP^T and dQ
      // GEMMs start from zero (their previous contents are dead).
      Tensor tSrS = make_tensor<float>(LayoutS{});
      Tensor tSrdP = make_tensor<float>(LayoutS{});
      Tensor tdQrdQ = make_tensor<float>(append(shape(LayoutDq{}), Int<kDqChunks>{}));  // (frag..., chunk)
      warpgroup_fence_operand(tSrS);
      warpgroup_fence_operand(tSrdP);
      if constexpr (!T::kStoreDs) warpgroup_fence_operand(tdQrdQ);
      StepCursor cur{w.m_first, w.m_begin, w.m_end};
      // S^T of the step in Q's ring position qp once its Q has landed; dP^T likewise with dO.
      auto issue_st = [&](int salt, const auto& qp) {
        auto [tSrK, tSrV, tSrQ, tSrdO, tdVsPt, tdKsdSt, tdVsdOt, tdKsQt, tdQsdS] =
            wide_operand_views<T>(smem, salt, wg, mma_sdp, mma_dkv, mma_dq);
        fwd::wait_full(smem.q_full[qp.stage()], qp.phase());
        issue_wgmma<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, qp.stage()), tSrS);
      };
      auto issue_dpt = [&](int salt, const auto& dp) {
        auto [tSrK, tSrV, tSrQ, tSrdO, tdVsPt, tdKsdSt, tdVsdOt, tdKsQt, tdQsdS] =
            wide_operand_views<T>(smem, salt, wg, mma_sdp, mma_dkv, mma_dq);
        fwd::wait_full(smem.do_full[dp.stage()], dp.phase());
        issue_wgmma<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, dp.stage()), tSrdP);
      };
      // What a step prefetches for the next: S^T, and dP^T too where dO has as many stages as Q;
      // from the ring positions given (the pipes' current ones once the step has advanced them).
      constexpr int kPrefetched = T::kPrefetchDpT ? 2 : 1;
      auto issue_prefetch = [&](int salt, const auto& qp, const auto& dp) {
        issue_st(salt, qp);
        if constexpr (T::kPrefetchDpT) issue_dpt(salt, dp);
      };
      // One step. With kPrefetch, the next step's S^T (and dP^T, kPrefetchDpT) are issued before
      // the last dQ chunk is handed off, so that the tensor cores run through the hand-off; they
      // are waited for before the loop turns (a GEMM in flight across the back edge makes ptxas
      // serialize every WGMMA, C7514). Without kPrefetchDpT, dP^T is issued at the step's start
      // and runs under the exps. The last step is a separate instance so that the number of
      // GEMM batches in flight never depends on a branch (C7518). The tile's last step (kLast)
      // frees K and V once its last dQ chunk GEMM is done, before that chunk's hand-off.
      // The end of a step of the stored-dS kernel (T::kStoreDs), which has no dQ GEMMs: the next
      // step's S^T (and dP^T) are issued under dV and dK, from the ring positions after this
      // step's; once dV and dK are done the Q and dO stages are freed (and K, V in the tile's
      // last step, whose last readers were its S^T and dP^T).
      // A step's Q and dO stages are freed once dV and dK (their last readers) are done; then the
      // pipes and the cursor move to the next step.
      auto free_step_stages = [&] {
        fwd::release(smem.do_empty[do_pipe.stage()]);
        fwd::release(smem.q_empty[q_pipe.stage()]);
        q_pipe.advance();
        do_pipe.advance();
        cur.advance();
      };
      auto finish_step_without_dq = [&](int salt, auto prefetch, auto last) {
        constexpr bool kPrefetch = decltype(prefetch)::value;
        constexpr bool kLast = decltype(last)::value;
        if constexpr (kPrefetch) {
          auto next_q = q_pipe;
          auto next_do = do_pipe;
          next_q.advance();
          next_do.advance();
          issue_prefetch(salt, next_q, next_do);
          warpgroup_wait<kPrefetched>();
        } else {
          warpgroup_wait<0>();
        }
        warpgroup_fence_operand(tdVrdV);
        warpgroup_fence_operand(tdKrdK);
        if constexpr (kLast) {
          tl.mark(kBwdLastDkvDone);
          release_kv(smem);
          tl.mark(kBwdKvReleased);
        }
        free_step_stages();
        if constexpr (kPrefetch) warpgroup_wait<0>();
        if constexpr (kLast) tl.mark(kBwdLastStepDone);
      };
      auto step = [&](int i, auto prefetch, auto last) {
        constexpr bool kPrefetch = decltype(prefetch)::value;
        constexpr bool kLast = decltype(last)::value;
        static_assert(!(kLast && kPrefetch), "the last step releases K/V in its non-prefetch branch");
        const int qs = q_pipe.stage(), ds = do_pipe.stage(), m = cur.m;
        const int salt = i & p.opaque_zero;
        auto [tSrK, tSrV, tSrQ, tSrdO, tdVsPt, tdKsdSt, tdVsdOt, tdKsQt, tdQsdS] =
            wide_operand_views<T>(smem, salt, wg, mma_sdp, mma_dkv, mma_dq);
        if constexpr (!kOverlapSteps) {
          issue_st(salt, q_pipe);
          issue_dpt(salt, do_pipe);
          warpgroup_wait<1>();  // S^T is ready; dP^T may still run
        } else if constexpr (!T::kPrefetchDpT) {
          issue_dpt(salt, do_pipe);  // S^T completed in the previous step (or the prologue)
        }  // else both did
        warpgroup_fence_operand(tSrS);
        scores_to_probs(p, tSrS, tScS, w, m, smem.lse_log2[qs]);
        Tensor tSrP16 = make_tensor<Element>(LayoutS{});  // accumulator order
        convert_into(tSrS, tSrP16);
        // With one P/dS buffer, both warpgroups' GEMMs of the previous step must be done
        // reading it (each waited for its own before the step ended).
        if constexpr (T::kPdsBuffers == 1) named_barrier_sync(kPdsFreeBarrier, T::kNumConsumerThreads);
        copy(st_copy, st_thr.retile_S(tSrP16), tPsP(_, _, _, buf));

        if constexpr (!kOverlapSteps || !T::kPrefetchDpT) warpgroup_wait<0>();
        warpgroup_fence_operand(tSrdP);
        probs_to_dscores(p, tSrP16, tSrdP, tScS, smem.dsum[ds], smem.lse_log2[qs]);
        Tensor tSrdS16 = make_tensor<Element>(LayoutS{});
        convert_into(tSrdP, tSrdS16);
        copy(st_copy, st_thr.retile_S(tSrdS16), tdSsdS(_, _, _, buf));
        cutlass::arch::fence_view_async_shared();  // generic writes -> WGMMA (async proxy) reads
        // Stored dS: the previous step's store (the only one in flight) has read the other
        // buffer, which the next step fills once this barrier has passed.
        if constexpr (T::kStoreDs) {
          if (tid == 0) cute::tma_store_wait<0>();
        }
        named_barrier_sync(kDsReadyBarrier, T::kNumConsumerThreads);
        if constexpr (T::kStoreDs) {
          if (tid == 0) store_ds_tile<T>(p, smem, buf, w, w.kv_head * p.head_group + i / (w.m_end - w.m_begin), m);
        }

        auto tdVsPt_buf = tdVsPt(_, _, _, buf);  // lvalues: issue_wgmma takes A by reference
        auto tdKsdSt_buf = tdKsdSt(_, _, _, buf);
        auto tdQsdS_buf = tdQsdS(_, _, _, buf);
        issue_wgmma<false, false>(mma_dkv, tdVsPt_buf, tdVsdOt(_, _, _, ds), tdVrdV);
        issue_wgmma<false, false>(mma_dkv, tdKsdSt_buf, tdKsQt(_, _, _, qs), tdKrdK);
        if constexpr (T::kStoreDs) {
          buf ^= 1;
          finish_step_without_dq(salt, prefetch, last);
        } else {
          for_each(make_int_sequence<kDqChunks>{}, [&](auto c) {
            auto tdQrdQ_c = tdQrdQ(_, _, _, c);
            issue_wgmma<true, false>(mma_dq, tdQsdS_buf, kt_chunk_view<T>(smem, salt, wg * kDqChunks + c, mma_dq),
                                     tdQrdQ_c);
          });
          if constexpr (T::kPdsBuffers == 2) buf ^= 1;

          // dV and dK (the last readers of this Q and dO stage) complete before the dQ chunks.
          warpgroup_wait<kDqChunks>();
          warpgroup_fence_operand(tdVrdV);
          warpgroup_fence_operand(tdKrdK);
          if constexpr (kLast) tl.mark(kBwdLastDkvDone);
          free_step_stages();
          // Each chunk goes to the writer as soon as its GEMM is done; the later ones run meanwhile.
          for_each(make_int_sequence<kDqChunks>{}, [&](auto c) {
            constexpr int kLater = kDqChunks - 1 - decltype(c)::value;  // dQ GEMMs issued after this one
            if constexpr (kPrefetch && kLater == 0) {
              issue_prefetch(salt, q_pipe, do_pipe);
              warpgroup_wait<kPrefetched>();
            } else {
              warpgroup_wait<kLater>();
              if constexpr (kLast && kLater == 0) {
                release_kv(smem);
                tl.mark(kBwdKvReleased);
              }
            }
            auto tdQrdQ_c = tdQrdQ(_, _, _, c);
            warpgroup_fence_operand(tdQrdQ_c);
            hand_off_dq<T>(smem, dq_pipe, tdQrdQ_c, tid);
          });
          if constexpr (kPrefetch) warpgroup_wait<0>();
          if constexpr (kLast) tl.mark(kBwdLastStepDone);
        }
      };
      if constexpr (kOverlapSteps) {
        issue_prefetch(0, q_pipe, do_pipe);
        warpgroup_wait<0>();
        tl.mark(kBwdFirstScoresDone);
        for (int i = 0; i + 1 < steps; ++i) step(i, cute::true_type{}, cute::false_type{});
        tl.mark(kBwdLastStepStarts);
        step(steps - 1, cute::false_type{}, cute::true_type{});
      } else {
        tl.mark(kBwdFirstScoresDone);  // here: the first step starts (its S^T is not issued ahead)
        for (int i = 0; i + 1 < steps; ++i) step(i, cute::false_type{}, cute::false_type{});
        tl.mark(kBwdLastStepStarts);
        step(steps - 1, cute::false_type{}, cute::true_type{});
      }
    });
    // The stored dS has landed before the CTA leaves (the dQ kernel reads it after this grid).
    if constexpr (T::kStoreDs) {
      if (tid == 0) bulk_wait_all();
    }
  }
};

}  // namespace hopattn::kernels::bwd
