// How many SMs the backward leaves to the concurrent dQ conversion (postprocess.hpp; launch.hpp
// asks). Host code without CUDA types, so that the CPU tests check the rule.
#pragma once

#include <algorithm>

namespace hopattn::kernels::bwd {

// How many SMs convert dQ while the main kernel runs (postprocess.hpp, the concurrent form); 0:
// the postprocess runs after it. The main kernel then leaves that many SMs to the conversion,
// which reads each (batch entry, KV head) pair's dq_accum from L2 once the pair's tiles are done,
// instead of reading it all back from memory after the kernel (at 16k tokens x 2048 that read
// and the dQ stores take about 60 us on an H100, 10-13% of a 512-key backward).
// The conversion's share of the work goes as 1 / (keys a query row sees): the rule gives 8 SMs
// (of 132) to 512 visible keys, 4 to 1k, 2 to 2k, and none from 4k (1 SM would take about the
// share the postprocess takes). Under a mask a row is taken to see half the keys, as under a
// causal one (a narrow window sees fewer, and gets fewer SMs than it would use). Measured
// against the postprocess after the kernel (H100, 16k tokens x 2048, perf-log session 38): 512
// keys +2..7% (16 SMs no better), 1k +1..7%, 2k +1..5%, causal 4k +2..3% (2 SMs); GQA causal 1k
// +6%.
inline int concurrent_dq_convert_sms_rule(int seqlen_k, bool masked, int num_sms) {
  const int visible_keys = std::max(masked ? seqlen_k / 2 : seqlen_k, 1);
  const int sms = std::min(8 * 512 / visible_keys, 8) * num_sms / 132;
  return sms >= 2 ? sms : 0;
}

}  // namespace hopattn::kernels::bwd
