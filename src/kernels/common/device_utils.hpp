// Small device-side building blocks shared by the kernels: named barriers, warp-uniform ids,
// register-fragment layout conversions for WGMMA accumulators. Everything not already wrapped by
// CuTe/CUTLASS is written here with inline PTX.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_conversion.h>

namespace hopattn::kernels {

using namespace cute;

// Placed after a device lambda's parameter list: NVVM otherwise may keep a large lambda (a
// whole step loop) as a called function, and its accumulators then live in local memory.
#define HOPATTN_LAMBDA_INLINE __attribute__((always_inline))

// A compiler-only fence: plain loads and stores are not moved across it. CUTLASS's mbarrier
// wait and arrive are asm volatile without a "memory" clobber, so a plain shared-memory access
// that an mbarrier publishes (written before the arrive, read after the wait) is pinned with
// this on both sides; it emits no instruction.
CUTLASS_DEVICE void compiler_memory_fence() { asm volatile("" ::: "memory"); }

// Programmatic dependent launch (PDL). A kernel launched with the programmatic-serialization
// attribute may start while the kernel before it on the stream still runs; it must call
// wait_for_prior_grids() before touching anything that kernel writes (a no-op without the
// attribute). allow_dependent_launch() lets the next such kernel start launching early.
CUTLASS_DEVICE void wait_for_prior_grids() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
CUTLASS_DEVICE void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// A load with acquire semantics at GPU scope: what other CTAs wrote before their release of
// *p (st.release / red.release) is visible after it.
CUTLASS_DEVICE int load_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Named barriers 1..15 (0 is __syncthreads). Ids are assigned in each kernel's design note.
CUTLASS_DEVICE void named_barrier_sync(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}
// The same without `.aligned` (bar.sync is barrier.sync.aligned, which requires every thread to
// reach the barrier through the same instruction): for a barrier that warps reach at different
// code locations, e.g. a busy and an idle warpgroup (compute-sanitizer synccheck reports the
// aligned form there).
CUTLASS_DEVICE void named_barrier_sync_unaligned(int id, int num_threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}
CUTLASS_DEVICE void named_barrier_arrive(int id, int num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// The warp index, read through a shuffle so the compiler knows it is warp-uniform.
CUTLASS_DEVICE int warp_idx_uniform() {
  return __shfl_sync(0xffffffff, static_cast<int>(threadIdx.x) / 32, 0);
}

// The lane index, read where it is used: a volatile read cannot be hoisted, so ptxas does not keep
// lane-derived values live across a mainloop for a later epilogue. At d256 the forward's 16-byte
// epilogue stores made ptxas hold one such value through the mainloop and spill a register in an
// mbarrier retry path; reading the lane here removed the spill (perf-log, session 10).
CUTLASS_DEVICE int lane_id_fresh() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return static_cast<int>(lane);
}

// stmatrix.x4 (four 8x8 matrices of 16-bit values, non-transposed): lane L gives the shared-memory
// address of row L % 8 of matrix L / 8, and a, b, c, d are its pieces of matrices 0..3. The caller
// orders the stores before their readers (a proxy fence or a barrier).
CUTLASS_DEVICE void stmatrix_x4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b),
               "r"(c), "r"(d));
}

// The thread's index within its warpgroup, read where it is used (as lane_id_fresh), so that
// epilogue addresses derived from it are not computed ahead of the mainloop and held through it.
CUTLASS_DEVICE int warpgroup_thread_fresh() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return static_cast<int>(t % 128);
}

// The same value, but one the compiler cannot compute ahead of this point: what is derived from it
// stays inside the (rare) branch that uses it instead of being hoisted out of a loop, where it
// would hold registers through every iteration (the forward's deferred score recompute).
template <class T>
CUTLASS_DEVICE T* opaque_here(T* ptr) {
  asm volatile("mov.b64 %0, %0;" : "+l"(ptr));
  return ptr;
}

// The same for integers (volatile, unlike opaque_int below: not hoisted either).
CUTLASS_DEVICE int opaque_here(int v) {
  asm volatile("mov.b32 %0, %0;" : "+r"(v));
  return v;
}
CUTLASS_DEVICE int64_t opaque_here(int64_t v) {
  asm volatile("mov.b64 %0, %0;" : "+l"(v));
  return v;
}

// The same integer, but one the compiler cannot rewrite as an expression of its operands: a
// comparison of a constant with it stays a comparison with an immediate (the forward's mask
// bounds; without it the compiler moved a per-thread term back to the constant's side, one add
// per column).
CUTLASS_DEVICE int opaque_int(int v) {
  asm("mov.b32 %0, %0;" : "+r"(v));
  return v;
}

