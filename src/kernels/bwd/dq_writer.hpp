// Both sides of the dQ hand-off. The dQ writer warp (warpgroup 0, warp 1, lane 0): per step,
// waits until the consumers have stored the block's dQ partial in shared memory (dq_full), adds
// it to the FP32 accumulator in global memory with bulk reduce-adds (or stores it with bulk
// copies if it writes the block first, below), and frees each buffer (dq_empty) once its copy
// has read it (DqRingRelease). The consumers never wait on global memory. A step's partial
// comes in T::kDqChunks chunks (one per dQ GEMM of a warpgroup: 2 at d = 256), each handed off in
// T::kDqPieces pieces; each piece is a contiguous range of the block in dq_accum (stage_dq_piece).
// With one piece, every hand-off goes through the same buffer and waits for the previous bulk
// op to have read it: about as long as the op takes, since the bulk engine reads shared memory
// as it sends (docs/experiments/bulk-reduce-bench.cu, session 31). With two, smem.dq is a ring
// of two half buffers: the consumers fill one while the op of the other still reads it.
//
// Unless `p.dq_accum_cleared` (clears_dq_accum in launch.hpp says where waiting for a first
// store would cost more than clearing: e.g. without a mask beyond 1k keys), dq_accum
// is not cleared (that was a third of the preprocess's traffic, and the main kernel then read the
// zeros back from memory): the first key block to write a query block *stores* its partial (a
// bulk copy), and the others add to it once that store has landed. The block's state
// (`p.dq_block_state`, zeroed by the launch's memset) orders them:
//  * default: before waiting for the block's dQ, the writer reads the state (acquire). Stored
//    (2): add. Unwritten (0): try to claim it (0 -> 1, atomicCAS); the winner stores, and once
//    the store has landed publishes 2 (release). Otherwise (claimed by another) spin until 2.
//    The tiles that visit a query block reach it at different times (under a causal mask each
//    starts at its own diagonal; without one each starts its walk level with its keys,
//    schedule.hpp), so the spin is rare. No deadlock: a winner never waits on another CTA
//    between its claim and its publication.
//  * deterministic mode: the adds into one query block happen in key-block order. Before adding,
//    the writer spins on the block's state until it counts the key blocks before this one that
//    visit the block (the first one, whose count is 0, stores); once the add has completed
//    (checked after the next add is issued) it increments it. A writer only ever waits for
//    smaller key blocks, so delaying its own signals creates no cycle. Tiles are claimed in
//    increasing order and a key block's predecessor always has a smaller tile index, so the oldest
//    unfinished tile can always progress (no deadlock while all CTAs of the grid are resident).
// Either way a state of 0 after the main kernel means that no key block wrote the block: unless
// dq_accum was cleared, the postprocess writes zero dQ there.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#ifdef HOPATTN_EXP_BWD_NO_DQ_PROXY_FENCE
#pragma message("HOPATTN_EXP_BWD_NO_DQ_PROXY_FENCE: no proxy fence before the dQ hand-off, the bulk copy may read stale dQ (timing experiment, bwd.md Open, session 31)")
#endif
// Timing experiments (perf-log, sessions 30-31): -DHOPATTN_EXP_BWD_DQ_SKIP_ONE_IN=N skips the
// bulk writes of one query block in N: 1 all of them, 2 half, 5 the share 80-key tiles save.
#ifdef HOPATTN_EXP_BWD_DQ_SKIP_ONE_IN
#pragma message("HOPATTN_EXP_BWD_DQ_SKIP_ONE_IN: the dQ writer skips the writes of one query block in N, dQ is wrong (timing experiment)")
#endif

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/schedule.hpp"
#include "kernels/bwd/traits.hpp"
#include "kernels/fwd/pipeline.hpp"

