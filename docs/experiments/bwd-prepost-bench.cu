// Backward pre- and postprocess kernels timed alone (session 24, docs/perf-log.md), next to two
// postprocess variants that measured slower (H200: 58-60 and 55-56 us against 51-54): evict-first
// loads issued before the state word, and the block brought in by one bulk copy into shared memory. 16k tokens,
// hidden 2048, (B, S, H, D) layout, bf16; variants' outputs compared bitwise with the tree's.
// Session 39 added the read ceiling: O and dO streamed once by a plain kernel (50 us on an H100).
// Not built by CMake; from the repository root, with the headers of tools/setup-deps:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -I include -I src -I .deps/cutlass/include \
//     docs/experiments/bwd-prepost-bench.cu -o /tmp/prepost && /tmp/prepost
#include <cstdio>
#include <vector>
#include <algorithm>
#include <functional>
#include <cuda_runtime.h>
#include <cutlass/arch/barrier.h>
#include "kernels/bwd/postprocess.hpp"
#include "kernels/bwd/preprocess.hpp"
#include "kernels/bwd/tile_table.hpp"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
using namespace hopattn::kernels;
using namespace hopattn::kernels::bwd;

// Both variants' second half: scale the thread's sums (zeros for a block nobody wrote) into the
// bf16 tile in shared memory, then store it as 16-byte row pieces.
template <class T>
__device__ void scale_and_store(const float4* v, bool written, const BwdPostParams<typename T::Element>& p,
                                const fwd::SeqInfo& si, int m_block, typename T::Element* dq,
                                typename T::Element* tile) {
  using namespace cute;
  using Element = typename T::Element;
  constexpr int kPitch = T::kHeadDim + 8;
  const int tid = threadIdx.x;
  typename T::MmaDQ mma;
  Tensor coords = mma.get_thread_slice(tid).partition_C(make_identity_tensor(typename T::DqTile{}));
  CUTE_UNROLL
  for (int i = 0; i < T::kDqPerThread; i += 2) {
    const float* vals = reinterpret_cast<const float*>(&v[i / 4]) + i % 4;
    __nv_bfloat162 pair;
    reinterpret_cast<Element*>(&pair)[0] = Element(written ? vals[0] * p.softmax_scale : 0.f);
    reinterpret_cast<Element*>(&pair)[1] = Element(written ? vals[1] * p.softmax_scale : 0.f);
    *reinterpret_cast<__nv_bfloat162*>(&tile[get<0>(coords(i)) * kPitch + get<1>(coords(i))]) = pair;
  }
  __syncthreads();
  constexpr int kVecsPerRow = T::kHeadDim / 8;
  constexpr int kVecsPerThread = T::kBlockM * kVecsPerRow / T::kNumConsumerThreads;
  CUTE_UNROLL
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int vec = i * T::kNumConsumerThreads + tid;
    const int r = vec / kVecsPerRow, c = vec % kVecsPerRow * 8;
    const int row = m_block * T::kBlockM + r;
    if (row < si.seqlen_q) *reinterpret_cast<uint4*>(dq + row * p.dq_stride.row + c) = *reinterpret_cast<const uint4*>(&tile[r * kPitch + c]);
  }
}

// Where this CTA's query block lives (the tree's postprocess computes the same): its rows in
// dq_accum (row_base), whether it has rows at all, and the head's dQ rows.
template <class T>
struct BlockPlace {
  int m_block;
  fwd::SeqInfo si;
  int64_t row_base;
  typename T::Element* dq;
  __device__ __forceinline__ bool empty() const { return m_block * T::kBlockM >= si.seqlen_q; }
};
template <class T>
__device__ __forceinline__ BlockPlace<T> place_block(const BwdPostParams<typename T::Element>& p) {
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  BlockPlace<T> b{m_block, fwd::seq_info(p, batch), 0, nullptr};
  const bool varlen = p.cu_seqlens_q != nullptr;
  b.row_base = head * p.rows_per_head + padded_row_start<T::kBlockM>(varlen, batch, b.si.q_offset, p.seqlen_q_rounded) +
               m_block * T::kBlockM;
  b.dq = head_rows(p.dq, p.dq_stride, varlen, b.si.q_offset, batch, head);
  return b;
}

