// Number formats on the host. One generic description of a binary floating-point format drives
// rounding, encoding and decoding of fp16, bf16, e4m3 and fp32.
#include "hopattn_ref/numeric.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace hopattn::ref {
namespace {

struct Format {
  int exp_bits;       // width of the exponent field
  int man_bits;       // stored mantissa bits
  int bias;           // exponent bias; the smallest normal exponent is 1 - bias
  double max_finite;  // largest finite magnitude
  bool has_inf;       // IEEE-style inf/NaN in the all-ones exponent (false: e4m3fn)
  uint32_t nan_bits;  // canonical positive quiet NaN
  double min_normal;  // 2^(1 - bias)
};

constexpr Format kHalf{5, 10, 15, 65504.0, true, 0x7E00u, 0x1p-14};
constexpr Format kBf16{8, 7, 127, 0x1.FEp127, true, 0x7FC0u, 0x1p-126};
constexpr Format kE4m3{4, 3, 7, 448.0, false, 0x7Fu, 0x1p-6};

// Round-to-nearest, ties to even, of y (|y| < 2^52) to an integer, without relying on the
// floating-point environment's rounding mode.
double rne_integer(double y) {
  double f = std::floor(y);
  double frac = y - f;  // exact for |y| < 2^52
  if (frac > 0.5) return f + 1.0;
  if (frac < 0.5) return f;
  return (std::fmod(f, 2.0) == 0.0) ? f : f + 1.0;
}

// Rounds a finite x to fmt's grid; returns a value possibly beyond max_finite (the caller decides
// what overflow means).
double round_grid(double x, const Format& fmt) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e2 = 0;
  std::frexp(x, &e2);  // |x| = m * 2^e2 with m in [0.5, 1)
  int lead = e2 - 1;   // exponent of the leading bit
  int min_normal = 1 - fmt.bias;
  if (lead < min_normal) lead = min_normal;  // subnormal range: fixed quantum
  int qexp = lead - fmt.man_bits;
  double y = std::ldexp(x, -qexp);  // exact: scaling by a power of two well inside double range
  double r = std::ldexp(rne_integer(y), qexp);
  if (r == 0.0) r = std::copysign(0.0, x);
  return r;
}

// Fast path for results in fmt's normal range: RNE on the double's own bit pattern, keeping
// man_bits mantissa bits (a carry out of the mantissa correctly bumps the exponent).
inline double round_bits_normal(double x, int man_bits) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  const int drop = 52 - man_bits;
  const uint64_t low = (uint64_t(1) << drop) - 1;
  b += (low >> 1) + ((b >> drop) & 1);
  b &= ~low;
  std::memcpy(&x, &b, 8);
  return x;
}

double round_fmt(double x, const Format& fmt, bool saturate) {
  const double ax = std::fabs(x);
  if (ax >= fmt.min_normal && ax <= DBL_MAX) {
    const double r = round_bits_normal(x, fmt.man_bits);
    if (std::fabs(r) <= fmt.max_finite) return r;
    if (fmt.has_inf) return std::copysign(std::numeric_limits<double>::infinity(), x);
    return saturate ? std::copysign(fmt.max_finite, x) : std::numeric_limits<double>::quiet_NaN();
  }
  if (std::isnan(x)) return x;
  if (std::isinf(x)) {
    if (fmt.has_inf) return x;
    return saturate ? std::copysign(fmt.max_finite, x) : std::numeric_limits<double>::quiet_NaN();
  }
  double r = round_grid(x, fmt);
  if (std::fabs(r) > fmt.max_finite) {
    if (fmt.has_inf) return std::copysign(std::numeric_limits<double>::infinity(), x);
    return saturate ? std::copysign(fmt.max_finite, x) : std::numeric_limits<double>::quiet_NaN();
  }
  return r;
}

// Bits of a value that is exactly representable in fmt (or NaN / inf where fmt has them).
uint32_t encode_exact(double v, const Format& fmt) {
  const int total = fmt.exp_bits + fmt.man_bits;
  const uint32_t sign = std::signbit(v) ? (1u << total) : 0u;
  const uint32_t exp_all = (1u << fmt.exp_bits) - 1u;
  if (std::isnan(v)) return sign | fmt.nan_bits;
  if (std::isinf(v)) return sign | (exp_all << fmt.man_bits);  // only reached when has_inf
  double a = std::fabs(v);
  if (a == 0.0) return sign;
  int e2 = 0;
  std::frexp(a, &e2);
  int lead = e2 - 1;
  int min_normal = 1 - fmt.bias;
  if (lead < min_normal) {
    uint32_t man = uint32_t(std::ldexp(a, fmt.man_bits - min_normal));
    return sign | man;
  }
  uint32_t expf = uint32_t(lead + fmt.bias);
  uint32_t man = uint32_t(std::ldexp(a, fmt.man_bits - lead) - std::ldexp(1.0, fmt.man_bits));
  return sign | (expf << fmt.man_bits) | man;
}

double decode_bits(uint32_t bits, const Format& fmt) {
  const int total = fmt.exp_bits + fmt.man_bits;
  const uint32_t exp_all = (1u << fmt.exp_bits) - 1u;
  const uint32_t man_mask = (1u << fmt.man_bits) - 1u;
  const bool neg = (bits >> total) & 1u;
  const uint32_t expf = (bits >> fmt.man_bits) & exp_all;
  const uint32_t man = bits & man_mask;
  double mag;
  if (fmt.has_inf && expf == exp_all) {
    mag = man == 0 ? std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::quiet_NaN();
  } else if (!fmt.has_inf && expf == exp_all && man == man_mask) {
    mag = std::numeric_limits<double>::quiet_NaN();
  } else if (expf == 0) {
    mag = std::ldexp(double(man), 1 - fmt.bias - fmt.man_bits);
  } else {
    mag = std::ldexp(double(man | (1u << fmt.man_bits)), int(expf) - fmt.bias - fmt.man_bits);
  }
  return neg ? -mag : mag;
}