namespace hopattn::kernels::bwd {

// One bulk copy of a dQ partial from shared memory into dq_accum, in its own bulk group: an FP32
// reduce-add into what is there, or a plain store (the block's first write).
__device__ __forceinline__ void bulk_write_f32(float* gmem_dst, const float* smem_src, uint32_t bytes, bool add) {
  const uint32_t src = cute::cast_smem_ptr_to_uint(smem_src);
  // The commit in each branch rather than once after them: ptxas then keeps the branches (one
  // commit after them compiled to predicated copies, a different schedule that was not measured).
  if (add) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(gmem_dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(gmem_dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
}

__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all_but_newest() {
  asm volatile("cp.async.bulk.wait_group 1;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read_all_but_newest() {
  asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
}

// Counts one more landed write at *sem, for whoever acquires it: in deterministic mode the next
// key block of a query block; with the concurrent dQ conversion the postprocess (a tile's writes).
// The caller has waited for the bulk ops (bulk_wait_all or _all_but_newest).
__device__ __forceinline__ void signal_added(int* sem) {
  asm volatile("fence.proxy.async;" ::: "memory");  // order the bulk add before the generic release
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(sem) : "memory");
}

// Default mode's query-block states (see the top of this file).
constexpr int kBlockUnwritten = 0, kBlockClaimed = 1, kBlockStored = 2;

// Whether this writer stores the block (it claimed it); otherwise returns once the first
// writer's store has landed, so that the adds that follow see it.
__device__ __forceinline__ bool claim_or_wait_stored(int* state) {
  int seen = load_acquire_gpu(state);
  if (seen != kBlockStored) {
    if (seen == kBlockUnwritten && atomicCAS(state, kBlockUnwritten, kBlockClaimed) == kBlockUnwritten) return true;
    while (load_acquire_gpu(state) != kBlockStored) __nanosleep(32);
  }
  asm volatile("fence.proxy.async;" ::: "memory");  // order the acquire before the bulk adds
  return false;
}

// The claimed block's store has been issued: publish it once it has landed.
__device__ __forceinline__ void publish_stored(int* state) {
  bulk_wait_all();
  asm volatile("fence.proxy.async;" ::: "memory");  // order the bulk store before the generic release
  asm volatile("st.release.gpu.global.b32 [%0], %1;" :: "l"(state), "r"(kBlockStored) : "memory");
}

// Key blocks before n_block that visit query block m_block (its turn in the deterministic
// order). The visible keys of a block's rows form one contiguous range, so the key blocks that
// visit m_block are contiguous too and end at or after n_block (which visits it): over
// [0, n_block] "visits" is false then true, and a binary search finds the first one. A linear
// count made the writer the bottleneck at long sequences (O(key blocks) per step).
template <class T>
__host__ __device__ __forceinline__ int key_blocks_before(const KeyBlockMask<T::kBlockM, T::kBlockN>& mask, int n_block,
                                                 int m_block) {
  int lo = 0, hi = n_block;  // the first visiting block lies in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    int mb, me;
    mask.m_block_range(mid, mb, me);
    if (m_block >= mb && m_block < me) hi = mid;
    else lo = mid + 1;
  }
  return n_block - lo;
}

template <class T>
using DqPipe = fwd::PackedPipeState<T::kDqBuffers>;  // the ring of smem.dq's buffers

// Concurrent dQ conversion (p.pair_tiles_done set, postprocess.hpp): every dQ write of a tile of
// this (batch entry, KV head) pair has landed, or it had none: count the tile.
template <class T>
__device__ __forceinline__ void count_tile_done(const BwdKernelParams<T>& p, int pair) {
  signal_added(p.pair_tiles_done + pair);
}

// Consumer side: stores piece kPiece of this thread's dQ values of one chunk into the next buffer
// of smem.dq in register order, element i of the piece at float4 slot (i / 4) * threads + tid
// (consecutive threads, consecutive 16 bytes: no bank conflicts), once the writer has read what
// the buffer held; returns the buffer. With the WGMMA accumulator order, chunk c of a block with
// N columns per warpgroup holds elements [c * size, (c + 1) * size) of the whole block's
// fragment, and piece k of it the k-th part of that range, i.e. a contiguous range of float4
// slots: the layout in dq_accum is the same whatever the chunking.
template <class T, int kPiece, class TQ>
__device__ __forceinline__ int stage_dq_piece(typename T::SharedStorage& smem, DqPipe<T>& dq_pipe, const TQ& tdQrdQ,
                                              int tid) {
  using namespace cute;
  static_assert(decltype(size(tdQrdQ))::value == T::kDqPerThread / T::kDqChunks);
  constexpr int kPerThread = T::kDqPerThread / (T::kDqChunks * T::kDqPieces);
  const int b = dq_pipe.stage();
  float4* buf = reinterpret_cast<float4*>(smem.dq + b * T::kDqPieceFloats);
  fwd::wait_empty(smem.dq_empty[b], dq_pipe.phase());
  dq_pipe.advance();
  CUTE_UNROLL
  for (int i = 0; i < kPerThread; i += 4) {
    const int e = kPiece * kPerThread + i;
    buf[(i / 4) * T::kNumConsumerThreads + tid] = make_float4(tdQrdQ(e), tdQrdQ(e + 1), tdQrdQ(e + 2), tdQrdQ(e + 3));
  }
  return b;
}

// The staged piece in buffer b, handed to the writer once this thread's stores are visible to it.
template <class T>
__device__ __forceinline__ void publish_dq(typename T::SharedStorage& smem, int b) {
#ifndef HOPATTN_EXP_BWD_NO_DQ_PROXY_FENCE  // timing experiment: what the fence costs (dQ may be wrong)
  cutlass::arch::fence_view_async_shared();  // the writer's bulk copy reads through the async proxy
#endif
  fwd::release(smem.dq_full[b]);
}

// One chunk, piece after piece.
template <class T, class TQ>
__device__ __forceinline__ void hand_off_dq(typename T::SharedStorage& smem, DqPipe<T>& dq_pipe, const TQ& tdQrdQ,
                                            int tid) {
  cute::for_each(cute::make_int_sequence<T::kDqPieces>{}, [&](auto k) {
    publish_dq<T>(smem, stage_dq_piece<T, decltype(k)::value>(smem, dq_pipe, tdQrdQ, tid));
  });
}

// The writer's side of smem.dq's ring: when it frees (dq_empty) the buffer of a bulk op. With one
// buffer, once the op has read it, before the next hand-off. With more, the newest op's buffer is
// held until the next op has been issued (then wait_group.read 1) or every op has landed, so
// that one op is always in flight.
template <int kBuffers>
struct DqRingRelease {
  int held = -1;  // the buffer the newest op reads (kBuffers > 1)

  // An op reading buffer b was issued.
  __device__ __forceinline__ void issued(uint64_t* dq_empty, int b) {
    if constexpr (kBuffers == 1) {
      bulk_wait_read();
      fwd::release(dq_empty[0]);
    } else {
      if (held >= 0) {
        bulk_wait_read_all_but_newest();
        fwd::release(dq_empty[held]);
      }
      held = b;
    }
  }
  // Every op has landed (bulk_wait_all): the held buffer is free now rather than after the
  // next op, which may wait behind another CTA's block (a claim, a deterministic turn).
  __device__ __forceinline__ void drained(uint64_t* dq_empty) {
    if constexpr (kBuffers > 1) {
      if (held >= 0) fwd::release(dq_empty[held]);
      held = -1;
    }
  }
  // No op was issued for buffer b (timing experiments): nothing reads it. The skip path drained
  // and freed the held buffer before waiting for b (dq_writer_tiles), so b is not held.
  __device__ __forceinline__ void skipped(uint64_t* dq_empty, int b) { fwd::release(dq_empty[b]); }
};

// The writer's tiles, with the deterministic ordering compiled in or out: without it the loop
// holds only the destination, the step count and the ring position; with it the tile's fields
// live in shared memory (WriterTile, traits.hpp). Warpgroup 0 runs in few registers (traits.hpp).
template <class T, bool kDeterministic>
__device__ __forceinline__ void dq_writer_tiles(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                                                const fwd::TileScheduler& sched) {
  constexpr int kPieces = T::kDqChunks * T::kDqPieces;  // hand-offs per block
  constexpr int kPieceFloats = T::kDqPieceFloats;
  constexpr uint32_t kPieceBytes = kPieceFloats * sizeof(float);
  constexpr int kBlockFloats = T::kBlockM * T::kHeadDim;
  DqPipe<T> dq_pipe;
  DqRingRelease<T::kDqBuffers> dq_release;
  fwd::TileRingState ring;
  WriterTile local;
  WriterTile& t = kDeterministic ? smem.writer_tile : local;
  for (int tile = fwd::receive_tile(smem.tiles, ring); tile < sched.num_tiles;
       tile = fwd::receive_tile(smem.tiles, ring)) {
    {
      const TileWork<T> w = tile_work<T>(p, sched, tile);
      if (p.pair_tiles_done != nullptr) {
        const int pair = w.batch * p.nheads_k + w.kv_head;
        if (w.empty()) {
          count_tile_done<T>(p, pair);
          continue;
        }
        smem.writer_pair = pair;  // read back at the tile's end: a register held through it spilled at d = 64
      } else if (w.empty()) {
        continue;
      }
      t = {w.stats_row0, w.n_block, w.kv_head, w.m_begin, w.m_end, w.m_first, w.si.seqlen_q, w.si.seqlen_k};
    }
    // Deterministic mode: the semaphore (query block index) of the previous step's block, whose
    // add was issued but not yet signalled. It is signalled once the next add is issued (or at the
    // end of the tile), so the writer never sits waiting for a fresh add to land in global memory.
    int pending = -1;
    for (int g = 0; g < p.head_group; ++g) {
      // Padded rows (workspace.hpp): a query block of dq_accum is its offset in blocks, and query
      // block m of this head is block0 + m. Only indices are held across the loop (warpgroup 0
      // has 24 registers at d = 64: a pointer held besides them spilled).
      const int block0 = int(((t.kv_head * p.head_group + g) * p.rows_per_head + t.stats_row0) / T::kBlockM);
#pragma unroll 1  // in warpgroup 0's few registers, an unrolled copy of this loop spills
      for (QueryWalk q{t.m_begin, t.m_first, t.m_end}; !q.done(); q.advance()) {
        const int m = q.m();
        const int block = block0 + m;
        // Before dq_full, so that the polls overlap the consumers' step. store: this writer
        // writes the block first, with a store rather than an add.
        bool store;
        if constexpr (kDeterministic) {
          const KeyBlockMask<T::kBlockM, T::kBlockN> mask{t.seqlen_q, t.seqlen_k, p.window_left, p.window_right};
          const int turn = key_blocks_before<T>(mask, t.n_block, m);
          while (load_acquire_gpu(p.dq_block_state + block) != turn) __nanosleep(32);
          asm volatile("fence.proxy.async;" ::: "memory");  // order the acquire before the bulk op
          store = !p.dq_accum_cleared && turn == 0;
        } else {
          store = !p.dq_accum_cleared && claim_or_wait_stored(p.dq_block_state + block);
        }
        for (int j = 0; j < kPieces; ++j) {
          // The address from the index here, not held across the waits above (24 registers).
          float* dst = p.dq_accum + int64_t(block) * kBlockFloats + j * kPieceFloats;
          const int b = dq_pipe.stage();
          const float* src = smem.dq + b * kPieceFloats;
#ifdef HOPATTN_EXP_BWD_DQ_SKIP_ONE_IN  // timing experiments only (top of file): dQ is then wrong
          const bool issue = m % HOPATTN_EXP_BWD_DQ_SKIP_ONE_IN != HOPATTN_EXP_BWD_DQ_SKIP_ONE_IN - 1;
          // With two buffers the newest op's buffer is held until the next op is issued; a skipped
          // piece may need that very buffer, so free it first (else: a hang, session 47).
          if (!issue) {
            bulk_wait_all();
            dq_release.drained(smem.dq_empty);
          }
#else
          constexpr bool issue = true;
#endif
          fwd::wait_full(smem.dq_full[b], dq_pipe.phase());
          if (!issue) {
            if constexpr (kDeterministic) {  // the previous block's signal is still due
              if (j == 0 && pending >= 0) {
                bulk_wait_all();
                signal_added(p.dq_block_state + pending);
                pending = -1;
              }
            }
            dq_release.skipped(smem.dq_empty, b);
            dq_pipe.advance();
            continue;
          }
          bulk_write_f32(dst, src, kPieceBytes, /*add=*/!store);
          if constexpr (kDeterministic) {
            if (j == 0 && pending >= 0) {
              bulk_wait_all_but_newest();  // every piece of the previous block has landed
              signal_added(p.dq_block_state + pending);
            }
          }
          dq_release.issued(smem.dq_empty, b);
          dq_pipe.advance();
        }
        if constexpr (kDeterministic) {
          pending = block;
        } else if (store) {
          publish_stored(p.dq_block_state + block);
          dq_release.drained(smem.dq_empty);
        }
      }
    }
    if (kDeterministic && pending >= 0) {
      bulk_wait_all();
      dq_release.drained(smem.dq_empty);
      signal_added(p.dq_block_state + pending);
    }
    if (p.pair_tiles_done != nullptr) {
      // The next tile's first dQ comes a step from now at the earliest: this wait for the
      // landing of the last adds is mostly under the consumers' next S and dP GEMMs.
      bulk_wait_all();
      dq_release.drained(smem.dq_empty);
      count_tile_done<T>(p, smem.writer_pair);
    }
  }
}

template <class T>
__device__ void dq_writer_loop(const BwdKernelParams<T>& p, typename T::SharedStorage& smem,
                               const fwd::TileScheduler& sched) {
  if (p.deterministic) dq_writer_tiles<T, true>(p, smem, sched);
  else dq_writer_tiles<T, false>(p, smem, sched);
  bulk_wait_all();
}

}  // namespace hopattn::kernels::bwd