// WGMMA accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) seen as a (rows, cols) matrix:
// rows = (2 row halves, MMA_M), cols = (2 adjacent cols, N/8 col groups, MMA_N).
template <class Layout>
CUTE_HOST_DEVICE auto acc_as_rowcol(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3);
  static_assert(decltype(rank<0>(acc))::value == 3);
  auto l = acc;
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// For 16-bit inputs, the fp32 accumulator of S = Q K^T (N columns) is laid out in registers
// exactly as the A operand of the next WGMMA with K = N: every two 8-column groups form one
// k16 slice. ((2, 2, N/8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, N/16 * MMA_N).
template <class Layout>
CUTE_HOST_DEVICE auto acc_as_a_operand_16bit(Layout acc) {
  auto m0 = get<0>(acc);  // (2, 2, N/8), compact
  constexpr int kGroups = decltype(size<2>(m0))::value;
  static_assert(kGroups % 2 == 0, "tile N must be a multiple of 16");
  auto k16 = make_layout(make_shape(_2{}, _2{}, _2{}),
                         make_stride(stride<0>(m0), stride<1>(m0), stride<2>(m0)));
  auto slices = make_layout(Int<kGroups / 2>{}, stride<2>(m0) * _2{});
  return make_layout(k16, get<1>(acc), coalesce(make_layout(slices, get<2>(acc))));
}

// Two floats as two 16-bit values (round to nearest) in one register, the first in the low half.
template <class Out>
CUTLASS_DEVICE uint32_t pack_pair(float lo, float hi) {
  cutlass::Array<float, 2> in;
  in[0] = lo;
  in[1] = hi;
  const cutlass::Array<Out, 2> pair = cutlass::NumericArrayConverter<Out, float, 2>{}(in);
  return reinterpret_cast<const uint32_t&>(pair);
}

// The reverse: two 16-bit values packed in a word, as floats (lo, hi).
template <class In>
CUTLASS_DEVICE cutlass::Array<float, 2> unpack_pair(uint32_t word) {
  return cutlass::NumericArrayConverter<float, In, 2>{}(reinterpret_cast<const cutlass::Array<In, 2>&>(word));
}

// The four threads of a quad share an accumulator row and hold 2 adjacent columns of each
// 8-column group. v[k] on quad thread s is element (s, k) of a 4x4 matrix of such column pairs
// (group k of four); returns column t, (0, t) .. (3, t): all 8 columns of group t, ready for one
// 16-byte store. All four lanes of the quad must take part.
CUTLASS_DEVICE uint4 quad_transpose(const uint32_t (&v)[4], int t) {
  const bool hi2 = t & 2, hi1 = t & 1;
  // Thread t keeps columns K0 = t & 2 and K0 + 1 of its row and takes them from row t ^ 2.
  const uint32_t m0 = hi2 ? v[2] : v[0], m1 = hi2 ? v[3] : v[1];
  const uint32_t r0 = __shfl_xor_sync(0xffffffffu, hi2 ? v[0] : v[2], 2);  // (t ^ 2, K0)
  const uint32_t r1 = __shfl_xor_sync(0xffffffffu, hi2 ? v[1] : v[3], 2);  // (t ^ 2, K0 + 1)
  // Then keeps column t of rows t and t ^ 2 and takes it from rows t ^ 1 and t ^ 3.
  const uint32_t own = hi1 ? m1 : m0, own2 = hi1 ? r1 : r0;
  const uint32_t q1 = __shfl_xor_sync(0xffffffffu, hi1 ? m0 : m1, 1);  // (t ^ 1, t)
  const uint32_t q3 = __shfl_xor_sync(0xffffffffu, hi1 ? r0 : r1, 1);  // (t ^ 3, t)
  // Row s holds the value from thread s ^ t: 0 own, 1 q1, 2 own2, 3 q3.
  const uint32_t even_lo = hi1 ? q1 : own, odd_lo = hi1 ? own : q1;
  const uint32_t even_hi = hi1 ? q3 : own2, odd_hi = hi1 ? own2 : q3;
  return make_uint4(hi2 ? even_hi : even_lo, hi2 ? odd_hi : odd_lo, hi2 ? even_lo : even_hi, hi2 ? odd_lo : odd_hi);
}

// For e4m3 inputs the A operand of a k32 WGMMA holds, per thread and 32-key slice, 16 bytes in
// four registers: (4 consecutive key positions, row half, position half 0-15 / 16-31), i.e.
// ((4, 2, 2), MMA_M, N/32), compact. It does not match the accumulator's order; see
// convert_scores_to_e4m3_a and the key permutation in kernels/fwd/v_transpose.hpp.
template <class Layout>
CUTE_HOST_DEVICE auto a_operand_layout_8bit(Layout acc) {
  constexpr int kGroups = decltype(size<2>(get<0>(acc)))::value;  // N/8
  static_assert(kGroups % 4 == 0, "tile N must be a multiple of 32");
  return make_layout(make_shape(make_shape(_4{}, _2{}, _2{}), size<1>(acc), Int<kGroups / 4 * decltype(size<2>(acc))::value>{}));
}

