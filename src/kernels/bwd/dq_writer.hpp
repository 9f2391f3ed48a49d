// Both sides of the dQ hand-off. The dQ writer warp (warpgroup 0, warp 1, lane 0): per step,
// waits until the consumers have stored the block's dQ partial in shared memory (dq_full), adds
// it to the FP32 accumulator in global memory with one bulk reduce-add, and frees the buffer
// (dq_empty) once the copy has read it. The consumers never wait on global memory. At d = 256
// a step's partial comes in T::kDqChunks pieces, one after the other through the same buffer;
// each is a contiguous range of the block in dq_accum (see hand_off_dq).
//
// Once an add has landed (checked kLandLag blocks after it was issued, or at the end of the
// tile, so that the writer never sits waiting for a fresh add), the writer counts it on the
// query block's counter and, if this key block is the one that converts the query block, hands
// the block to the converter warp (dq_convert.hpp).
//
// Deterministic mode: the adds into one query block happen in key-block order. Before adding,
// the writer spins on the block's counter until it counts the key blocks before this one that
// visit the block. A writer only ever waits for smaller key blocks, so delaying its own counts
// creates no cycle. Tiles are claimed in increasing order and a key block's predecessor always
// has a smaller tile index, so the oldest unfinished tile can always progress (no deadlock while
// all CTAs of the grid are resident).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include "kernels/bwd/dq_convert.hpp"
#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem_dst, const float* smem_src, uint32_t bytes) {
  const uint32_t src = cute::cast_smem_ptr_to_uint(smem_src);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               :: "l"(gmem_dst), "r"(src), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all_but_newest() {
  asm volatile("cp.async.bulk.wait_group 1;" ::: "memory");
}

// Consumer side: stores this thread's dQ values (one chunk of the block) into smem.dq in register
// order, element i at float4 slot (i / 4) * threads + tid (consecutive threads, consecutive 16
// bytes: no bank conflicts), once the writer has read the previous chunk, and tells the writer.
// With the WGMMA accumulator order, chunk c of a block with N columns per warpgroup holds
// elements [c * size, (c + 1) * size) of the whole block's fragment, i.e. a contiguous range of
// float4 slots: the layout in dq_accum is the same whatever the chunking.
template <class T, class TQ>
__device__ __forceinline__ void hand_off_dq(typename T::SharedStorage& smem, fwd::PipeState<1>& dq_pipe,
                                            const TQ& tdQrdQ, int tid) {
  using namespace cute;
  static_assert(decltype(size(tdQrdQ))::value == T::kDqPerThread / T::kDqChunks);
  float4* buf = reinterpret_cast<float4*>(smem.dq);
  fwd::wait_empty(smem.dq_empty, dq_pipe.phase);
  dq_pipe.advance();
  CUTE_UNROLL
  for (int i = 0; i < size(tdQrdQ); i += 4)
    buf[(i / 4) * T::kNumConsumerThreads + tid] = make_float4(tdQrdQ(i), tdQrdQ(i + 1), tdQrdQ(i + 2), tdQrdQ(i + 3));
  cutlass::arch::fence_view_async_shared();  // the writer's bulk copy reads through the async proxy
  fwd::release(smem.dq_full);
}

// Adds issued but not yet handed to the converters, oldest first: an add is handed over
// kLandLag blocks after it was issued, once it has landed, so the writer never waits on a fresh
// add (a reduce-add into a block that several key blocks hit at once takes microseconds to
// land) and is back at dq_full in time.
#ifndef HOPATTN_BWD_DQ_LAND_LAG
#define HOPATTN_BWD_DQ_LAND_LAG 2
#endif
struct PendingAdds {
  static constexpr int kLandLag = HOPATTN_BWD_DQ_LAND_LAG;
  DqJob job[kLandLag];
  int size = 0;
  // Unrolled with compares rather than job[size]: a dynamic index would put the array in local
  // memory.
  __device__ __forceinline__ void push(const DqJob& j) {
    CUTE_UNROLL
    for (int i = 0; i < kLandLag; ++i)
      if (i == size) job[i] = j;
    ++size;
  }
  __device__ __forceinline__ DqJob pop_oldest() {
    const DqJob oldest = job[0];
    CUTE_UNROLL
    for (int i = 0; i + 1 < kLandLag; ++i) job[i] = job[i + 1];
    --size;
    return oldest;
  }
};

