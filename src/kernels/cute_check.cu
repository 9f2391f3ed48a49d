// Proves the CUTLASS/CuTe dependency at build time on any machine: a layout computed by CuTe
// must match the hand-derived value, or this translation unit fails to compile.
#include <cute/layout.hpp>
#include <cute/swizzle.hpp>
#include <cute/swizzle_layout.hpp>

namespace hopattn::kernels {
namespace {
using namespace cute;
using Swizzled = decltype(composition(Swizzle<3, 4, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
static_assert(cosize_v<Swizzled> == 512, "CuTe layout algebra is not what we expect");
static_assert(size(Layout<Shape<_128, _64>>{}) == 8192);
}  // namespace
}  // namespace hopattn::kernels
