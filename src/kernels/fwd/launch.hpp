// Host side of the forward kernel: TMA descriptors, scheduler sizing, launch.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include <cute/tensor.hpp>

#include "api/cuda_check.hpp"
#include "kernels/fwd/kernel.hpp"
#include "kernels/fwd/l2_sections.hpp"
#include "kernels/fwd_args.hpp"

namespace hopattn::kernels::fwd {

// TMA needs every stride to be a multiple of 16 bytes, even for dims of extent 1 whose stride is
// never used; give those a harmless legal value.
inline int64_t tma_stride(int64_t stride, int64_t extent, int64_t fallback) {
  return extent <= 1 ? fallback : stride;
}

template <class T, class Element = typename T::Element>
auto make_gmem_view(const void* ptr, const Strides3& s, int rows, int heads, int batch, bool varlen) {
  using namespace cute;
  const int64_t legal = 16 / int64_t(sizeof(Element)) * 8;  // any multiple of 16 bytes
  auto shape = make_shape(int32_t(rows), int32_t(T::kHeadDim), int32_t(heads), int32_t(varlen ? 1 : batch));
  auto stride = make_stride(tma_stride(s.row, rows, legal), _1{}, tma_stride(s.head, heads, legal),
                            varlen ? legal : tma_stride(s.batch, batch, legal));
  return make_tensor(make_gmem_ptr(static_cast<Element const*>(ptr)), shape, stride);
}

inline int l2_cache_bytes() {
  static int bytes = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
      cudaGetLastError();
      return 50 << 20;
    }
    return v;
  }();
  return bytes;
}

// The fields every kernel's parameters take from ProblemArgs unchanged: lengths, varlen arrays,
// heads (seq_info() reads these on the device).
template <class P>
void copy_sequence_fields(P& p, const ProblemArgs& a) {
  p.batch = a.batch;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.nheads = a.nheads;
  p.head_group = a.nheads / a.nheads_k;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqused_q = a.seqused_q;
  p.seqused_k = a.seqused_k;
  p.total_q = a.total_q;
  p.total_k = a.total_k;
}

// How raw scores become exp2 arguments, shared by the forward and the backward: softmax_scale
// (or softcap, after the tanh) folded with log2(e) into one multiplier.
template <class P>
void set_score_scale(P& p, const ProblemArgs& a) {
  constexpr float kLog2e = 1.4426950408889634f;
  p.use_softcap = a.softcap > 0.f;
  p.scale_log2 = (p.use_softcap ? a.softcap : a.softmax_scale) * kLog2e;
  p.softcap_prescale = p.use_softcap ? a.softmax_scale / a.softcap : 1.f;
}

template <class T>
void set_fp8_fields(FwdKernelParams<T>& p, const FwdArgs& a) {
  p.q_descale = a.q_descale;
  p.k_descale = a.k_descale;
  p.v_descale = a.v_descale;
  p.q_block_descale = a.q_block_descale;
  p.k_block_descale = a.k_block_descale;
  p.v_block_descale = a.v_block_descale;
  p.q_block_rows = std::max(a.q_block_rows, 1);
  p.q_num_blocks = a.q_num_blocks;
  p.kv_num_blocks = a.kv_num_blocks;
  // The API checked that a K/V scale block is a whole number of key tiles (FwdKernel::block_n).
  p.kv_key_tiles_per_block = std::max(a.kv_block_rows / T::kBlockN, 1);
  p.out_fp16 = a.out_fp16;
}

// Where the score recompute of max-free blocks (Consumer::recompute_scores) reads Q and K.
template <class T>
void set_raw_qk_fields(FwdKernelParams<T>& p, const FwdArgs& a) {
  p.q_raw = static_cast<const typename T::Element*>(a.q);
  p.k_raw = static_cast<const typename T::Element*>(a.k);
  p.q_row_stride = a.q_stride.row;
  p.q_head_stride = a.q_stride.head;
  p.q_batch_stride = a.q_stride.batch;
  p.k_row_stride = a.k_stride.row;
  p.k_head_stride = a.k_stride.head;
  p.k_batch_stride = a.k_stride.batch;
  p.q_rows8_bytes = 8 * a.q_stride.row * int64_t(sizeof(typename T::Element));
  p.k_rows8_bytes = 8 * a.k_stride.row * int64_t(sizeof(typename T::Element));
}