double round_int32(double x) {
  if (std::isnan(x)) throw std::invalid_argument("round_to(kInt32): NaN");
  if (x >= 2147483647.0) return 2147483647.0;
  if (x <= -2147483648.0) return -2147483648.0;
  return rne_integer(x);
}

}  // namespace

double round_to_e4m3(double x, bool saturate) { return round_fmt(x, kE4m3, saturate); }

double round_to(hopattn::DType dt, double x) {
  switch (dt) {
    case hopattn::DType::kFloat16:
      return round_fmt(x, kHalf, false);
    case hopattn::DType::kBFloat16:
      return round_fmt(x, kBf16, false);
    case hopattn::DType::kFloat8E4M3:
      return round_fmt(x, kE4m3, true);
    case hopattn::DType::kFloat32:
      return double(float(x));
    case hopattn::DType::kInt32:
      return round_int32(x);
  }
  throw std::invalid_argument("round_to: unknown dtype " + std::to_string(int(dt)));
}

void round_in_place(hopattn::DType dt, std::vector<double>& v) {
  for (double& x : v) x = round_to(dt, x);
}

std::vector<double> rounded(hopattn::DType dt, const std::vector<double>& v) {
  std::vector<double> r(v);
  round_in_place(dt, r);
  return r;
}

uint16_t half_bits_of(double x) {
  return uint16_t(encode_exact(round_fmt(x, kHalf, false), kHalf));
}
uint16_t bf16_bits_of(double x) {
  return uint16_t(encode_exact(round_fmt(x, kBf16, false), kBf16));
}
uint8_t e4m3_bits_of(double x, bool saturate) {
  return uint8_t(encode_exact(round_fmt(x, kE4m3, saturate), kE4m3));
}

uint16_t to_half_bits(float x) { return half_bits_of(double(x)); }
uint16_t to_bf16_bits(float x) { return bf16_bits_of(double(x)); }
uint8_t to_e4m3_bits(float x, bool saturate) { return e4m3_bits_of(double(x), saturate); }
float from_half_bits(uint16_t bits) { return float(decode_bits(bits, kHalf)); }
float from_bf16_bits(uint16_t bits) { return float(decode_bits(bits, kBf16)); }
float from_e4m3_bits(uint8_t bits) { return float(decode_bits(bits, kE4m3)); }

std::vector<uint8_t> encode(hopattn::DType dt, const std::vector<double>& v) {
  const size_t es = size_t(hopattn::dtype_size(dt));
  if (es == 0) throw std::invalid_argument("encode: unknown dtype");
  std::vector<uint8_t> bytes(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* dst = bytes.data() + i * es;
    switch (dt) {
      case hopattn::DType::kFloat16: {
        uint16_t b = half_bits_of(v[i]);
        std::memcpy(dst, &b, 2);
        break;
      }
      case hopattn::DType::kBFloat16: {
        uint16_t b = bf16_bits_of(v[i]);
        std::memcpy(dst, &b, 2);
        break;
      }
      case hopattn::DType::kFloat8E4M3:
        *dst = e4m3_bits_of(v[i], true);
        break;
      case hopattn::DType::kFloat32: {
        float f = float(v[i]);
        std::memcpy(dst, &f, 4);
        break;
      }
      case hopattn::DType::kInt32: {
        int32_t n = int32_t(round_int32(v[i]));
        std::memcpy(dst, &n, 4);
        break;
      }
    }
  }
  return bytes;
}

std::vector<double> decode(hopattn::DType dt, const void* data, size_t count) {
  std::vector<double> out(count);
  const uint8_t* src = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < count; ++i) {
    switch (dt) {
      case hopattn::DType::kFloat16: {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = decode_bits(b, kHalf);
        break;
      }
      case hopattn::DType::kBFloat16: {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = decode_bits(b, kBf16);
        break;
      }
      case hopattn::DType::kFloat8E4M3:
        out[i] = decode_bits(src[i], kE4m3);
        break;
      case hopattn::DType::kFloat32: {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        out[i] = f;
        break;
      }
      case hopattn::DType::kInt32: {
        int32_t n;
        std::memcpy(&n, src + 4 * i, 4);
        out[i] = n;
        break;
      }
      default:
        throw std::invalid_argument("decode: unknown dtype");
    }
  }
  return out;
}

namespace {
// A uniform double in (0, 1) from the top 53 bits of one 64-bit draw.
inline double open_unit(std::mt19937_64& gen) { return (double(gen() >> 11) + 0.5) * 0x1p-53; }
}  // namespace

void fill_random(std::vector<double>& v, uint64_t seed, double mean, double std) {
  std::mt19937_64 gen(seed);
  const double two_pi = 6.283185307179586476925286766559;
  size_t i = 0;
  while (i < v.size()) {
    double u1 = open_unit(gen), u2 = open_unit(gen);
    double r = std::sqrt(-2.0 * std::log(u1));
    double t = two_pi * u2;
    v[i++] = mean + std * r * std::cos(t);
    if (i < v.size()) v[i++] = mean + std * r * std::sin(t);
  }
}

void fill_uniform(std::vector<double>& v, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  for (double& x : v) x = lo + (hi - lo) * (double(gen() >> 11) * 0x1p-53);
}

}  // namespace hopattn::ref
