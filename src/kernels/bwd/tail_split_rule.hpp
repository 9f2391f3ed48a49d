// How many key tiles of the backward's last wave go out as two halves (tail_split.hpp; launch.hpp
// asks). Host code without CUDA types, so that the CPU tests check the rule.
#pragma once

namespace hopattn::kernels::bwd {

// The main kernel's `grid` CTAs take `num_tiles` key tiles in order. After W whole waves, the last
// r = num_tiles - W * grid tiles leave grid - r CTAs idle for a whole tile (at 16k tokens x 2048,
// d128: 2048 tiles, 15.5 waves on 132 SMs; 33 heads, a whole number of waves, read 2% faster in
// session 32). Handing those r tiles out as 2r halves of their query walk ends the kernel about
// half a tile sooner, where the halves fit one wave (2r <= grid). More halves than CTAs leave a
// whole tile's tail again, run at the full machine's contention rather than by r tiles alone:
// d128 16k (2048 tiles, r = 68, 136 halves) measured 0.93 (H100, session 40). A problem of one
// wave or less keeps whole tiles (its grid is the tile count).
inline int split_tail_tiles_rule(long long num_tiles, int grid) {
  if (grid < 2 || num_tiles <= grid) return 0;
  const long long r = num_tiles % grid;
  return 2 * r <= grid ? int(r) : 0;
}

}  // namespace hopattn::kernels::bwd