// The TMA store of O (Output::kStaged). TMA clips rows at the tensor's end (dense); varlen
// tiles that would cross into the next sequence are written from registers (epilogue.hpp).
template <class T>
void set_output_store(FwdKernelParams<T>& p, const FwdArgs& a, int q_rows, bool varlen) {
  using namespace cute;
  using Output = typename T::Output;
  if constexpr (Output::kStaged) {
    if (q_rows == 0) return;  // no tile runs, and a tensor map cannot describe zero rows
    auto mO = make_gmem_view<T, typename Output::Carrier>(a.out, a.out_stride, q_rows, a.nheads, a.batch, varlen);
    p.tma_o = make_tma_copy(SM90_TMA_STORE{}, mO, typename Output::SmemLayoutWg{}, typename Output::TileWg{}, _1{});
  }
}

// 2-CTA clusters with K/V multicast (FwdKernelParams::cluster_kv, T::kClusterKV). H100, against
// one CTA per tile (perf-log, session 43): d128 1k-8k +1.0..2.9%, d256 1k-8k +4.1..5.6%; FP8 at
// d256 only (traits_fp8.hpp, session 44).
// The two CTAs of a cluster must issue the same K/V loads in the same order (each waits for the
// other's word before every load), so both must run every tile of the pair over the same key
// blocks: no mask (a causal pair sees different key ranges), no varlen or seqused (a CTA would
// skip a tile whose rows lie past its sequence: the producer's `continue`s must never fire here),
// an even number of query blocks, keys present. And every tile must cost the same, as the
// clusters walk a fixed stride (tile_scheduler.hpp). Widening this list needs the producer to
// keep both CTAs' load sequences equal.
// Query blocks per (head, batch): the scheduler's m-blocks before clusters pair them.
template <class T>
int64_t num_query_blocks(const FwdArgs& a) {
  return (int64_t(a.seqlen_q) + T::kBlockM - 1) / T::kBlockM;
}

template <class T>
bool use_cluster_kv(const FwdArgs& a, int64_t num_m_blocks) {
  return T::kClusterKV && !a.disable_cluster && !a.varlen() && a.seqused_q == nullptr && a.seqused_k == nullptr &&
         !a.has_window() && num_m_blocks % 2 == 0 && a.seqlen_k > 0 && a.num_sms >= 2;
}

