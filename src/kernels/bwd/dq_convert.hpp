// dQ finished inside the main kernel (no postprocess launch). Every query block of dq_accum has
// an arrival counter (the workspace's semaphores): once a key block's add into it has landed,
// the dQ writer (dq_writer.hpp) counts it (a release reduction, no return value). One of the key
// blocks that visit the query block converts it: the last one, whose tile the scheduler hands
// out last (tile indices grow with the key block for a fixed head). That key block's writer
// hands the query block to its CTA's converter warp (warpgroup 0, warp 2), which waits until the
// counter reaches the number of visitors (KeyBlockMask::visiting_key_blocks), bulk-loads the
// finished sums from L2 into a shared staging buffer, scales them by softmax_scale and stores
// dQ in the input dtype, while the consumers go on. Query blocks that no key block visits get
// their zero dQ from the preprocess kernel.
//
// No deadlock (all CTAs are resident): take the smallest tile index T whose adds are not all
// counted. Its CTA can stop only where its writer waits on a full queue, i.e. its converter
// waits for a block designated to a tile T' <= T of this CTA; that block's other visitors have
// smaller tile indices than T', so they are counted, and T' counted its own add before queueing
// the block (a writer counts a tile's adds before it queues any of them at the tile's end).
//
// What did not work (docs/perf-log.md, session 18): the writer counting with a returning atomic
// and converting whatever it completed (-20..35%: a round trip to L2 on the writer's path per
// block, and completions land on random CTAs); the converter warp counting with that atomic
// (-5..45%: with release semantics each count waits for the warp's outstanding dQ stores, and
// the writer then waits on a full queue).
#pragma once

#include <cuda_bf16.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

// Writer -> converter warp: a query block this key block converts, once all its visitors' adds
// have landed.
struct DqJob {
  int block;     // index of the query block in dq_accum (padded row / kBlockM); < 0: stop
  int visitors;  // key blocks that add into it; 0: another key block converts it
  int batch;
};

// The converter's shared memory: the job ring and a double staging buffer for a finished block's
// sums (a block goes through in 8 KB chunks: 512 float4 slots of the register order).
struct DqConvertSmem {
  static constexpr int kSlots = 8;
  static constexpr int kChunkFloats = 2048;
  static constexpr int kChunkSlots = kChunkFloats / 4;
  alignas(128) float stage[2][kChunkFloats];
  DqJob job[kSlots];
  uint64_t full[kSlots];   // the writer filled the slot
  uint64_t empty[kSlots];  // the converter copied it out
  uint64_t stage_full[2];  // a chunk's bytes arrived

  __device__ __forceinline__ void init() {
    for (int s = 0; s < kSlots; ++s) {
      fwd::EmptyBarrier::init(&full[s], 1);
      fwd::EmptyBarrier::init(&empty[s], 1);
    }
    for (auto& b : stage_full) fwd::FullBarrier::init(&b, 1);
  }
  __device__ __forceinline__ void push(fwd::PipeState<kSlots>& st, const DqJob& j) {
    fwd::wait_empty(empty[st.stage], st.phase);
    job[st.stage] = j;
    fwd::release(full[st.stage]);  // mbarrier arrive: release, the job is visible to the waiter
    st.advance();
  }
};
using DqQueueState = fwd::PipeState<DqConvertSmem::kSlots>;
struct NoDqConvertSmem {};  // kernels whose postprocess converts dQ (no shared memory left)

