// The FP8 descales of the forward kernel.
//
// Meaning: true Q row r = code * q_descale[b, kv head] * q_block_descale[b, head, r / q_block_rows]
// and likewise K and V with their per-(batch, kv head) blocks of kv_block_rows keys, a multiple of
// the kernel's key tile, so one factor covers a whole tile (API: validate_fwd.cpp, plan.cpp).
//
// Who reads what: the producer's leader reads the tensor-wide Q and V factors of a tile from
// global memory as it starts the tile (after claiming it, with K's) and writes them next to the
// tile's Q buffer (SharedStorage::q_tensor_descale / v_tensor_descale), published by the Q full
// barrier; the consumers take them right after their Q wait, so no global load's latency sits on
// a tile's start (perf-log, session 52). The consumers read only the Q block factors themselves
// (two rows per thread), whose products are also formed after the Q wait. The K and V factors of
// key tile n are read from global memory by the producer's leader, before it waits for the K
// stage, and written next to that stage (SharedStorage::k_descale / v_descale); the K full
// barrier publishes them with the tile. The consumers copy them to registers right after
// the K wait and use them only after the GEMMs are issued, so no global-load latency sits on the
// GEMM issue path (it did when the consumers loaded them: 685 -> 561 TFLOP/s, perf-log).
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"
#include "kernels/fwd/params.hpp"
#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

// The factors of one (batch, kv head) the producer reads: K and V per key tile, and the
// tensor-wide Q and V factors it hands to the consumers with Q.
struct Fp8ProducerScales {
  float q_tensor = 1.f, v_tensor = 1.f;
  float k_tensor = 1.f;
  const float* k_blocks = nullptr;  // block descales of this (batch, kv head), or null
  const float* v_blocks = nullptr;
  int key_tiles_per_block = 1;

  template <class Params>
  __device__ __forceinline__ static Fp8ProducerScales load(const Params& p, const TileCoord& c) {
    Fp8ProducerScales s;
    const int64_t bh_k = int64_t(c.batch) * (p.nheads / p.head_group) + c.head / p.head_group;
    s.q_tensor = p.q_descale != nullptr ? p.q_descale[bh_k] : 1.f;
    s.v_tensor = p.v_descale != nullptr ? p.v_descale[bh_k] : 1.f;
    s.k_tensor = p.k_descale != nullptr ? p.k_descale[bh_k] : 1.f;
    if (p.k_block_descale != nullptr) s.k_blocks = p.k_block_descale + bh_k * p.kv_num_blocks;
    if (p.v_block_descale != nullptr) s.v_blocks = p.v_block_descale + bh_k * p.kv_num_blocks;
    s.key_tiles_per_block = p.kv_key_tiles_per_block;
    return s;
  }
  // K descale of key tile n (tensor-wide factor included).
  __device__ __forceinline__ float k(int n) const {
    return k_blocks != nullptr ? k_tensor * k_blocks[n / key_tiles_per_block] : k_tensor;
  }
  // V block descale of key tile n (the tensor-wide factor is applied once, in the epilogue).
  __device__ __forceinline__ float v(int n) const {
    return v_blocks != nullptr ? v_blocks[n / key_tiles_per_block] : 1.f;
  }
};

// What one consumer thread holds for one tile. With kEnabled = false (16-bit inputs) every
// factor is the constant 1 and the compiler removes the arithmetic.
template <int kRows, bool kEnabled>
struct Fp8TileScales {
  float q[kRows];        // per row: tensor * block descale of Q (the block factor alone until take_tensor_factors)
  float v_tensor = 1.f;  // applied in the epilogue

  // The V units O moves to when key tile n's P V is added: its V block descale, except that an
  // all-zero block (descale 0) keeps the previous units (its P V adds exactly nothing).
  __device__ __forceinline__ static float v_units(float v_block, float previous) {
    if constexpr (!kEnabled) return 1.f;
    else return v_block > 0.f ? v_block : previous;
  }

  template <class Params, class TensorC>
  __device__ __forceinline__ static Fp8TileScales load(const Params& p, const TileCoord& c, const TensorC& tScS,
                                                       int seqlen_q, int block_m) {
    using namespace cute;
    Fp8TileScales s;
    const float* q_blocks = p.q_block_descale != nullptr
                                ? p.q_block_descale + (int64_t(c.batch) * p.nheads + c.head) * p.q_num_blocks
                                : nullptr;
    Tensor c_rc = make_tensor(tScS.data(), acc_as_rowcol(tScS.layout()));
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const int row = c.m_block * block_m + get<0>(c_rc(i, 0));
      s.q[i] = q_blocks != nullptr && row < seqlen_q ? q_blocks[row / p.q_block_rows] : 1.f;
    }
    return s;
  }

  // The tensor-wide factors the producer published with the tile's Q (read after the Q wait).
  __device__ __forceinline__ void take_tensor_factors(float q_tensor, float v) {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) q[i] *= q_tensor;
    v_tensor = v;
  }
};

}  // namespace hopattn::kernels::fwd
