// Float64 CPU reference of attention forward and backward, plus a low-precision "naive PyTorch"
// emulation that defines the error baseline of the accuracy rule (accuracy.hpp).
//
// Packed layouts (row-major, contiguous), the one representation for dense and varlen problems:
//   q   (total_q, nheads,   head_dim)        k (total_k, nheads_k, head_dim)
//   v   (total_k, nheads_k, head_dim_v)      out (total_q, nheads, head_dim_v)
//   lse (nheads, total_q)
// For a dense problem (every sequence the same length) q/k/v/out are byte-for-byte the BSHD
// tensors of the API; only the LSE differs: the API's dense LSE is (batch, nheads, seqlen_q), see
// lse_packed_to_dense / lse_dense_to_packed.
//
// Semantics: query row i of sequence b (sq = seqlen_q(b), sk = seqlen_k(b), the latter after
// seqused_k) sees key j iff 0 <= j < sk and
//     i + sk - sq - window_left <= j <= i + sk - sq + window_right
// where a window of -1 is unbounded on that side and causal means window_right = 0 (window_left
// kept). Query head h reads kv head h / (nheads / nheads_k). Scores s = scale * q.k, then
// s = softcap * tanh(s / softcap) when softcap > 0. lse = log(sum_j exp(s_j)) (natural log).
// A row that sees no key has out = 0 and lse = -inf, and contributes no gradient. Masked
// positions never touch the data: a NaN / inf in a key or value only reaches the rows that see
// that key (and keys past seqused_k are never read).
// Everything throws std::invalid_argument on inconsistent shapes. All functions are pure and
// deterministic (no global state), so they may be called from several threads at once.
#pragma once

#include <cstddef>
#include <vector>

#include "hopattn/params.hpp"
#include "hopattn/types.hpp"

namespace hopattn::ref {

struct Problem {
  int batch = 1, nheads = 1, nheads_k = 1, head_dim = 64, head_dim_v = 64;
  std::vector<int> cu_seqlens_q, cu_seqlens_k;  // batch + 1 each; dense = uniform steps
  std::vector<int> seqused_k;                   // optional (empty = full lengths); per batch
  double softmax_scale = 0;                     // 0 => 1/sqrt(head_dim)
  hopattn::MaskArgs mask;                       // causal / window_left / window_right
  double softcap = 0;                           // 0 = off

  int total_q() const;
  int total_k() const;
  int seqlen_q(int b) const;
  int seqlen_k(int b) const;  // honours seqused_k
  int max_seqlen_q() const;
  int max_seqlen_k() const;  // of the cu_seqlens_k extents (ignores seqused_k)
  double scale() const;      // softmax_scale, or 1/sqrt(head_dim) when 0
  // True when every sequence has the same seqlen_q (and the same cu_seqlens_k step), i.e. the
  // packed tensors are the dense BSHD ones.
  bool is_dense() const;
  // Throws std::invalid_argument describing the first inconsistency.
  void validate() const;

  size_t q_size() const { return size_t(total_q()) * nheads * head_dim; }
  size_t k_size() const { return size_t(total_k()) * nheads_k * head_dim; }
  size_t v_size() const { return size_t(total_k()) * nheads_k * head_dim_v; }
  size_t out_size() const { return size_t(total_q()) * nheads * head_dim_v; }
  size_t lse_size() const { return size_t(nheads) * total_q(); }
};

Problem dense_problem(int batch, int seqlen_q, int seqlen_k, int nheads, int nheads_k, int head_dim,
                      int head_dim_v = -1);
Problem varlen_problem(const std::vector<int>& seqlens_q, const std::vector<int>& seqlens_k,
                       int nheads, int nheads_k, int head_dim, int head_dim_v = -1);

// The keys row i of sequence b may see: [lo, hi] (indices within the sequence); empty when
// hi < lo. Exposed so tests can reason about the mask the same way the reference does.
struct KeyRange {
  int lo = 0, hi = -1;
  bool empty() const { return hi < lo; }
  int size() const { return empty() ? 0 : hi - lo + 1; }
};
KeyRange visible_keys(const Problem& p, int b, int i);

// The largest scale * sum_d |q_d k_d| over every query row and the keys it sees: the magnitude
// a kernel's running sums of Q K^T pass through, which sizes their rounding error (accuracy.hpp,
// lse_abs_tol). 0 when no row sees a key.
double max_score_l1(const Problem& p, const std::vector<double>& q, const std::vector<double>& k);

struct FwdResult {
  std::vector<double> out, lse;
};
FwdResult forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v);