template <int N>
__device__ __forceinline__ void bulk_wait_all_but(cute::Int<N>) {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// The landed adds become visible to the converter warps' generic-proxy release (their count).
__device__ __forceinline__ void fence_landed_adds() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

template <class T>
__device__ void dq_writer_loop(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                               const fwd::TileScheduler& sched) {
  constexpr int kChunkFloats = T::kBlockM * T::kHeadDim / T::kDqChunks;
  constexpr uint32_t kChunkBytes = kChunkFloats * sizeof(float);
  constexpr int kLag = PendingAdds::kLandLag;
  fwd::PipeState<1> dq_pipe;
  fwd::TileRingState ring;
  DqQueueState queue;
  PendingAdds pending;
  // Counts the oldest pending add (landed and fenced) and, if this key block converts its query
  // block, queues the block for the converter warp.
  const bool convert = T::kConvertDqInKernel && p.convert_dq;
  auto push = [&](const DqJob& job) {
    if constexpr (T::kConvertDqInKernel) {
      if (convert && job.visitors > 0) smem.dq_convert.push(queue, job);
    }
  };
  auto hand_over_oldest = [&] {
    const DqJob job = pending.pop_oldest();
    count_landed_add(p.dq_semaphore + job.block);
    push(job);
  };
  for (int tile = fwd::receive_tile(smem.tiles, ring); tile < sched.num_tiles;
       tile = fwd::receive_tile(smem.tiles, ring)) {
    const TileWork<T> w = tile_work<T>(p, sched, tile);
    if (w.empty()) continue;
    for (int g = 0; g < p.head_group; ++g) {
      const int64_t stats_head = (w.kv_head * p.head_group + g) * p.rows_per_head + w.stats_row0;
#pragma unroll 1  // at 40 registers, an unrolled copy of this loop spills
      for (int m = w.m_begin; m < w.m_end; ++m) {
        const int64_t row = stats_head + m * T::kBlockM;
        const int block = int(row / T::kBlockM);
        const auto run = w.mask.visiting_key_blocks(m);
        if (p.deterministic) {  // before dq_full: the polls overlap the consumers' step
          const int turn = w.n_block - run.first;
          while (load_acquire(p.dq_semaphore + block) != turn) __nanosleep(32);
        }
        for (int c = 0; c < T::kDqChunks; ++c) {
          fwd::wait_full(smem.dq_full, dq_pipe.phase);
          bulk_reduce_add_f32(p.dq_accum + row * T::kHeadDim + c * kChunkFloats, smem.dq, kChunkBytes);
          bulk_wait_read();  // the shared buffer may be overwritten
          fwd::release(smem.dq_empty);
          dq_pipe.advance();
        }
        if (!convert && !p.deterministic) continue;  // nobody counts: no wait for landing
        // Deterministic mode counts one block later, not kLag: the next key block's writer waits
        // for the count (0.84x at d64 2k with kLag, session 18).
        if (p.deterministic && pending.size == 1) {
          bulk_wait_all_but(cute::Int<T::kDqChunks>{});  // the previous block has landed
          fence_landed_adds();
          hand_over_oldest();
        } else if (pending.size == kLag) {
          bulk_wait_all_but(cute::Int<kLag * T::kDqChunks>{});  // the oldest pending block has landed
          fence_landed_adds();
          hand_over_oldest();
        }
        const int visitors = run.end - run.first;
        const bool converts = w.n_block == run.end - 1;  // the last visitor converts (dq_convert.hpp)
        pending.push(DqJob{block, converts ? visitors : 0, w.batch});
      }
    }
    if (pending.size > 0) {  // the tile's last adds: handed over before the next tile's first
      bulk_wait_all();
      fence_landed_adds();
      // Every add of the tile is counted before any queue push can block the writer: the
      // no-deadlock argument in dq_convert.hpp needs a finished tile's adds all counted.
      CUTE_UNROLL
      for (int i = 0; i < kLag; ++i)
        if (i < pending.size) count_landed_add(p.dq_semaphore + pending.job[i].block);
      CUTE_UNROLL
      for (int i = 0; i < kLag; ++i)
        if (i < pending.size) push(pending.job[i]);
      pending.size = 0;
    }
  }
  bulk_wait_all();
  if constexpr (T::kConvertDqInKernel) smem.dq_convert.push(queue, DqJob{-1, 0, 0});  // converter: stop
}

}  // namespace hopattn::kernels::bwd