// Variant 1: the tree's postprocess with evict-first loads, the block state read after them.
template <class T>
__global__ void __launch_bounds__(T::kNumConsumerThreads) post_regs(const __grid_constant__ BwdPostParams<typename T::Element> p) {
  using namespace cute;
  using Element = typename T::Element;
  wait_for_prior_grids();
  const BlockPlace<T> b = place_block<T>(p);
  if (b.empty()) return;
  const float4* block = reinterpret_cast<const float4*>(p.dq_accum + b.row_base * T::kHeadDim);
  const int tid = threadIdx.x;
  constexpr int kPitch = T::kHeadDim + 8;
  __shared__ alignas(16) uint16_t tile_bits[T::kBlockM * kPitch];
  Element* tile = reinterpret_cast<Element*>(tile_bits);
  float4 v[T::kDqPerThread / 4];
  CUTE_UNROLL
  for (int i = 0; i < T::kDqPerThread / 4; ++i) v[i] = __ldcs(&block[i * T::kNumConsumerThreads + tid]);
  const bool written = p.dq_accum_cleared || p.dq_block_state[b.row_base / T::kBlockM] != 0;
  scale_and_store<T>(v, written, p, b.si, b.m_block, b.dq, tile);
}

// Variant 2: the block arrives by one bulk copy into shared memory (no registers held while it
// is in flight); the bf16 tile reuses the same buffer.
template <class T>
__global__ void __launch_bounds__(T::kNumConsumerThreads) post_bulk(const __grid_constant__ BwdPostParams<typename T::Element> p) {
  using namespace cute;
  using Element = typename T::Element;
  extern __shared__ __align__(128) char smem_raw[];
  __shared__ alignas(8) uint64_t bar;
  float4* stage = reinterpret_cast<float4*>(smem_raw);
  const int tid = threadIdx.x;
  if (tid == 0) { cutlass::arch::ClusterTransactionBarrier::init(&bar, 1); cutlass::arch::fence_barrier_init(); }
  wait_for_prior_grids();
  const BlockPlace<T> b = place_block<T>(p);
  if (b.empty()) return;
  constexpr int kBytes = T::kBlockM * T::kHeadDim * 4;
  __syncthreads();
  if (tid == 0) {
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&bar, kBytes);
    SM90_BULK_COPY_G2S::copy(p.dq_accum + b.row_base * T::kHeadDim, &bar, stage, kBytes);
  }
  const bool written = p.dq_accum_cleared || p.dq_block_state[b.row_base / T::kBlockM] != 0;
  cutlass::arch::ClusterTransactionBarrier::wait(&bar, 0);
  float4 v[T::kDqPerThread / 4];
  CUTE_UNROLL
  for (int i = 0; i < T::kDqPerThread / 4; ++i) v[i] = stage[i * T::kNumConsumerThreads + tid];
  __syncthreads();
  scale_and_store<T>(v, written, p, b.si, b.m_block, b.dq, reinterpret_cast<Element*>(smem_raw));
}


// The read ceiling for the preprocess (session 39): both 16-bit buffers streamed once as 16-byte
// pieces, grid-stride, summed so that the loads are not dead, one float per CTA written.
__global__ void __launch_bounds__(256) read_ceiling(const uint4* a, const uint4* b, size_t n, float* out) {
  float acc = 0.f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    acc += __uint_as_float(x.x ^ y.y) + __uint_as_float(x.z ^ y.w);
  }
  if (acc == 12345.f) out[blockIdx.x] = acc;
}