template <class T>
FwdKernelParams<T> make_params(const FwdArgs& a) {
  using namespace cute;
  using Element = typename T::Element;
  const bool varlen = a.varlen();
  // A tensor map cannot describe zero rows; with no keys nothing is ever loaded from K/V, so a
  // one-row map over q's memory stands in.
  const int q_rows = varlen ? a.total_q : a.seqlen_q;
  const int k_rows = varlen ? a.total_k : a.seqlen_k;
  const bool no_keys = k_rows == 0;
  auto mQ = make_gmem_view<T>(a.q, a.q_stride, q_rows, a.nheads, a.batch, varlen);
  auto mK = make_gmem_view<T>(no_keys ? a.q : a.k, no_keys ? a.q_stride : a.k_stride, std::max(k_rows, 1),
                              a.nheads_k, a.batch, varlen);
  auto mV = make_gmem_view<T>(no_keys ? a.q : a.v, no_keys ? a.q_stride : a.v_stride, std::max(k_rows, 1),
                              a.nheads_k, a.batch, varlen);

  FwdKernelParams<T> p{
      make_tma_copy(SM90_TMA_LOAD{}, mQ, take<0, 2>(typename T::SmemLayoutQ{}), typename T::TileQ{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename T::SmemLayoutK{}), typename T::TileKV{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, mV, take<0, 2>(typename T::SmemLayoutV{}), typename T::TileKV{}, _1{}),
      mQ.shape(), mK.shape()};
  set_output_store<T>(p, a, q_rows, varlen);
  p.out = a.out;
  p.out_row_stride = a.out_stride.row;
  p.out_head_stride = a.out_stride.head;
  p.out_batch_stride = a.out_stride.batch;
  p.lse = a.lse;
  p.lse_head_stride = a.lse_head_stride;
  p.lse_batch_stride = a.lse_batch_stride;
  copy_sequence_fields(p, a);
  set_score_scale(p, a);
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.pingpong = T::kPingpong && !a.disable_pingpong;
  if constexpr (T::kFp8) set_fp8_fields<T>(p, a);
  if constexpr (T::kMaxFreeBlocks) set_raw_qk_fields<T>(p, a);

  // Sizes in 64-bit: the API bounds each length by int32, not their products.
  const int64_t num_m_blocks = num_query_blocks<T>(a);
  const int64_t pairs = int64_t(a.nheads) * a.batch;
  const int64_t num_tiles = num_m_blocks * pairs;
  if (num_tiles > INT32_MAX)
    throw Error(ErrorCode::kNotSupported, "q", "more than 2^31 tiles (batch * heads * seqlen_q / " +
                                                   std::to_string(T::kBlockM) + ")");
  p.num_m_blocks = int(num_m_blocks);
  p.num_tiles = int(num_tiles);
  if constexpr (T::kClusterKV) {
    p.cluster_kv = use_cluster_kv<T>(a, num_m_blocks);
    if (p.cluster_kv) {  // the scheduler's tiles become pairs of query blocks
      p.num_m_blocks /= 2;
      p.num_tiles /= 2;
      p.tma_k_mc = make_tma_copy(SM90_TMA_LOAD_MULTICAST{}, mK, take<0, 2>(typename T::SmemLayoutK{}),
                                 typename T::TileKV{}, _2{});
      p.tma_v_mc = make_tma_copy(SM90_TMA_LOAD_MULTICAST{}, mV, take<0, 2>(typename T::SmemLayoutV{}),
                                 typename T::TileKV{}, _2{});
    }
  }
  const int64_t kv_bytes_per_head = 2 * int64_t(std::max(a.seqlen_k, 1)) * T::kHeadDim * int64_t(sizeof(Element));
  p.longest_first = a.has_window() && !a.disable_lpt;
  const int64_t section =
      a.l2_section_pairs > 0
          ? a.l2_section_pairs
          : l2_section_pairs(a.seqlen_k, kv_bytes_per_head, p.head_group, l2_cache_bytes(), p.longest_first);
  p.heads_per_l2_section = int(std::min<int64_t>(pairs, section));
  p.tile_divisors = TileDivisors::make(p.num_m_blocks, a.nheads, p.num_tiles, p.heads_per_l2_section);
  return p;
}

// A cluster launch: as many 2-CTA clusters as fit at once (fewer than half the SMs where the
// GPCs' sizes leave an SM without a partner), each a persistent pair.
template <class T>
void launch_clusters(const FwdKernelParams<T>& p, const FwdArgs& a, cudaStream_t stream) {
  auto kernel = attention_fwd_kernel<T>;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(T::kNumThreads);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // Co-resident clusters, per device (the occupancy query is not free; a fixed stride over more
  // clusters than fit would run the late ones' shares after the others).
  constexpr int kMaxDevices = 64;
  static std::atomic<int> max_clusters[kMaxDevices] = {};
  int dev = 0;
  HOPATTN_CUDA_CHECK(cudaGetDevice(&dev));
  int fit = dev < kMaxDevices ? max_clusters[dev].load(std::memory_order_relaxed) : 0;
  if (fit == 0) {
    cfg.gridDim = dim3(2 * std::max(a.num_sms / 2, 1));  // any multiple of the cluster size
    HOPATTN_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg));
    fit = std::max(fit, 1);
    if (dev < kMaxDevices) max_clusters[dev].store(fit, std::memory_order_relaxed);
  }
  const int clusters = std::min({p.num_tiles, fit, a.num_sms / 2});
  cfg.gridDim = dim3(2 * clusters);
  HOPATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <class T>
void launch(const FwdArgs& a, void* workspace, cudaStream_t stream) {
  FwdKernelParams<T> p = make_params<T>(a);
  if (p.num_tiles == 0) return;
  // The dynamic scheduler's tile counter; a memset node is as graph-capturable as the kernel.
  // (Clusters and the kernel without warp specialization walk a fixed stride and never read it.)
  p.tile_counter = static_cast<int*>(workspace);
  if (!p.cluster_kv && T::kWarpSpecialized) HOPATTN_CUDA_CHECK(cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream));
  auto kernel = attention_fwd_kernel<T>;
  HOPATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  if (p.cluster_kv) {
    launch_clusters<T>(p, a, stream);
  } else {
    const int grid = std::min(p.num_tiles, a.num_sms);
    kernel<<<grid, T::kNumThreads, T::kSmemBytes, stream>>>(p);
    HOPATTN_CUDA_CHECK(cudaGetLastError());
  }
#ifdef HOPATTN_EXP_TIMELINE
  timeline_print_kernel<<<1, 1, 0, stream>>>(/*bwd=*/false);
#endif
#ifdef HOPATTN_EXP_BLOCK_PROBE
  block_probe_print_kernel<<<1, 1, 0, stream>>>();
#endif
}

// What make_params decides, for Plan::ctas_per_cluster.
template <class T>
int ctas_per_cluster(const FwdArgs& a) {
  return use_cluster_kv<T>(a, num_query_blocks<T>(a)) ? 2 : 1;
}

template <class T>
size_t workspace_bytes(const FwdArgs&) {
  return 256;  // the tile counter of the dynamic scheduler (padded to an allocation granule)
}

}  // namespace hopattn::kernels::fwd