// Counts one landed add into a query block. The writer waited for the bulk add to complete and
// fenced the async proxy (fence_landed_adds); the release orders the add before the count.
__device__ __forceinline__ void count_landed_add(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Waits until every visitor's add into the block has landed; from then on their sums are visible,
// to the bulk loads (async proxy) too.
__device__ __forceinline__ void wait_block_complete(const int* counter, int visitors) {
  while (load_acquire(counter) != visitors) __nanosleep(64);
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// One finished block, by the converter warp. dq_accum holds it in the dQ GEMM's register order:
// consumer thread t's element i at float4 slot (i / 4) * consumer threads + t, pairs (i, i + 1)
// adjacent columns of one row. Chunk c (slots [c * 512, (c + 1) * 512): values 4 c' .. 4 c' + 3
// of every thread, c' = 2 c, 2 c + 1) is bulk-loaded two chunks ahead; lane l converts the slots
// of threads l + 32 k. The coordinate of (t, i) is the sum of thread t's first coordinate and
// thread 0's i-th (the MMA layout is additive in thread and value; test_bwd_schedule.cu checks
// it), so the per-value part is computed once per chunk and the per-thread part once per k: a
// full coordinate per value cost ~130 instructions per float4, issue slots taken from the
// consumer warps that share this warp's scheduler.
template <class T>
__device__ void convert_dq_block(const BwdKernelParams<T>& p, DqConvertSmem& s, uint32_t (&stage_phase)[2],
                                 int block, int batch, int lane) {
  using namespace cute;
  using Element = typename T::Element;
  static_assert(!T::kDqTransposed, "transposed dQ blocks go through the postprocess kernel");
  constexpr int kThreads = T::kNumConsumerThreads;
  constexpr int kChunks = T::kBlockM * T::kHeadDim / DqConvertSmem::kChunkFloats;
  constexpr int kVecsPerChunk = DqConvertSmem::kChunkSlots / kThreads;  // float4 per thread and chunk
  static_assert(kChunks * DqConvertSmem::kChunkFloats == T::kBlockM * T::kHeadDim);
  static_assert(DqConvertSmem::kChunkSlots % kThreads == 0, "a chunk holds whole rows of slots");
  constexpr uint32_t kChunkBytes = DqConvertSmem::kChunkFloats * sizeof(float);

  const float* src = p.dq_accum + int64_t(block) * (T::kBlockM * T::kHeadDim);
  auto load_chunk = [&](int c) {
    if (lane == 0) {
      fwd::expect_bytes(s.stage_full[c % 2], kChunkBytes);
      SM90_BULK_COPY_G2S::copy(src + c * DqConvertSmem::kChunkFloats, &s.stage_full[c % 2], s.stage[c % 2],
                               kChunkBytes);
    }
  };
  load_chunk(0);
  if (kChunks > 1) load_chunk(1);

  const bool varlen = p.cu_seqlens_q != nullptr;
  const fwd::SeqInfo si = fwd::seq_info(p, batch);
  const int64_t blocks_per_head = p.rows_per_head / T::kBlockM;
  const int head = int(block / blocks_per_head);
  const int64_t first_block =
      padded_row_start<T::kBlockM>(varlen, batch, si.q_offset, p.seqlen_q_rounded) / T::kBlockM;
  const int m_block = int(block % blocks_per_head - first_block);
  const int rows = si.seqlen_q - m_block * T::kBlockM;
  const int64_t stride = p.dq_stride.row;
  Element* dq = head_rows(p.dq, p.dq_stride, varlen, si.q_offset, batch, head) + int64_t(m_block) * T::kBlockM * stride;
  const float scale = p.softmax_scale;
  typename T::MmaDQ mma;
  const auto value_coords = mma.get_thread_slice(0).partition_C(make_identity_tensor(typename T::DqTile{}));
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) {
    // Rows and columns of the chunk's values relative to a thread's first: pairs
    // (4 v, 4 v + 1) and (4 v + 2, 4 v + 3) of its vectors v.
    int value_row[kVecsPerChunk][2], value_col[kVecsPerChunk][2];
    CUTE_UNROLL
    for (int v = 0; v < kVecsPerChunk; ++v) {
      CUTE_UNROLL
      for (int q = 0; q < 2; ++q) {
        const auto rc = value_coords((c * kVecsPerChunk + v) * 4 + 2 * q);
        value_row[v][q] = get<0>(rc);
        value_col[v][q] = get<1>(rc);
      }
    }
    fwd::wait_full(s.stage_full[c % 2], stage_phase[c % 2]);
    stage_phase[c % 2] ^= 1;
    const float4* buf = reinterpret_cast<const float4*>(s.stage[c % 2]);
    CUTE_UNROLL
    for (int k = 0; k < kThreads / 32; ++k) {
      const int t = lane + 32 * k;
      const auto first = mma.get_thread_slice(t).partition_C(make_identity_tensor(typename T::DqTile{}))(0);
      Element* dq_t = dq + get<0>(first) * stride + get<1>(first);
      const int rows_t = rows - get<0>(first);
      CUTE_UNROLL
      for (int v = 0; v < kVecsPerChunk; ++v) {
        const float4 x = buf[v * kThreads + t];
        const float pair[2][2] = {{x.x, x.y}, {x.z, x.w}};
        CUTE_UNROLL
        for (int q = 0; q < 2; ++q) {
          if (value_row[v][q] >= rows_t) continue;  // past the sequence (last block only)
          __nv_bfloat162 out;  // any 4-byte carrier of two 16-bit values
          reinterpret_cast<Element*>(&out)[0] = Element(pair[q][0] * scale);
          reinterpret_cast<Element*>(&out)[1] = Element(pair[q][1] * scale);
          *reinterpret_cast<__nv_bfloat162*>(dq_t + value_row[v][q] * stride + value_col[v][q]) = out;
        }
      }
    }
    __syncwarp();  // every lane has read the buffer before it is loaded again
    if (c + 2 < kChunks) load_chunk(c + 2);
  }
}

// The converter warp's loop: convert the blocks this CTA's key blocks are designated for.
template <class T>
__device__ void dq_converter_loop(const BwdKernelParams<T>& p, DqConvertSmem& s) {
  const int lane = int(threadIdx.x % 32);
  DqQueueState st;
  uint32_t stage_phase[2] = {0, 0};
  for (;;) {
    // Polled with a pause: this warp shares an SM scheduler with the consumers.
    while (!fwd::EmptyBarrier::try_wait(&s.full[st.stage], st.phase)) __nanosleep(128);
    const DqJob job = s.job[st.stage];
    __syncwarp();
    if (lane == 0) fwd::release(s.empty[st.stage]);
    st.advance();
    if (job.block < 0) return;
    if (lane == 0) wait_block_complete(p.dq_semaphore + job.block, job.visitors);
    __syncwarp();
#ifndef HOPATTN_EXP_NO_DQ_CONVERT
    convert_dq_block<T>(p, s, stage_phase, job.block, job.batch, lane);
#endif
  }
}

}  // namespace hopattn::kernels::bwd