template <class T>
struct Bench {
  using E = typename T::Element;
  int B, S, H, d = T::kHeadDim;
  WorkspaceLayout wl;
  char* ws; E *o, *dout, *dq, *dq_ref; float* lse;
  BwdPostParams<E> post{}; BwdPreParams<E> pre{};
  cudaEvent_t e0, e1;
  Bench(int tokens, int hidden) {
    d = T::kHeadDim; S = 512; B = tokens / S; H = hidden / d;
    wl = WorkspaceLayout::make(false, B, S, B * S, H, H, d, T::kBlockM);
    CK(cudaMalloc(&ws, wl.total));
    size_t n = size_t(B) * S * H * d;
    CK(cudaMalloc(&o, n * 2)); CK(cudaMalloc(&dout, n * 2)); CK(cudaMalloc(&dq, n * 2)); CK(cudaMalloc(&dq_ref, n * 2));
    CK(cudaMalloc(&lse, size_t(B) * H * S * 4));
    std::vector<float> h(wl.rows_per_head * H * d);
    for (size_t i = 0; i < h.size(); ++i) h[i] = float((i * 2654435761u) % 2001) * 1e-3f - 1.f;
    CK(cudaMemcpy(ws + wl.dq_accum_offset, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int> st(wl.rows_per_head * H / T::kBlockM);
    for (size_t i = 0; i < st.size(); ++i) st[i] = (i % 7 == 3) ? 0 : 2;  // some blocks never written
    CK(cudaMemcpy(ws + wl.state_offset, st.data(), st.size() * 4, cudaMemcpyHostToDevice));
    std::vector<uint16_t> hb(n);
    for (size_t i = 0; i < n; ++i) hb[i] = 0x3f80 + (uint16_t)((i * 40503u) % 127);
    CK(cudaMemcpy(o, hb.data(), n * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dout, hb.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(lse, 0, size_t(B) * H * S * 4));
    for (BwdCommonParams* c : {static_cast<BwdCommonParams*>(&post), static_cast<BwdCommonParams*>(&pre)}) {
      c->batch = B; c->seqlen_q = c->seqlen_k = S; c->nheads = c->nheads_k = H; c->head_group = 1; c->total_q = c->total_k = B * S;
      c->rows_per_head = wl.rows_per_head; c->seqlen_q_rounded = wl.seqlen_q_rounded;
      c->lse_log2 = (float*)(ws + wl.lse_offset); c->dsum = (float*)(ws + wl.dsum_offset); c->dq_accum = (float*)(ws + wl.dq_accum_offset);
      c->dq_block_state = (int*)(ws + wl.state_offset); c->dq_accum_cleared = false; c->softmax_scale = 0.088f;
    }
    Strides3 s{int64_t(S) * H * d, int64_t(H) * d, d};
    post.dq = dq; post.dq_stride = s; pre.out = o; pre.dout = dout; pre.out_stride = s; pre.dout_stride = s; pre.lse = lse; pre.lse_head_stride = S; pre.lse_batch_stride = int64_t(H) * S;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  }
  template <class F> float time(F f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> ts;
    for (int i = 0; i < 40; ++i) { CK(cudaEventRecord(e0)); f(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms * 1000); }
    std::sort(ts.begin(), ts.end()); return ts[ts.size() / 2];
  }
  void run() {
    const int mb = S / T::kBlockM;
    const dim3 g_m(mb, H, B);
    const size_t n = size_t(B) * S * H * d;
    const int thr = T::kNumConsumerThreads;
    const int bulk_smem = T::kBlockM * T::kHeadDim * 4;
    CK(cudaFuncSetAttribute(post_bulk<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
    auto p_new = [&] { bwd_postprocess_kernel<T><<<g_m, thr>>>(post); };
    auto p_ldcs = [&] { post_regs<T><<<g_m, thr>>>(post); };
    auto p_bulk = [&] { post_bulk<T><<<g_m, thr, bulk_smem>>>(post); };
    auto q_new = [&] { bwd_preprocess_kernel<E, T::kHeadDim, T::kBlockM><<<g_m, kPreprocessThreads>>>(pre); };
    std::vector<uint16_t> a(n), b(n);
    p_new(); CK(cudaDeviceSynchronize()); CK(cudaMemcpy(a.data(), dq, n * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (auto f : std::vector<std::function<void()>>{p_ldcs, p_bulk}) {
      CK(cudaMemset(dq, 0xff, n * 2)); f(); CK(cudaDeviceSynchronize()); CK(cudaMemcpy(b.data(), dq, n * 2, cudaMemcpyDeviceToHost));
      bad += a != b;
    }
    const size_t rows = wl.rows_per_head * H;
    std::vector<float> da(2 * rows), db(2 * rows);  // lse_log2 then dsum (adjacent in the workspace? copy separately)
    auto grab = [&](std::vector<float>& v) {
      CK(cudaMemcpy(v.data(), post.lse_log2, rows * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(v.data() + rows, post.dsum, rows * 4, cudaMemcpyDeviceToHost));
    };
    q_new(); CK(cudaDeviceSynchronize()); grab(da);
    q_new(); CK(cudaDeviceSynchronize()); grab(db); bad += da != db;  // run to run
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    auto ceiling = [&] { read_ceiling<<<sms * 8, 256>>>((const uint4*)o, (const uint4*)dout, n * 2 / 16, (float*)dq); };
    constexpr int kN = 5;
    float t[kN] = {};
    for (int r = 0; r < 3; ++r) {
      float x[kN] = {time(p_new), time(p_ldcs), time(p_bulk), time(q_new), time(ceiling)};
      for (int i = 0; i < kN; ++i) t[i] += x[i] / 3;
    }
    printf("d%-3d Bm %3d mismatches %d | post: tree %5.1f ldcs %5.1f bulk %5.1f us | pre: %5.1f us"
           " | read ceiling of O + dO: %5.1f us (%.2f TB/s)\n",
           d, T::kBlockM, bad, t[0], t[1], t[2], t[3], t[4], 4.0 * n / (t[4] * 1e6));
  }
};

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0)); printf("%s\n", prop.name);
  { Bench<DefaultBwdTraits<cutlass::bfloat16_t, 64>> b(16384, 2048); b.run(); }
  { Bench<DefaultBwdTraits<cutlass::bfloat16_t, 128>> b(16384, 2048); b.run(); }
  { Bench<DefaultBwdTraits<cutlass::bfloat16_t, 256>> b(16384, 2048); b.run(); }
  return 0;
}
