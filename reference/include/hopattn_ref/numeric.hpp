// Host-side number formats for tests and benchmarks: exact rounding of doubles to the storage
// dtypes, bit-level encode/decode (to build and read device buffers), and a deterministic
// random generator. Everything here is pure, thread-safe and independent of CUDA.
//
// Rounding is always round-to-nearest-even, applied once to the exact input (a double is rounded
// straight to the target format, never through float first).
//   fp16 (IEEE binary16): subnormals kept; values that round past 65504 become +-inf.
//   bf16: subnormals kept; overflow becomes +-inf; NaN stays NaN (quiet, 0x7FC0).
//   e4m3 (OCP "E4M3FN": bias 7, max 448, no inf, NaN = S.1111.111): by default out-of-range
//     values SATURATE to +-448 and +-inf becomes +-448 (what CUDA's __NV_SATFINITE conversion
//     does, and what kernels and test inputs use). With saturate = false, anything that rounds
//     beyond 448 (and +-inf) becomes NaN, which is what torch's float -> float8_e4m3fn cast does.
//   fp32: ordinary double -> float rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hopattn/types.hpp"

namespace hopattn::ref {

// Rounds x to the nearest value of dt (see above). kInt32 rounds to the nearest integer (ties to
// even) and clamps to the int32 range.
double round_to(hopattn::DType dt, double x);
// e4m3 with a choice of overflow behaviour (round_to uses saturate = true).
double round_to_e4m3(double x, bool saturate = true);

// Rounds every element of v to dt, in place.
void round_in_place(hopattn::DType dt, std::vector<double>& v);
// Returns a rounded copy.
std::vector<double> rounded(hopattn::DType dt, const std::vector<double>& v);

// Bit patterns. to_* round (RNE) from the float argument; from_* are exact.
uint16_t to_half_bits(float x);
float from_half_bits(uint16_t bits);
uint16_t to_bf16_bits(float x);
float from_bf16_bits(uint16_t bits);
uint8_t to_e4m3_bits(float x, bool saturate = true);
float from_e4m3_bits(uint8_t bits);

// Same, from a double (single rounding of the exact value).
uint16_t half_bits_of(double x);
uint16_t bf16_bits_of(double x);
uint8_t e4m3_bits_of(double x, bool saturate = true);

// Packs v into the byte image of a dt buffer (dtype_size(dt) bytes per element, host byte
// order, rounded as round_to does): ready for cudaMemcpy.
std::vector<uint8_t> encode(hopattn::DType dt, const std::vector<double>& v);
// Reads `count` elements of a dt buffer into doubles (exact).
std::vector<double> decode(hopattn::DType dt, const void* data, size_t count);

// Fills v with normal(mean, std) samples. Deterministic for a seed on every platform: a
// std::mt19937_64 stream turned into normals by Box-Muller written here (std::normal_distribution
// differs between standard libraries).
void fill_random(std::vector<double>& v, uint64_t seed, double mean = 0.0, double std = 1.0);
// Fills v with uniform samples in [lo, hi), same determinism.
void fill_uniform(std::vector<double>& v, uint64_t seed, double lo, double hi);

}  // namespace hopattn::ref
