// The loads of the Table 2 ablation without warp specialization (FwdTraits::kWarpSpecialized =
// false). There is no producer warpgroup: thread 0 of the first consumer warpgroup issues the
// TMA loads itself, in the gaps of its own mainloop, into the same rings and barriers the
// producer would fill (pipeline.hpp). So the loads wait for that thread to come by, and a stage
// it wants to refill must have been freed by the other warpgroup too: the two warpgroups'
// progress is coupled, which is what warp specialization removes.
//
// Per tile (the consumers' order: key blocks last to first):
//   begin_tile:        Q, then K and V of the first kStages blocks (waits for the previous
//                      tile's stages to be freed);
//   first block, S read: K of one more block (the first block's K stage is free);
//   block n, S_n read: K of block n - kStages (K_n's stage; before the softmax, +4..7% against
//                      after it: perf-log session 44);
//   end of block n:    V of block n + 1 - kStages (V_{n+1}'s stage, freed after P V's wait).
// Only stages the issuing warpgroup has already freed are waited for, so the wait is only for
// the other warpgroup, which never waits for this one (no pingpong token, no shared epilogue
// barrier in this kernel): no cycle. Tiles come in a fixed stride (no tile ring), and the next
// tile's loads start only at its beginning: the pipeline drains at every tile boundary.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>

#include "kernels/fwd/params.hpp"
#include "kernels/fwd/pipeline.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

template <class T>
struct InlineLoader {
  static_assert(std::is_same_v<typename T::SmemLayoutK, typename T::SmemLayoutV>, "one layout for both rings");
  using Params = FwdKernelParams<T>;
  using Smem = typename T::SharedStorage;
  // Few registers: every consumer thread holds this state next to the mainloop's (the consumer
  // keeps the parameters and shared storage and passes them in).
  PackedPipeState<T::kStages> k_pipe, v_pipe;
  PackedPipeState<T::kQStages> q_pipe;
  int kv_head = 0, batch = 0, k_offset = 0;  // the tile's K/V rows
  int n_begin = 0, k_next = -1, v_next = -1;  // the next key block whose K / V is loaded (descending)

  // A tile with key blocks [nb, ne) starts: its Q and the first kStages blocks. Only `leader`
  // (consumer thread 0) issues; every thread keeps the state.
  __device__ __forceinline__ void begin_tile(const Params& p, Smem& smem, bool leader, const TileCoord& c,
                                             const SeqInfo& si, int nb, int ne) {
    kv_head = c.head / p.head_group;
    batch = p.cu_seqlens_q != nullptr ? 0 : c.batch;
    k_offset = si.k_offset;
    n_begin = nb;
    k_next = v_next = ne - 1;
    if (!leader) return;
    load_q(p, smem, c.head, c.m_block, si.q_offset);
    refill(p, smem, leader, ne - T::kStages, ne - T::kStages);
  }

  // Loads K of the blocks down to k_lowest and V down to v_lowest (within the tile), K first:
  // the consumers need the next K before the next V.
  __device__ __forceinline__ void refill(const Params& p, Smem& smem, bool leader, int k_lowest, int v_lowest) {
    if (!leader) return;
    for (; k_next >= max(k_lowest, n_begin); --k_next) load_kv(p, smem, true, k_next);
    for (; v_next >= max(v_lowest, n_begin); --v_next) load_kv(p, smem, false, v_next);
  }

 private:
  __device__ __forceinline__ void load_q(const Params& p, Smem& smem, int head, int m_block, int q_offset) {
    using namespace cute;
    Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});
    Tensor gQ = local_tile(domain_offset(make_coord(q_offset, _0{}), mQ(_, _, head, batch)), typename T::TileQ{},
                           make_coord(m_block, _0{}));
    auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    wait_empty(smem.q_empty[q_pipe.stage()], q_pipe.phase());
    expect_bytes(smem.q_full[q_pipe.stage()], T::kBytesQ);
    copy(p.tma_q.with(smem.q_full[q_pipe.stage()]), tQg, tQs(_, q_pipe.stage()));
    q_pipe.advance();
  }

  // K or V of key block n into the next stage of its ring.
  __device__ __forceinline__ void load_kv(const Params& p, Smem& smem, bool is_k, int n) {
    using namespace cute;
    const auto& tma = is_k ? p.tma_k : p.tma_v;
    auto& pipe = is_k ? k_pipe : v_pipe;
    const int stage = pipe.stage();
    uint64_t& full = is_k ? smem.k_full[stage] : smem.v_full[stage];
    uint64_t& empty = is_k ? smem.k_empty[stage] : smem.v_empty[stage];
    Tensor mKV = tma.get_tma_tensor(p.shape_k);
    Tensor sKV = make_tensor(make_smem_ptr(is_k ? smem.k.data() : smem.v.data()), typename T::SmemLayoutK{});
    Tensor gKV = local_tile(domain_offset(make_coord(k_offset, _0{}), mKV(_, _, kv_head, batch)),
                            typename T::TileKV{}, make_coord(_, _0{}));
    auto views = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sKV), group_modes<0, 2>(gKV));
    wait_empty(empty, pipe.phase());
    expect_bytes(full, T::kBytesKV);
    copy(tma.with(full), get<0>(views)(_, n), get<1>(views)(_, stage));
    pipe.advance();
  }
};

// What the warp-specialized kernels hold instead (no member, no code).
struct NoInlineLoader {};

}  // namespace hopattn::kernels::fwd
