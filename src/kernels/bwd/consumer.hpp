// The consumer warpgroups of the backward kernel. Warpgroup w owns keys [64w, 64w + 64) of the
// tile and keeps their dK and dV accumulators in registers for the whole tile. One step per
// query block m (of every query head in the KV head's group):
//
//   S^T = K Q_m^T ; dP^T = V dO_m^T                  (issued together, SS)
//   wait S^T : P^T = exp2(S^T * scale_log2 - lse_log2)   (softcap, mask on the way)
//   wait dP^T: dS^T = P^T * (dP^T - dsum)                 (softcap: times 1 - tanh^2)
//   dV += P^T dO_m ; dK += dS^T Q_m                  (RS: P^T, dS^T straight from registers)
//   dS^T -> shared memory (stmatrix); both warpgroups sync (ds_ready)
//   dQ[:, half w] = dS K[:, half w]                  (SS over all 128 keys)
//   wait all, free the Q/dO stage; store the dQ half into smem.dq and arrive on dq_full.
// dK is scaled by softmax_scale in the epilogue (dQ in the postprocess kernel).
#pragma once

#include <cute/tensor.hpp>

#include "kernels/bwd/epilogue.hpp"
#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/consumer.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/softmax.hpp"

namespace hopattn::kernels::bwd {

// Named barrier ids of the backward kernel (0 is __syncthreads).
constexpr int kDsReadyBarrier = 1;  // both warpgroups' dS of this step are in shared memory

template <class T>
struct BwdConsumer {
  using Element = typename T::Element;
  static constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kHeadDim = T::kHeadDim;

  const BwdKernelParams<T>& p;
  typename T::SharedStorage& smem;
  int tid;  // 0 .. kNumConsumerThreads-1
  int wg;   // tid / 128, computed warp-uniformly by the caller
  fwd::PipeState<T::kStages> pipe;
  fwd::PipeState<1> kv_pipe, dq_pipe;