template <bool kEightBit, class Layout>
CUTE_HOST_DEVICE auto p_operand_layout(Layout acc) {
  if constexpr (kEightBit) return a_operand_layout_8bit(acc);
  else return acc_as_a_operand_16bit(acc);
}

// Two e4m3 codes (x in the low byte) -> two floats, exactly.
CUTLASS_DEVICE float2 e4m3x2_to_float2(uint16_t codes) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(codes));
  float2 f;
  asm("{\n .reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi;\n}"
      : "=f"(f.x), "=f"(f.y)
      : "r"(h2));
  return f;
}

// Two adjacent input elements (4-byte aligned for 16-bit types, 2-byte for e4m3) -> two floats,
// exactly: the rare score recompute of the forward's max-free blocks reads Q and K this way.
template <class Element>
CUTLASS_DEVICE float2 load_pair_as_float2(const Element* p) {
  if constexpr (sizeof(Element) == 1) {
    return e4m3x2_to_float2(*reinterpret_cast<const uint16_t*>(p));
  } else {
    const uint32_t bits = *reinterpret_cast<const uint32_t*>(p);
    const float lo = float(Element::bitcast(uint16_t(bits & 0xffffu)));
    const float hi = float(Element::bitcast(uint16_t(bits >> 16)));
    return make_float2(lo, hi);
  }
}

// Four floats -> four e4m3 bytes in one register (x0 in the low byte), round to nearest, saturate.
CUTLASS_DEVICE uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n"
      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

// P (fp32 accumulator order ((2 cols, 2 row halves, N/8 groups), 1, 1)) -> the e4m3 A operand.
// Register q of slice s takes the thread's two column pairs of one row half from two adjacent
// 8-column groups: row half q % 2, groups 4s + 2 (q / 2) and 4s + 2 (q / 2) + 1. So A position
// 4t + i (+16) of the slice holds key 2t + (i % 2) + 8 (i / 2) (+16): fp8_key_of_position.
template <class TensorS, class TensorP>
CUTLASS_DEVICE void convert_scores_to_e4m3_a(TensorS const& s, TensorP& p) {
  constexpr int kSlices = decltype(size(s))::value / 16;
  static_assert(decltype(size(p))::value == 16 * kSlices);
  const float* in = s.data();
  uint32_t* out = reinterpret_cast<uint32_t*>(p.data());
  CUTE_UNROLL
  for (int sl = 0; sl < kSlices; ++sl) {
    const float* f = in + 16 * sl;
    out[4 * sl + 0] = pack_e4m3x4(f[0], f[1], f[4], f[5]);
    out[4 * sl + 1] = pack_e4m3x4(f[2], f[3], f[6], f[7]);
    out[4 * sl + 2] = pack_e4m3x4(f[8], f[9], f[12], f[13]);
    out[4 * sl + 3] = pack_e4m3x4(f[10], f[11], f[14], f[15]);
  }
}

// Converts a register tensor of floats to another element type, element by element, in pairs
// where the element type has a packed conversion.
template <class To, class Engine, class Layout>
CUTLASS_DEVICE auto convert_fragment(Tensor<Engine, Layout> const& src) {
  using From = typename Engine::value_type;
  constexpr int N = decltype(size(src))::value;
  auto frag = make_tensor<To>(src.layout());
  cutlass::NumericArrayConverter<To, From, N> conv;
  auto in = reinterpret_cast<cutlass::Array<From, N> const*>(src.data());
  *reinterpret_cast<cutlass::Array<To, N>*>(frag.data()) = conv(*in);
  return frag;
}

// Converts src (floats) into dst (another element type) with the same number of elements, in
// register order; dst keeps its own layout. Used to write P straight into the A-operand
// registers of the P V WGMMA, whose order matches the accumulator's for 16-bit types.
template <class EngineS, class LayoutS, class EngineD, class LayoutD>
CUTLASS_DEVICE void convert_into(Tensor<EngineS, LayoutS> const& src, Tensor<EngineD, LayoutD>& dst) {
  using From = typename EngineS::value_type;
  using To = typename EngineD::value_type;
  constexpr int N = decltype(size(src))::value;
  static_assert(N == decltype(size(dst))::value);
  cutlass::NumericArrayConverter<To, From, N> conv;
  *reinterpret_cast<cutlass::Array<To, N>*>(dst.data()) =
      conv(*reinterpret_cast<cutlass::Array<From, N> const*>(src.data()));
}

}  // namespace hopattn::kernels
