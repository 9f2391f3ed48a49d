// The shared accuracy rule (see accuracy.hpp).
#include "hopattn_ref/accuracy.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>

namespace hopattn::ref {
namespace {

// True when a and b are the same kind of non-finite value (both NaN, or inf of the same sign).
bool same_nonfinite(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::isinf(a) && std::isinf(b) && std::signbit(a) == std::signbit(b);
}

// Spacing of float32 numbers just above |x| (x finite).
double ulp_f32(double x) {
  float a = float(std::fabs(x));
  if (a >= FLT_MAX) return double(FLT_MAX) - double(std::nextafter(FLT_MAX, 0.f));
  return double(std::nextafter(a, std::numeric_limits<float>::infinity())) - double(a);
}

}  // namespace

Comparison compare(const std::vector<double>& kernel, const std::vector<double>& ref,
                   const std::vector<double>& lowp, double atol) {
  Comparison c;
  c.what = "compare";
  if (kernel.size() != ref.size() || (!lowp.empty() && lowp.size() != ref.size())) {
    c.size_mismatch = true;
    c.nan_inf_positions_match = false;
    return c;
  }
  int64_t worst = -1, first_bad = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], kv = kernel[i];
    if (!std::isfinite(r) || !std::isfinite(kv)) {
      if (!same_nonfinite(r, kv)) {
        if (first_bad < 0) first_bad = int64_t(i);
        ++c.num_mismatched_nonfinite;
      }
      continue;
    }
    const double err = std::fabs(kv - r);
    if (worst < 0 || err > c.max_err_kernel) {
      c.max_err_kernel = err;
      worst = int64_t(i);
    }
    if (!lowp.empty() && std::isfinite(lowp[i]))
      c.max_err_lowp = std::max(c.max_err_lowp, std::fabs(lowp[i] - r));
  }
  c.nan_inf_positions_match = c.num_mismatched_nonfinite == 0;
  c.bound = 2.0 * c.max_err_lowp + atol;
  c.ok = c.nan_inf_positions_match && c.max_err_kernel <= c.bound;
  c.worst_index = first_bad >= 0 ? first_bad : worst;
  if (c.worst_index >= 0) {
    c.worst_kernel = kernel[size_t(c.worst_index)];
    c.worst_ref = ref[size_t(c.worst_index)];
  }
  return c;
}

double lse_abs_tol(double softcap, int head_dim, double score_l1) {
  const double capped = softcap > 0 ? std::ldexp(softcap, -10) : 0.0;
  const double accumulated = head_dim > 0 ? (head_dim / 16 + 1) * std::ldexp(score_l1, -22) : 0.0;
  return 1e-4 + capped + accumulated;
}

Comparison compare_lse(const std::vector<double>& kernel, const std::vector<double>& ref,
                       double abs_tol, double ulps) {
  Comparison c;
  c.what = "compare_lse";
  if (kernel.size() != ref.size()) {
    c.size_mismatch = true;
    c.nan_inf_positions_match = false;
    return c;
  }
  int64_t worst = -1, first_bad = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], kv = kernel[i];
    if (!std::isfinite(r) || !std::isfinite(kv)) {
      if (!same_nonfinite(r, kv)) {
        if (first_bad < 0) first_bad = int64_t(i);
        ++c.num_mismatched_nonfinite;
      }
      continue;
    }
    const double err = std::fabs(kv - r);
    const double tol = ulps * ulp_f32(r) + abs_tol;
    const double ratio = err / tol;
    if (worst < 0 || ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = int64_t(i);
      c.max_err_kernel = err;
      c.bound = tol;
    }
  }
  c.nan_inf_positions_match = c.num_mismatched_nonfinite == 0;
  c.ok = c.nan_inf_positions_match && worst_ratio <= 1.0;
  c.worst_index = first_bad >= 0 ? first_bad : worst;
  if (c.worst_index >= 0) {
    c.worst_kernel = kernel[size_t(c.worst_index)];
    c.worst_ref = ref[size_t(c.worst_index)];
  }
  return c;
}

std::string Comparison::describe() const {
  const char* name = what.empty() ? "compare" : what.c_str();
  char buf[512];
  if (size_mismatch) {
    std::snprintf(buf, sizeof buf, "%s: FAIL (tensor sizes differ)", name);
    return buf;
  }
  const char* where =
      nan_inf_positions_match ? "worst at index" : "first NaN/inf mismatch at index";
  if (what == "compare_lse") {
    std::snprintf(buf, sizeof buf,
                  "%s: %s: worst |kernel-ref| = %.3g vs tolerance %.3g; %s %lld (kernel %.9g, "
                  "ref %.9g)",
                  name, ok ? "ok" : "FAIL", max_err_kernel, bound, where, (long long)worst_index,
                  worst_kernel, worst_ref);
  } else {
    std::snprintf(buf, sizeof buf,
                  "%s: %s: max|kernel-ref| = %.3g, bound = %.3g (2 * max|lowp-ref| %.3g + atol); "
                  "%s %lld (kernel %.9g, ref %.9g)",
                  name, ok ? "ok" : "FAIL", max_err_kernel, bound, max_err_lowp, where,
                  (long long)worst_index, worst_kernel, worst_ref);
  }
  std::string s = buf;
  if (!nan_inf_positions_match) {
    std::snprintf(buf, sizeof buf, "; NaN/inf positions differ at %lld position(s)",
                  (long long)num_mismatched_nonfinite);
    s += buf;
  }
  return s;
}

}  // namespace hopattn::ref
