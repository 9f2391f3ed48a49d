// The compiled kernels. The list is generated from src/kernels/manifest.cmake (one entry per
// instantiation) so that the dispatcher never names a kernel that the build left out.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "hopattn/types.hpp"
#include "kernels/bwd_args.hpp"
#include "kernels/fwd_args.hpp"

namespace hopattn::kernels {

// Which problems the dispatcher gives a forward kernel when its (dtype, head dim) has several
// (manifest.cmake lists them, with the measurements behind each choice).
enum class FwdKernelUse {
  kDefault,    // everything the others do not take
  kShortKeys,  // seqlen_k <= max_keys (the staged-epilogue kernels)
  kMasked,     // masks that hide much (plan.cpp), seqlen_k <= max_keys (0: any), past the short kernel
};

// The paper's Table 2 ablation kernels (bf16, head dim 128): each turns off one technique.
enum class FwdAblation {
  kNone,
  kNoIntraWgOverlap,       // each GEMM waited for before the softmax (FwdTraits::kIntraWgOverlap)
  kNoWarpSpecialization,   // no producer warpgroup (FwdTraits::kWarpSpecialized, inline_loader.hpp)
};

struct FwdKernel {
  const char* name;
  DType dtype;
  int head_dim;
  FwdAblation ablation;      // kNone except for the Table 2 variants
  int block_n;               // keys per tile: FP8 K/V scale blocks must be a multiple
  FwdKernelUse use;
  int max_keys;  // kShortKeys, kMasked: the longest seqlen_k it takes; 0: no limit (kMasked) or unused
  size_t (*workspace_bytes)(const FwdArgs&);
  int (*ctas_per_cluster)(const FwdArgs&);  // 2 where the launch uses 2-CTA clusters, else 1
  void (*launch)(const FwdArgs&, void* workspace, cudaStream_t);
};

struct BwdKernel {
  const char* name;
  DType dtype;
  int head_dim;
  bool dense;  // takes only problems is_dense_bwd_problem accepts (bwd_args.hpp)
  size_t (*workspace_bytes)(const BwdArgs&);
  void (*launch)(const BwdArgs&, void* workspace, cudaStream_t);
};

// Returns the kernel for (dtype, head_dim), or its ablation variant, or nullptr when
// this build did not compile it; among several, the one whose FwdKernelUse fits seqlen_k and
// masked (the mask hides a large share of the scores: plan.cpp).
const FwdKernel* find_fwd_kernel(DType dtype, int head_dim, FwdAblation ablation, int seqlen_k, bool masked);
// Every compiled forward kernel, terminated by an entry whose name is nullptr.
const FwdKernel* fwd_kernels();

// The backward kernel for (dtype, head_dim), or nullptr when this build did not compile it: its
// dense kernel for a dense problem (is_dense_bwd_problem) where the build has one.
const BwdKernel* find_bwd_kernel(DType dtype, int head_dim, bool dense_problem);
// Every compiled backward kernel, terminated by an entry whose name is nullptr.
const BwdKernel* bwd_kernels();

}  // namespace hopattn::kernels
