// Where the backward computes dQ from a stored dS (stored_ds.hpp) rather than adding FP32 dQ
// partials into the workspace, for a head dim whose launch has the stored-dS kernels
// (launch.hpp, has_stored_ds_kernel). Host-only, so that the CPU tests check it.
#pragma once

#include "kernels/bwd_args.hpp"

namespace hopattn::kernels::bwd {

// The stored dS takes batch x heads x keys x queries elements of the workspace (both padded to
// 64): never past this many keys, whatever BwdTuning::dq_from_stored_ds says.
constexpr int kStoredDsMaxKeys = 4096;

// Fixed lengths only: the dQ kernel takes the lengths and the mask from its parameters.
inline bool stored_ds_applies(const BwdArgs& a) {
  const bool fixed_lengths =
      a.cu_seqlens_q == nullptr && a.cu_seqlens_k == nullptr && a.seqused_q == nullptr && a.seqused_k == nullptr;
  return a.dq_from_stored_ds >= 0 && fixed_lengths && a.seqlen_q > 0 && a.seqlen_k > 0 && a.batch > 0 &&
         a.nheads > 0 && a.seqlen_k <= kStoredDsMaxKeys;
}

// The rule: up to 2048 keys. Measured on an H100, bf16, against the dQ adds (perf-log, session
// 48): d256 causal 512 / 1k / 2k / 4k +23 / 16 / 7.5 / 2.9%, unmasked 512 / 1k / 2k +17 / 3 / 4%;
// d192 causal 512 / 1k / 2k +19 / 15 / 5.7%, unmasked +16 / 11 / 1.0%. The stored dS takes
// 2 * seqlen_k bytes per query row where dq_accum takes 4 * d (seqlen_k / 512 times as much at
// d256, / 384 at d192), so the rule stops at 2048 keys, where that is 4-5x, and the gain a few
// percent; BwdTuning::dq_from_stored_ds = 1 takes it wherever it applies (up to
// kStoredDsMaxKeys), -1 never.
inline bool stored_ds_rule(const BwdArgs& a) {
  return stored_ds_applies(a) && (a.dq_from_stored_ds > 0 || a.seqlen_k <= 2048);
}

}  // namespace hopattn::kernels::bwd
