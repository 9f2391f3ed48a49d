// Backward tile shapes per head dim (the one place they are chosen).
// * d <= 128: 64 query rows per step, 128 keys per tile, two consumer warpgroups of 64 keys
//   each, dK and dV of its keys in each warpgroup's registers (traits.hpp, consumer.hpp).
// * d = 192, 256: 64 x d FP32 dK and dV no longer fit per warpgroup; 64 keys per tile shared by
//   both warpgroups, which split the head dim instead (traits_wide.hpp, consumer_wide.hpp).
#pragma once

#include <type_traits>

#include "kernels/bwd/traits.hpp"
#include "kernels/bwd/traits_wide.hpp"

namespace hopattn::kernels::bwd {

template <class Element, int kHeadDim>
using DefaultBwdTraits =
    std::conditional_t<(kHeadDim > 128), BwdWideTraits<Element, kHeadDim>,
                       BwdTraits<Element, kHeadDim, /*kBlockM=*/64, /*kBlockN=*/128, /*kStages=*/2>>;

}  // namespace hopattn::kernels::bwd