// The results of one set of queries against disjoint key ranges (splits), merged into the result
// against all of those keys: lse = log sum_i exp(lse_i), out = sum_i exp(lse_i - lse) * out_i,
// in the packed layouts above (every split with the same total_q and nheads; head_dim_v from
// out's size). A split whose lse is -inf for a row adds nothing to it (its out is not read); a
// row no split saw gets out = 0 and lse = -inf.
FwdResult combine(const std::vector<FwdResult>& splits, int nheads);

struct BwdResult {
  std::vector<double> dq, dk, dv;
};
// D = rowsum(dO * O) is evaluated as sum_j P_ij dP_ij (the same number, without forming O).
BwdResult backward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const std::vector<double>& dout);

// The same attention computed naively in low precision, the way an unfused PyTorch expression
// would in `dt`: the inputs are rounded to dt; X = Q K^T (fp32 accumulation, modelled as the exact
// sum rounded to fp32) rounded to dt; S = X * scale rounded to dt; with softcap each of S / c,
// tanh(.), c * (.) rounded to dt; masked; softmax computed in fp32 and P rounded to dt;
// O = P V (fp32 accumulation) rounded to dt. lse is the fp32 softmax's max + log(sum).
// Rows that see no key give out 0 / lse -inf, as in forward() (torch would give NaN).
// dt = kFloat8E4M3 models an fp8 kernel's naive counterpart: inputs and P rounded to e4m3,
// S and O to bf16 (fp8 attention writes bf16). kFloat32 rounds everything to fp32.
FwdResult forward_lowp(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, hopattn::DType dt);
// Autograd of the expression above, each intermediate rounded to dt: dV = P^T dO, dP = dO V^T,
// dS = P * (dP - rowsum(P * dP)) (fp32 softmax backward), back through softcap and the scale,
// dQ = dX K, dK = dX^T Q. With GQA each query head's dK/dV is rounded to dt and the group sum
// rounded again (the backward of repeat_interleave). kFloat8E4M3 is not supported (throws).
// LowpDelta::kFromOutput takes the row term D = rowsum(dO * O) from a stored O instead (fp32
// sum; O normalised as a FlashAttention forward does, after P V), as a FlashAttention-style
// backward must (it keeps O, not P); everything else, the stored dP included, stays PyTorch's.
// Where dP - D cancels (rows with one or two keys) PyTorch's form rounds to exactly the same
// terms and gets (nearly) 0 error, which a kernel taking D from O in a different order cannot
// match; the mixed form's error there is dP's storage rounding instead, so a rule accepting
// either form is loose in exactly those rows (session 32's random sweep; backward_flash below
// emulates the whole algorithm and is tight there too).
enum class LowpDelta { kFromProbs, kFromOutput };
BwdResult backward_lowp(const Problem& p, const std::vector<double>& q,
                        const std::vector<double>& k, const std::vector<double>& v,
                        const std::vector<double>& dout, hopattn::DType dt,
                        LowpDelta delta = LowpDelta::kFromProbs);

// The backward as a FlashAttention-style kernel computes it (Algorithm 3 with this library's
// roundings), from the O and LSE its forward stored (`out` packed, `lse` packed (nheads,
// total_q), natural log): D = rowsum(dO * O) in fp32; per visible (row, key) the score
// S = Q K^T (exact sum rounded to fp32), P = exp2(S * scale * log2(e) - LSE * log2(e)) in fp32
// (with softcap t = tanh(S * scale / c), P = exp2(t * c * log2(e) - ...)), P rounded to dt for
// dV = P^T dO; dP = dO V^T in fp32; dS = P_dt * (dP - D) in fp32 (softcap: times 1 - t^2 with
// t recovered from P_dt), rounded to dt for dK = dS^T Q and dQ = dS K; the fp32 sums (modelled as
// exact) times scale (dQ, dK) rounded to dt once, dK and dV summed over a GQA group first. A
// kernel that computes this way differs from it by its fp32 sums (order, the tensor cores'
// truncation), its approximate exp2 / tanh / log2 / division, fused multiply-adds and flushed
// denormals, all far below the 16-bit rounding of P and dS, so its error against the float64
// backward is this function's, up to those: the baseline that also holds where dP - D cancels or
// a gradient sits at a rounding midpoint of dt (the cases the naive forms above misjudge;
// tests/gpu/test_bwd.cpp, which checks the O and LSE it passes here against the forward's rule).
// dt: kFloat16 or kBFloat16 (throws otherwise).
BwdResult backward_flash(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, const std::vector<double>& dout,
                         const std::vector<double>& out, const std::vector<double>& lse, hopattn::DType dt);

// Dense problems only (is_dense()): packed (nheads, total_q) <-> API (batch, nheads, seqlen_q).
std::vector<double> lse_packed_to_dense(const Problem& p, const std::vector<double>& lse_packed);
std::vector<double> lse_dense_to_packed(const Problem& p, const std::vector<double>& lse_dense);

}  // namespace hopattn::ref