  // Scores -> probabilities in place: tanh softcap, mask, exp2 with the row's lse.
  template <class TS, class TC>
  __device__ __forceinline__ void scores_to_probs(TS& tSrS, const TC& tScS, const TileWork<T>& w, int m,
                                                  const float* lse_log2) const {
    using namespace cute;
    Tensor s_rc = make_tensor(tSrS.data(), acc_as_rowcol(tSrS.layout()));  // (keys, queries)
    Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
    if (p.use_softcap) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) = fwd::fast_tanh(tSrS(i) * p.softcap_prescale);
    }
    if (w.mask.block_needs_mask(m, w.n_block)) w.mask.apply(s_rc, c_rc, m, w.n_block);
    CUTE_UNROLL
    for (int j = 0; j < size<1>(s_rc); ++j) {
      const float lse = lse_log2[get<1>(c_rc(0, j))];
      CUTE_UNROLL
      for (int i = 0; i < size<0>(s_rc); ++i) s_rc(i, j) = fwd::fast_exp2(s_rc(i, j) * p.scale_log2 - lse);
    }
  }

  // dP^T -> dS^T in place (P^T may be FP32 or 16-bit). The softcap test is hoisted out of the
  // element loop: inside it, it split the loop into one basic block per element.
  template <class TS, class TDP, class TC>
  __device__ __forceinline__ void probs_to_dscores(const TS& tSrP, TDP& tSrdP, const TC& tScS, const float* dsum,
                                                   const float* lse_log2) const {
    if (p.use_softcap) probs_to_dscores<true>(tSrP, tSrdP, tScS, dsum, lse_log2);
    else probs_to_dscores<false>(tSrP, tSrdP, tScS, dsum, lse_log2);
  }

  // With softcap, tanh is recovered from P itself (P = exp2(t * scale_log2 - lse)) rather than
  // kept in 32 more registers; where P = 0, dS is 0 anyway.
  template <bool kSoftcap, class TS, class TDP, class TC>
  __device__ __forceinline__ void probs_to_dscores(const TS& tSrP, TDP& tSrdP, const TC& tScS, const float* dsum,
                                                   const float* lse_log2) const {
    using namespace cute;
    Tensor p_rc = make_tensor(tSrP.data(), acc_as_rowcol(tSrP.layout()));
    Tensor dp_rc = make_tensor(tSrdP.data(), acc_as_rowcol(tSrdP.layout()));
    Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
    CUTE_UNROLL
    for (int j = 0; j < size<1>(dp_rc); ++j) {
      const int q = get<1>(c_rc(0, j));
      const float d = dsum[q];
      CUTE_UNROLL
      for (int i = 0; i < size<0>(dp_rc); ++i) {
        const float prob = float(p_rc(i, j));
        float ds = prob * (dp_rc(i, j) - d);
        if constexpr (kSoftcap) {
          const float t = __fdividef(__log2f(prob) + lse_log2[q], p.scale_log2);
          ds = prob > 0.f ? ds * (1.f - t * t) : 0.f;
        }
        dp_rc(i, j) = ds;
      }
    }
  }

  // Stores this thread's dQ values into smem.dq in register order (element i at float4 slot
  // (i / 4) * threads + tid: consecutive threads, consecutive 16 bytes, no bank conflicts) once
  // the writer has read the previous block, and tells the writer.
  template <class TQ>
  __device__ __forceinline__ void hand_off_dq(const TQ& tdQrdQ) {
    float4* buf = reinterpret_cast<float4*>(smem.dq);
    fwd::wait_empty(smem.dq_empty, dq_pipe.phase);
    dq_pipe.advance();
    CUTE_UNROLL
    for (int i = 0; i < T::kDqPerThread; i += 4)
      buf[(i / 4) * T::kNumConsumerThreads + tid] =
          make_float4(tdQrdQ(i), tdQrdQ(i + 1), tdQrdQ(i + 2), tdQrdQ(i + 3));
    cutlass::arch::fence_view_async_shared();  // the writer's bulk copy reads through the async proxy
    fwd::release(smem.dq_full);
  }

  __device__ void run(const fwd::TileScheduler& sched) {
    using namespace cute;
    using fwd::issue_wgmma;
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutdO{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutV{});
    Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutdOt{});
    Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutKt{});  // (d, keys)
    Tensor sdS = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdS{});    // (q, keys, buf)
    Tensor sdSt = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdSt{});  // (keys, q, buf)

    typename T::MmaSdP mma_sdp;
    typename T::MmaDKV mma_dkv;
    typename T::MmaDQ mma_dq;
    // Shared-memory operand descriptors depend only on the warpgroup: slicing with a
    // warp-uniform index lets them live in uniform registers instead of ~60 regular ones.
    auto wg_sdp = mma_sdp.get_thread_slice(wg * 128);
    auto wg_dkv = mma_dkv.get_thread_slice(wg * 128);
    auto wg_dq = mma_dq.get_thread_slice(wg * 128);
    Tensor tSrK = wg_sdp.partition_fragment_A(sK);       // (MMA, M, K)
    Tensor tSrV = wg_sdp.partition_fragment_A(sV);
    Tensor tSrQ = wg_sdp.partition_fragment_B(sQ);       // (MMA, N, K, stage)
    Tensor tSrdO = wg_sdp.partition_fragment_B(sdO);
    Tensor tdVrdOt = wg_dkv.partition_fragment_B(sdOt);  // (MMA, d, queries, stage)
    Tensor tdKrQt = wg_dkv.partition_fragment_B(sQt);
    Tensor tdQrdS = wg_dq.partition_fragment_A(sdS);     // (MMA, queries, keys, buf)
    Tensor tdQrKt = wg_dq.partition_fragment_B(sKt);     // (MMA, d half, keys)
    // Accumulator coordinates depend on the thread.
    Tensor tScS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
    Tensor tdKVcdKV =
        mma_dkv.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

    // dS^T leaves the registers with stmatrix: the accumulator's 8x8 fragments are exactly its
    // operand layout, four of them per instruction.
    auto ds_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto ds_thr = ds_copy.get_thread_slice(tid);
    Tensor tdSsdS = ds_thr.partition_D(sdSt);  // (CPY, keys, queries, buf)

    fwd::TileRingState ring;
    int ds_buf = 0;
    for (int tile = fwd::receive_tile(smem.tiles, ring); tile < sched.num_tiles;
         tile = fwd::receive_tile(smem.tiles, ring)) {
      const TileWork<T> w = tile_work<T>(p, sched, tile);
      if (w.n_block * kBlockN >= w.si.seqlen_k) continue;  // no keys: nothing to write
      Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
      Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
      clear(tdVrdV);
      clear(tdKrdK);
      if (!w.empty()) {
        fwd::wait_full(smem.kv_full, kv_pipe.phase);
        for (int g = 0; g < p.head_group; ++g) {
          for (int m = w.m_begin; m < w.m_end; ++m) {
            const int s = pipe.stage;
            Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
            Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
            fwd::wait_full(smem.q_full[s], pipe.phase);
            issue_wgmma<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, s), tSrS);
            fwd::wait_full(smem.do_full[s], pipe.phase);
            issue_wgmma<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, s), tSrdP);
            warpgroup_wait<1>();
            warpgroup_fence_operand(tSrS);
            scores_to_probs(tSrS, tScS, w, m, smem.lse_log2[s]);
            // P^T leaves the FP32 accumulator at once: 16 registers instead of 32 while dP^T is
            // live, and dV starts before dP^T is ready. dS is computed from the rounded P (2^-9
            // relative, far below what the naive baseline's 16-bit P loses).
            Tensor tdVrP = make_tensor<Element>(acc_as_a_operand_16bit(tSrS.layout()));
            convert_into(tSrS, tdVrP);
            issue_wgmma<false, true>(mma_dkv, tdVrP, tdVrdOt(_, _, _, s), tdVrdV);
            warpgroup_wait<1>();  // dP^T is ready; dV may still run
            warpgroup_fence_operand(tSrdP);
            Tensor tSrP16 = make_tensor(tdVrP.data(), tSrS.layout());  // accumulator-order view
            probs_to_dscores(tSrP16, tSrdP, tScS, smem.dsum[s], smem.lse_log2[s]);
            Tensor tdKrdS = make_tensor<Element>(acc_as_a_operand_16bit(tSrdP.layout()));
            convert_into(tSrdP, tdKrdS);
            issue_wgmma<false, true>(mma_dkv, tdKrdS, tdKrQt(_, _, _, s), tdKrdK);

            Tensor tdSrdS = ds_thr.retile_S(make_tensor(tdKrdS.data(), tSrdP.layout()));  // accumulator order
            copy(ds_copy, tdSrdS, tdSsdS(_, _, _, ds_buf));
            cutlass::arch::fence_view_async_shared();  // generic writes -> WGMMA (async proxy) reads
            named_barrier_sync(kDsReadyBarrier, T::kNumConsumerThreads);
            Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
            auto tdQrdS_buf = tdQrdS(_, _, _, ds_buf);  // an lvalue: issue_wgmma takes A by reference
            issue_wgmma<true, false>(mma_dq, tdQrdS_buf, tdQrKt, tdQrdQ);
            ds_buf ^= 1;
            warpgroup_wait<0>();
            warpgroup_fence_operand(tdVrdV);
            warpgroup_fence_operand(tdKrdK);
            warpgroup_fence_operand(tdQrdQ);
            fwd::release(smem.qdo_empty[s]);
            pipe.advance();
            hand_off_dq(tdQrdQ);
          }
        }
        fwd::release(smem.kv_empty);  // every GEMM reading K and V has completed
        kv_pipe.advance();
      }
      store_kv_grads(p, tdKrdK, tdVrdV, tdKVcdKV, w);
    }
  }
};

}  // namespace hopattn::kernels::bwd
