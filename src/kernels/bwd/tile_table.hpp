// Backward tile shapes per head dim (the one place they are chosen). 64 query rows per step and
// 128 keys per tile (two consumer warpgroups of 64 keys each) fit d <= 128 in 240 registers per
// consumer thread: dK and dV accumulators take d/2 registers each. Larger head dims need the dK/dV
// GEMMs split along d across warpgroups (not built yet: plan_bwd reports "not supported").
#pragma once

#include "kernels/bwd/traits.hpp"

namespace hopattn::kernels::bwd {

template <class Element, int kHeadDim>
using DefaultBwdTraits = BwdTraits<Element, kHeadDim, /*kBlockM=*/64, /*kBlockN=*/128, /*kStages=*/2>;

}  // namespace hopattn::kernels::bwd
