// Argument validation: one test per error class. Runs without a GPU: a made-up sm_90
// DeviceInfo stands in for the device (pointers are then checked for null and alignment only),
// and the buffers are host memory that nothing ever reads.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"
#include "hopattn/hopattn.hpp"
#include "kernels/bwd/dq_convert_rule.hpp"
#include "kernels/bwd/l2_sections.hpp"
#include "kernels/bwd/stored_ds_rule.hpp"
#include "kernels/bwd/tail_split_rule.hpp"
#include "kernels/fwd/l2_sections.hpp"

namespace hopattn {
namespace {

DeviceInfo fake_hopper() {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.num_sms = 132;
  d.max_smem_per_block_optin = 227 * 1024;
  return d;
}

// Owns 16-byte aligned host storage for the views of one call.
struct Arena {
  std::vector<std::vector<uint64_t>> blocks;
  void* alloc(size_t bytes) {
    blocks.emplace_back((bytes + 15) / 8 + 2);
    return blocks.back().data();
  }
  TensorView tensor(DType dt, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return make_contiguous_view(alloc(size_t(n) * dtype_size(dt)), dt, shape);
  }
};

struct FwdFixture : ::testing::Test {
  Arena arena;
  FwdParams p;
  void SetUp() override {
    p.q = arena.tensor(DType::kBFloat16, {2, 64, 8, 128});
    p.k = arena.tensor(DType::kBFloat16, {2, 96, 2, 128});
    p.v = arena.tensor(DType::kBFloat16, {2, 96, 2, 128});
    p.out = arena.tensor(DType::kBFloat16, {2, 64, 8, 128});
    p.lse = arena.tensor(DType::kFloat32, {2, 8, 64});
  }
  // The kernel plan_fwd picks for bf16 (2 x queries x 8 heads) against (2 x keys x 2 KV heads).
  std::string kernel_for(int64_t head_dim, int64_t queries, int64_t keys, bool causal, int window_left = -1) {
    p.q = arena.tensor(DType::kBFloat16, {2, queries, 8, head_dim});
    p.out = arena.tensor(DType::kBFloat16, {2, queries, 8, head_dim});
    p.lse = arena.tensor(DType::kFloat32, {2, 8, queries});
    p.k = arena.tensor(DType::kBFloat16, {2, keys, 2, head_dim});
    p.v = arena.tensor(DType::kBFloat16, {2, keys, 2, head_dim});
    p.mask = {causal, window_left, -1};
    return plan_fwd(p, fake_hopper()).kernel;
  }
  bool compiled(int64_t head_dim) {
    try {
      kernel_for(head_dim, 64, 64, false);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // Expects plan_fwd to throw `code` naming `arg` with `fragment` in the message.
  void expect_error(ErrorCode code, const std::string& arg, const std::string& fragment) {
    try {
      plan_fwd(p, fake_hopper());
      FAIL() << "expected an error about " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_EQ(e.argument(), arg) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(arg + ":", 0), 0u) << "message must start with the argument: " << e.what();
    }
  }
};

// The well-formed call passes validation; without a compiled kernel it may only be
// "not supported", never an argument error.
TEST_F(FwdFixture, ValidCallPassesValidation) {
  try {
    Plan plan = plan_fwd(p, fake_hopper());
    EXPECT_FALSE(plan.kernel.empty());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
  }
}

// d128 has a staged-epilogue kernel (128-key tiles) for up to 4096 keys, a register-store kernel
// with 176-key tiles beyond, and one with 128-key tiles for masks that hide much beyond
// (manifest.cmake): any left window, or causal with at least half as many queries as keys.
TEST_F(FwdFixture, KernelFollowsKeyLengthAndMask) {
  if (!compiled(128)) GTEST_SKIP() << "bf16 head dim 128 not in this build";
  EXPECT_EQ(kernel_for(128, 64, 4096, false), "fwd_sm90_bf16_hd128_staged");
  EXPECT_EQ(kernel_for(128, 64, 4097, false), "fwd_sm90_bf16_hd128");
  EXPECT_EQ(kernel_for(128, 4096, 4096, true), "fwd_sm90_bf16_hd128_staged");
  EXPECT_EQ(kernel_for(128, 4097, 4097, true), "fwd_sm90_bf16_hd128_masked");
  EXPECT_EQ(kernel_for(128, 4096, 8192, true), "fwd_sm90_bf16_hd128_masked");
  EXPECT_EQ(kernel_for(128, 4095, 8192, true), "fwd_sm90_bf16_hd128");  // chunked prefill: little is masked
  EXPECT_EQ(kernel_for(128, 64, 8192, false, 512), "fwd_sm90_bf16_hd128_masked");
}

// d64 has a masked kernel (two consumer warpgroups, 128 x 128 tiles) for masks that hide much up
// to 1024 keys; everything else runs the default 192 x 128 kernel (three warpgroups).
TEST_F(FwdFixture, HeadDim64MaskedKernelTakesShortCausal) {
  if (!compiled(64)) GTEST_SKIP() << "bf16 head dim 64 not in this build";
  EXPECT_EQ(kernel_for(64, 1024, 1024, true), "fwd_sm90_bf16_hd64_masked");
  EXPECT_EQ(kernel_for(64, 1025, 1025, true), "fwd_sm90_bf16_hd64");
  EXPECT_EQ(kernel_for(64, 1024, 1024, false), "fwd_sm90_bf16_hd64");
  EXPECT_EQ(kernel_for(64, 100, 1000, true), "fwd_sm90_bf16_hd64");  // chunked prefill: little is masked
  EXPECT_EQ(kernel_for(64, 100, 1000, false, 64), "fwd_sm90_bf16_hd64_masked");
}

// FP8 d64 has the same split as bf16 d64 (manifest.cmake): 192 x 128 tiles by default, the
// 128 x 128 kernel for masks that hide much up to 1024 keys.
TEST_F(FwdFixture, Fp8HeadDim64MaskedKernelTakesShortCausal) {
  auto fp8_kernel_for = [&](int64_t queries, int64_t keys, bool causal) {
    p.q = arena.tensor(DType::kFloat8E4M3, {2, queries, 8, 64});
    p.k = arena.tensor(DType::kFloat8E4M3, {2, keys, 2, 64});
    p.v = arena.tensor(DType::kFloat8E4M3, {2, keys, 2, 64});
    p.out = arena.tensor(DType::kBFloat16, {2, queries, 8, 64});
    p.lse = arena.tensor(DType::kFloat32, {2, 8, queries});
    p.mask = {causal, -1, -1};
    return plan_fwd(p, fake_hopper()).kernel;
  };
  try {
    fp8_kernel_for(64, 64, false);
  } catch (const Error& e) {
    GTEST_SKIP() << "e4m3 head dim 64 not in this build: " << e.what();
  }
  EXPECT_EQ(fp8_kernel_for(1024, 1024, true), "fwd_sm90_e4m3_hd64_masked");
  EXPECT_EQ(fp8_kernel_for(1025, 1025, true), "fwd_sm90_e4m3_hd64");
  EXPECT_EQ(fp8_kernel_for(512, 512, false), "fwd_sm90_e4m3_hd64");
  EXPECT_EQ(fp8_kernel_for(100, 1000, true), "fwd_sm90_e4m3_hd64");  // chunked prefill
}

// FP8 d128: the staged-epilogue kernel up to 4096 keys (manifest.cmake), causal or not; d256 has
// one kernel (its O is staged in the V^T ring).
TEST_F(FwdFixture, Fp8StagedKernelsTakeShortKeys) {
  auto fp8_kernel_for = [&](int64_t hdim, int64_t keys, bool causal) {
    p.q = arena.tensor(DType::kFloat8E4M3, {2, 512, 4, hdim});
    p.k = arena.tensor(DType::kFloat8E4M3, {2, keys, 4, hdim});
    p.v = arena.tensor(DType::kFloat8E4M3, {2, keys, 4, hdim});
    p.out = arena.tensor(DType::kBFloat16, {2, 512, 4, hdim});
    p.lse = arena.tensor(DType::kFloat32, {2, 4, 512});
    p.mask = {causal, -1, -1};
    return plan_fwd(p, fake_hopper()).kernel;
  };
  for (int64_t hdim : {128, 256}) {
    const std::string name = "fwd_sm90_e4m3_hd" + std::to_string(hdim);
    try {
      fp8_kernel_for(hdim, 64, false);
    } catch (const Error& e) {
      GTEST_SKIP() << "e4m3 head dim " << hdim << " not in this build: " << e.what();
    }
    const std::string short_keys = hdim == 128 ? name + "_staged" : name;
    EXPECT_EQ(fp8_kernel_for(hdim, 4096, false), short_keys);
    EXPECT_EQ(fp8_kernel_for(hdim, 700, true), short_keys);
    EXPECT_EQ(fp8_kernel_for(hdim, 4097, false), name);
    EXPECT_EQ(fp8_kernel_for(hdim, 8192, true), name);
  }
}

// FwdTuning::kernel forces a compiled kernel of the problem's dtype and head dim (A/B runs on
// one build); anything else is an argument error naming tuning.kernel.
TEST_F(FwdFixture, ForcedKernel) {
  try {
    plan_fwd(p, fake_hopper());  // the fixture is bf16 head dim 128
  } catch (const Error& e) {
    GTEST_SKIP() << "bf16 head dim 128 not in this build: " << e.what();
  }
  p.tuning.kernel = "fwd_sm90_bf16_hd128_masked";
  EXPECT_EQ(plan_fwd(p, fake_hopper()).kernel, "fwd_sm90_bf16_hd128_masked");
  p.tuning.kernel = "fwd_sm90_bf16_hd128_no_overlap";
  expect_error(ErrorCode::kInvalidArgument, "tuning.kernel", "but the tuning switches select a regular (non-ablation) kernel");
  p.tuning.disable_intra_wg_overlap = true;
  EXPECT_EQ(plan_fwd(p, fake_hopper()).kernel, "fwd_sm90_bf16_hd128_no_overlap");
  p.tuning.disable_intra_wg_overlap = false;
  p.tuning.kernel = "fwd_sm90_bf16_hd128_no_ws";
  expect_error(ErrorCode::kInvalidArgument, "tuning.kernel", "is the no-warp-specialization ablation kernel");
  p.tuning.disable_warp_specialization = true;
  EXPECT_EQ(plan_fwd(p, fake_hopper()).kernel, "fwd_sm90_bf16_hd128_no_ws");
  p.tuning.disable_warp_specialization = false;
  p.tuning.kernel = "fwd_sm90_bf16_hd129";
  expect_error(ErrorCode::kInvalidArgument, "tuning.kernel", "no compiled forward kernel is named 'fwd_sm90_bf16_hd129'");
  p.tuning.kernel = "fwd_sm90_fp16_hd128";  // compiled with fp16, but q is bf16
  try {
    plan_fwd(p, fake_hopper());
    FAIL() << "a fp16 kernel ran a bf16 problem";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_EQ(e.argument(), "tuning.kernel") << e.what();
  }
}

TEST_F(FwdFixture, L2SectionPairs) {
  p.tuning.l2_section_pairs = -1;
  expect_error(ErrorCode::kInvalidArgument, "tuning.l2_section_pairs", "must be >= 0");
}

// The tile order's L2 sections (kernels/fwd/l2_sections.hpp): 8 query heads up to 2048 keys, half
// of L2 of K and V beyond; in longest-first order 16 query heads up to 4096 keys, 8 beyond; always
// whole KV-head groups.
TEST(L2Sections, ShortKeysTakeEightHeadsLongKeysFillHalfOfL2) {
  using hopattn::kernels::fwd::l2_section_pairs;
  constexpr int64_t kL2 = 50 << 20, kMiB = 1 << 20;
  EXPECT_EQ(l2_section_pairs(1024, kMiB / 2, 1, kL2, false), 8);
  EXPECT_EQ(l2_section_pairs(2048, kMiB, 1, kL2, false), 8);
  EXPECT_EQ(l2_section_pairs(2048, kMiB, 3, kL2, false), 9);    // 3 KV groups of 3 query heads
  EXPECT_EQ(l2_section_pairs(2048, kMiB, 16, kL2, false), 16);  // one KV head shared by 16 query heads
  EXPECT_EQ(l2_section_pairs(4096, 2 * kMiB, 1, kL2, false), 12);
  EXPECT_EQ(l2_section_pairs(4096, 2 * kMiB, 4, kL2, false), 48);
  EXPECT_EQ(l2_section_pairs(1 << 20, 512 * kMiB, 2, kL2, false), 2);  // K/V larger than L2: one group
  // Longest-first (causal, window) up to 4096 keys: 16 query heads, whole KV groups.
  EXPECT_EQ(l2_section_pairs(1024, kMiB / 2, 1, kL2, true), 16);
  EXPECT_EQ(l2_section_pairs(4096, 2 * kMiB, 1, kL2, true), 16);
  EXPECT_EQ(l2_section_pairs(4096, 2 * kMiB, 3, kL2, true), 18);  // 6 KV groups of 3
  EXPECT_EQ(l2_section_pairs(8192, 4 * kMiB, 1, kL2, true), 8);   // beyond 4096 keys: 8 heads
  EXPECT_EQ(l2_section_pairs(16384, 8 * kMiB, 16, kL2, true), 16);  // at least one whole group
}

// The backward's L2 sections under a mask (kernels/bwd/l2_sections.hpp): two waves of tiles or
// fewer are one section; 64-key tiles take about one wave of tiles per section (at most 8 pairs,
// at least 2 without GQA, 1 with it), 128-key tiles 16 pairs.
TEST(L2Sections, BackwardMaskedSections) {
  using hopattn::kernels::bwd::bwd_masked_section_pairs;
  constexpr int64_t kSms = 132;
  EXPECT_EQ(bwd_masked_section_pairs(32, 8, 64, kSms, 1, 256), 32);     // 256 tiles: one section
  EXPECT_EQ(bwd_masked_section_pairs(33, 8, 64, kSms, 1, 256), 33);     // 264 tiles: still two waves
  EXPECT_EQ(bwd_masked_section_pairs(64, 8, 64, kSms, 1, 256), 8);      // d256 512 keys: at most 8 pairs
  EXPECT_EQ(bwd_masked_section_pairs(32, 16, 64, kSms, 1, 256), 8);     // d256 1k
  EXPECT_EQ(bwd_masked_section_pairs(16, 32, 64, kSms, 1, 256), 4);     // d256 2k
  EXPECT_EQ(bwd_masked_section_pairs(8, 64, 64, kSms, 1, 256), 2);      // d256 4k
  EXPECT_EQ(bwd_masked_section_pairs(8, 256, 64, kSms, 1, 256), 2);     // 16k: at least 2 pairs
  EXPECT_EQ(bwd_masked_section_pairs(4, 128, 64, kSms, 4, 256), 1);     // with GQA from 8k: 1 pair
  EXPECT_EQ(bwd_masked_section_pairs(8, 64, 64, kSms, 4, 256), 2);      // GQA 4k: one wave is 2 pairs
  EXPECT_EQ(bwd_masked_section_pairs(2, 128, 64, kSms, 4, 256), 1);     // GQA 8k, 256 tiles: 1 pair all the same
  EXPECT_EQ(bwd_masked_section_pairs(4, 64, 64, kSms, 4, 256), 2);      // GQA 4k, 256 tiles: 2 pairs
  EXPECT_EQ(bwd_masked_section_pairs(8, 32, 64, kSms, 4, 256), 4);      // GQA 2k, 256 tiles: 4 pairs
  EXPECT_EQ(bwd_masked_section_pairs(16, 16, 64, kSms, 8, 256), 16);    // GQA 1k, 256 tiles: one section
  EXPECT_EQ(bwd_masked_section_pairs(2, 128, 64, kSms, 1, 256), 2);     // no GQA, 256 tiles: one section
  EXPECT_EQ(bwd_masked_section_pairs(64, 8, 128, kSms, 4, 128), 16);    // 128-key tiles: 16 with GQA too
  EXPECT_EQ(bwd_masked_section_pairs(64, 8, 128, kSms, 1, 128), 16);    // d128 1k, 512 tiles
  EXPECT_EQ(bwd_masked_section_pairs(128, 16, 128, kSms, 1, 128), 8);   // d128 2k: about one wave
  EXPECT_EQ(bwd_masked_section_pairs(64, 32, 128, kSms, 1, 128), 4);    // d128 4k
  EXPECT_EQ(bwd_masked_section_pairs(64, 32, 128, kSms, 1, 96), 4);     // d96 4k
  EXPECT_EQ(bwd_masked_section_pairs(32, 64, 128, kSms, 1, 128), 2);    // d128 8k
  EXPECT_EQ(bwd_masked_section_pairs(16, 128, 128, kSms, 1, 128), 1);   // d128 16k: one pair is a wave
  EXPECT_EQ(bwd_masked_section_pairs(64, 32, 128, kSms, 4, 128), 16);   // d128 GQA 4k: 16 pairs
  EXPECT_EQ(bwd_masked_section_pairs(128, 32, 128, kSms, 1, 64), 16);   // d64 4k: 16 pairs
  EXPECT_EQ(bwd_masked_section_pairs(4, 128, 128, kSms, 1, 64), 4);     // fewer pairs than a section
  EXPECT_EQ(bwd_masked_section_pairs(1, 4096, 64, kSms, 1, 256), 1);    // one pair
  EXPECT_EQ(bwd_masked_section_pairs(64, 8, 64, 0, 1, 256), 2);         // unknown SM count: no division by zero
}

TEST(L2Sections, BackwardDeterministicMaskedSections) {
  using hopattn::kernels::bwd::bwd_deterministic_masked_section_pairs;
  constexpr int64_t kSms = 132;
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(256, 8, 1024, kSms), 66);   // d128 1k: 4 waves
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(128, 16, 2048, kSms), 33);  // d128 2k
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(64, 32, 4096, kSms), 33);   // d128 4k: 8 waves
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(16, 128, 16384, kSms), 8);  // d128 16k
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(8, 256, 16384, kSms), 4);   // d256 16k
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(8, 16, 2048, kSms), 8);     // fewer pairs than a section
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(1, 2048, 131072, kSms), 1); // more than 8 waves in one pair
  EXPECT_EQ(bwd_deterministic_masked_section_pairs(64, 8, 1024, 0), 1);        // unknown SM count: one pair
}

TEST(TailSplitRule, SplitsTheLastWaveWhereItsHalvesFitOneWave) {
  using hopattn::kernels::bwd::split_tail_tiles_rule;
  EXPECT_EQ(split_tail_tiles_rule(2560, 132), 52);  // 19.4 waves: 104 halves
  EXPECT_EQ(split_tail_tiles_rule(160, 132), 28);
  EXPECT_EQ(split_tail_tiles_rule(132 * 15 + 66, 132), 66);
  EXPECT_EQ(split_tail_tiles_rule(2048, 132), 0);  // 68 left: 136 halves, a whole tile's tail again
  EXPECT_EQ(split_tail_tiles_rule(132 * 33, 132), 0);       // whole waves
  EXPECT_EQ(split_tail_tiles_rule(100, 132), 0);            // one wave: grid = tiles
  EXPECT_EQ(split_tail_tiles_rule(132, 132), 0);
  EXPECT_EQ(split_tail_tiles_rule(5, 1), 0);
}

TEST(StoredDsRule, FixedLengthsUpTo2kKeysOrForcedUpTo4k) {
  using hopattn::kernels::BwdArgs;
  using hopattn::kernels::bwd::stored_ds_rule;
  BwdArgs a;
  a.batch = 32;
  a.nheads = a.nheads_k = 8;
  a.seqlen_q = a.seqlen_k = 512;
  EXPECT_TRUE(stored_ds_rule(a));
  a.seqlen_k = 2048;
  EXPECT_TRUE(stored_ds_rule(a));
  a.seqlen_k = 2049;
  EXPECT_FALSE(stored_ds_rule(a));
  a.dq_from_stored_ds = 1;  // forced: up to 4096 keys
  EXPECT_TRUE(stored_ds_rule(a));
  a.seqlen_k = 4097;
  EXPECT_FALSE(stored_ds_rule(a));
  a.seqlen_k = 512;
  a.dq_from_stored_ds = -1;
  EXPECT_FALSE(stored_ds_rule(a));
  a.dq_from_stored_ds = 1;
  const int32_t lengths[2] = {0, 512};
  a.cu_seqlens_q = lengths;  // variable lengths: never
  EXPECT_FALSE(stored_ds_rule(a));
  a.cu_seqlens_q = nullptr;
  a.seqused_k = lengths;
  EXPECT_FALSE(stored_ds_rule(a));
  a.seqused_k = nullptr;
  a.seqlen_q = 0;  // no queries: nothing to store
  EXPECT_FALSE(stored_ds_rule(a));
}

TEST(DqConvertRule, SmsGoAsOneOverVisibleKeys) {
  using hopattn::kernels::bwd::concurrent_dq_convert_sms_rule;
  EXPECT_EQ(concurrent_dq_convert_sms_rule(512, false, 132), 8);
  EXPECT_EQ(concurrent_dq_convert_sms_rule(1024, false, 132), 4);
  EXPECT_EQ(concurrent_dq_convert_sms_rule(2048, false, 132), 2);
  EXPECT_EQ(concurrent_dq_convert_sms_rule(4096, false, 132), 0);   // one SM: the postprocess after the kernel
  EXPECT_EQ(concurrent_dq_convert_sms_rule(512, true, 132), 8);     // at most 8
  EXPECT_EQ(concurrent_dq_convert_sms_rule(2048, true, 132), 4);    // causal: half the keys visible
  EXPECT_EQ(concurrent_dq_convert_sms_rule(4096, true, 132), 2);
  EXPECT_EQ(concurrent_dq_convert_sms_rule(8192, true, 132), 0);
  EXPECT_EQ(concurrent_dq_convert_sms_rule(1, false, 132), 8);      // a single key
  EXPECT_EQ(concurrent_dq_convert_sms_rule(1024, false, 66), 2);    // fewer SMs, fewer converting
  EXPECT_EQ(concurrent_dq_convert_sms_rule(1024, false, 16), 0);
}

TEST_F(FwdFixture, DtypeMismatch) {
  p.k.dtype = DType::kFloat16;
  expect_error(ErrorCode::kInvalidArgument, "k", "dtype");
}

TEST_F(FwdFixture, UnsupportedDtype) {
  p.q.dtype = DType::kFloat32;
  expect_error(ErrorCode::kInvalidArgument, "q", "expected dtype bf16 or fp16 or e4m3, got fp32");
}

TEST_F(FwdFixture, OutDtype) {
  p.out.dtype = DType::kFloat16;
  expect_error(ErrorCode::kInvalidArgument, "out", "dtype");
}

TEST_F(FwdFixture, LseDtypeAndShape) {
  p.lse.dtype = DType::kBFloat16;
  expect_error(ErrorCode::kInvalidArgument, "lse", "fp32");
  p.lse = arena.tensor(DType::kFloat32, {2, 8, 63});
  expect_error(ErrorCode::kInvalidArgument, "lse", "(batch, nheads, seqlen_q)");
}

TEST_F(FwdFixture, HeadDimInvalid) {
  p.q = arena.tensor(DType::kBFloat16, {2, 64, 8, 100});
  expect_error(ErrorCode::kInvalidArgument, "q", "multiple of 8");
  p.q = arena.tensor(DType::kBFloat16, {2, 64, 8, 512});
  expect_error(ErrorCode::kInvalidArgument, "q", "up to 256");
}

TEST_F(FwdFixture, HeadDimNotSupported) {
  p.q = arena.tensor(DType::kBFloat16, {2, 64, 8, 32});
  expect_error(ErrorCode::kNotSupported, "q", "head dim 32");
}

TEST_F(FwdFixture, HeadDimMismatch) {
  p.k = arena.tensor(DType::kBFloat16, {2, 96, 2, 64});
  expect_error(ErrorCode::kInvalidArgument, "k", "head dim 64 differs");
}

TEST_F(FwdFixture, HeadsNotDivisible) {
  p.k = arena.tensor(DType::kBFloat16, {2, 96, 3, 128});
  p.v = arena.tensor(DType::kBFloat16, {2, 96, 3, 128});
  expect_error(ErrorCode::kInvalidArgument, "k", "multiple of nheads_k");
}

TEST_F(FwdFixture, ShapeMismatch) {
  p.v = arena.tensor(DType::kBFloat16, {2, 95, 2, 128});
  expect_error(ErrorCode::kInvalidArgument, "v", "seqlen_k");
  SetUp();
  p.k = arena.tensor(DType::kBFloat16, {3, 96, 2, 128});
  expect_error(ErrorCode::kInvalidArgument, "k", "batch");
  SetUp();
  p.out = arena.tensor(DType::kBFloat16, {2, 64, 8, 64});
  expect_error(ErrorCode::kInvalidArgument, "out", "expected shape");
  SetUp();
  p.q.rank = 3;
  expect_error(ErrorCode::kInvalidArgument, "q", "rank-4");
}

TEST_F(FwdFixture, NegativeLength) {
  p.q.shape[1] = -5;
  expect_error(ErrorCode::kInvalidArgument, "q", "negative");
}

TEST_F(FwdFixture, NullPointer) {
  p.v.data = nullptr;
  expect_error(ErrorCode::kInvalidArgument, "v", "null");
}

TEST_F(FwdFixture, MissingTensor) {
  p.out = TensorView{};
  expect_error(ErrorCode::kInvalidArgument, "out", "required");
}

TEST_F(FwdFixture, MisalignedBasePointer) {
  p.q.data = static_cast<char*>(p.q.data) + 2;
  expect_error(ErrorCode::kInvalidArgument, "q", "16-byte aligned");
}

TEST_F(FwdFixture, MisalignedStride) {
  p.k.stride[1] = 2 * 128 + 4;  // 520 bytes between rows: not a multiple of 16
  expect_error(ErrorCode::kInvalidArgument, "k", "multiple of 16 bytes");
}

TEST_F(FwdFixture, LastDimNotContiguous) {
  p.q.stride[3] = 2;
  expect_error(ErrorCode::kInvalidArgument, "q", "contiguous");
}

TEST_F(FwdFixture, NonContiguousStridesAreAccepted) {
  p.q.stride = {64 * 8 * 256, 8 * 256, 256, 1};  // padded rows and heads: legal for TMA
  try {
    plan_fwd(p, fake_hopper());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
  }
}

TEST_F(FwdFixture, WrongDevice) {
  DeviceInfo ampere = fake_hopper();
  ampere.cc_major = 8;
  try {
    plan_fwd(p, ampere);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupportedDevice);
    EXPECT_NE(std::string(e.what()).find("sm_80"), std::string::npos) << e.what();
  }
}

TEST_F(FwdFixture, WindowArguments) {
  p.mask.window_left = -2;
  expect_error(ErrorCode::kInvalidArgument, "window_left", ">= 0, or -1");
  p.mask = {};
  p.mask.window_right = -7;
  expect_error(ErrorCode::kInvalidArgument, "window_right", ">= 0, or -1");
  p.mask = {true, -1, 5};
  expect_error(ErrorCode::kInvalidArgument, "window_right", "causal");
}

TEST_F(FwdFixture, ScalarArguments) {
  p.softcap = -1.f;
  expect_error(ErrorCode::kInvalidArgument, "softcap", ">= 0");
  p.softcap = 0.f;
  p.softmax_scale = std::numeric_limits<float>::infinity();
  expect_error(ErrorCode::kInvalidArgument, "softmax_scale", "finite");
}

TEST_F(FwdFixture, NegativeScale) {
  p.softmax_scale = -0.1f;
  expect_error(ErrorCode::kInvalidArgument, "softmax_scale", ">= 0");
}

TEST_F(FwdFixture, OverlappingOutput) {
  p.out.stride = {64 * 8 * 128, 8 * 128, 64, 1};  // heads 64 apart but 128 wide: overlap
  expect_error(ErrorCode::kInvalidArgument, "out", "overlap");
}

TEST_F(FwdFixture, RunRejectsForeignPlanAndBadWorkspace) {
  Plan foreign;  // not made by plan_fwd
  foreign.device = fake_hopper();
  try {
    run_fwd(foreign, p, nullptr, 0, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan") << e.what();
  }
  try {
    const Plan plan = plan_fwd(p, fake_hopper());
    alignas(16) char bytes[512];
    if (plan.workspace_bytes > 0) {
      try {
        run_fwd(plan, p, nullptr, 0, nullptr);
        FAIL();
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), "workspace") << e.what();
        EXPECT_EQ(e.code(), ErrorCode::kWorkspaceTooSmall) << e.what();
      }
      try {
        run_fwd(plan, p, bytes + 4, sizeof(bytes) - 4, nullptr);
        FAIL();
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), "workspace") << e.what();
        EXPECT_NE(std::string(e.what()).find("aligned"), std::string::npos) << e.what();
      }
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
  }
}

// Plan::ctas_per_cluster: dense problems without a mask and with an even number of query blocks
// run in 2-CTA clusters (16-bit kernels; FP8 at d256 only), everything else one CTA per tile.
TEST_F(FwdFixture, ClusterLaunchInThePlan) {
  if (!compiled(128)) GTEST_SKIP() << "bf16 head dim 128 not in this build";
  auto ctas = [&](int64_t queries, int64_t keys, bool causal) {
    kernel_for(128, queries, keys, causal);
    return plan_fwd(p, fake_hopper()).ctas_per_cluster;
  };
  EXPECT_EQ(ctas(1024, 8192, false), 2);  // the 176-key kernel, 8 query blocks
  EXPECT_EQ(ctas(1024, 1024, false), 2);  // the staged short-key kernel
  EXPECT_EQ(ctas(384, 8192, false), 1);   // 3 query blocks
  EXPECT_EQ(ctas(1024, 8192, true), 1);   // causal: the pair's blocks see different keys
  kernel_for(128, 1024, 8192, false);
  p.tuning.disable_cluster = true;
  EXPECT_EQ(plan_fwd(p, fake_hopper()).ctas_per_cluster, 1);
  p.tuning.disable_cluster = false;
  p.tuning.disable_warp_specialization = true;
  EXPECT_EQ(plan_fwd(p, fake_hopper()).ctas_per_cluster, 1);
  p.tuning.disable_warp_specialization = false;
  // FP8 (where compiled): d256 clusters, d128 does not.
  for (int64_t d : {256, 128}) {
    kernel_for(128, 1024, 8192, false);
    p.q = arena.tensor(DType::kFloat8E4M3, {2, 1024, 8, d});
    p.k = arena.tensor(DType::kFloat8E4M3, {2, 8192, 2, d});
    p.v = arena.tensor(DType::kFloat8E4M3, {2, 8192, 2, d});
    p.out = arena.tensor(DType::kBFloat16, {2, 1024, 8, d});
    try {
      EXPECT_EQ(plan_fwd(p, fake_hopper()).ctas_per_cluster, d == 256 ? 2 : 1) << "e4m3 d" << d;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();  // FP8 or this head dim not built
    }
  }
}

TEST_F(FwdFixture, AblationKernelSelection) {
  // manifest.cmake compiles both ablation kernels wherever it compiles bf16 head dim 128 (the
  // fixture's problem): then each switch must select its kernel.
  bool bf16_d128 = true;
  try {
    plan_fwd(p, fake_hopper());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
    bf16_d128 = false;
  }
  if (bf16_d128) {
    p.tuning.disable_warp_specialization = true;
    EXPECT_EQ(plan_fwd(p, fake_hopper()).kernel, "fwd_sm90_bf16_hd128_no_ws");
    p.tuning.disable_warp_specialization = false;
    p.tuning.disable_intra_wg_overlap = true;
    EXPECT_EQ(plan_fwd(p, fake_hopper()).kernel, "fwd_sm90_bf16_hd128_no_overlap");
  }
  p.tuning.disable_intra_wg_overlap = true;
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out}) t->dtype = DType::kFloat16;
  expect_error(ErrorCode::kNotSupported, "tuning.disable_intra_wg_overlap", "bf16 head dim 128 only");
  // The two kernel switches name two different kernels; together they name none.
  p.tuning.disable_warp_specialization = true;
  expect_error(ErrorCode::kNotSupported, "tuning.disable_warp_specialization", "together with tuning.disable_intra_wg_overlap");
  p.tuning.disable_intra_wg_overlap = false;
  expect_error(ErrorCode::kNotSupported, "tuning.disable_warp_specialization", "bf16 head dim 128 only");
}

TEST_F(FwdFixture, DescaleOnlyForFp8) {
  float scale = 1.f;
  p.k_descale = &scale;
  expect_error(ErrorCode::kInvalidArgument, "k_descale", "e4m3");
}

TEST_F(FwdFixture, Fp8BlockDescales) {
  p.block_descale.k = arena.tensor(DType::kFloat32, {2, 2, 1});
  p.block_descale.kv_block_rows = 128;
  expect_error(ErrorCode::kInvalidArgument, "block_descale.k", "e4m3");  // bf16 inputs
  for (TensorView* t : {&p.q, &p.k, &p.v}) t->dtype = DType::kFloat8E4M3;
  p.block_descale.k = arena.tensor(DType::kFloat32, {2, 2, 3});  // 96 keys are one 128-row block
  expect_error(ErrorCode::kInvalidArgument, "block_descale.k", "(batch, nheads_k, ceil(seqlen / block_descale.kv_block_rows))");
  p.block_descale.k = arena.tensor(DType::kFloat32, {2, 2, 1});
  p.block_descale.kv_block_rows = 0;
  expect_error(ErrorCode::kInvalidArgument, "block_descale.kv_block_rows", "must be > 0");
  p.block_descale.kv_block_rows = 128;
  p.block_descale.q = arena.tensor(DType::kFloat16, {2, 8, 1});
  p.block_descale.q_block_rows = 64;
  expect_error(ErrorCode::kInvalidArgument, "block_descale.q", "dtype");
  // The multiple of the key tile is checked against the kernel the planner picks.
  p.block_descale.q = arena.tensor(DType::kFloat32, {2, 8, 1});
  p.block_descale.kv_block_rows = 64;
  p.block_descale.k = arena.tensor(DType::kFloat32, {2, 2, 2});
  try {
    plan_fwd(p, fake_hopper());
    FAIL() << "kv_block_rows = 64 was accepted";
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotSupported) {  // a build without the e4m3 d128 kernel
      EXPECT_EQ(e.argument(), "block_descale.kv_block_rows") << e.what();
      EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
    }
  }
}

TEST_F(FwdFixture, Fp8HeadDimsAndAblation) {
  for (TensorView* t : {&p.q, &p.k, &p.v}) t->dtype = DType::kFloat8E4M3;
  p.tuning.disable_intra_wg_overlap = true;
  expect_error(ErrorCode::kNotSupported, "tuning.disable_intra_wg_overlap", "bf16 head dim 128 only");
  p.tuning.disable_intra_wg_overlap = false;
  p.tuning.disable_warp_specialization = true;
  expect_error(ErrorCode::kNotSupported, "tuning.disable_warp_specialization", "bf16 head dim 128 only");
}

TEST_F(FwdFixture, VarlenArguments) {
  const int32_t cu[3] = {0, 30, 64};
  p.q = arena.tensor(DType::kBFloat16, {64, 8, 128});
  p.k = arena.tensor(DType::kBFloat16, {96, 2, 128});
  p.v = arena.tensor(DType::kBFloat16, {96, 2, 128});
  p.out = arena.tensor(DType::kBFloat16, {64, 8, 128});
  p.lse = arena.tensor(DType::kFloat32, {8, 64});
  p.cu_seqlens_q = cu;
  expect_error(ErrorCode::kInvalidArgument, "cu_seqlens_k", "together");
  p.cu_seqlens_k = cu;
  expect_error(ErrorCode::kInvalidArgument, "batch_varlen", "number of sequences");
  p.batch_varlen = 2;
  p.max_seqlen_q = -1;
  expect_error(ErrorCode::kInvalidArgument, "max_seqlen_q", ">= 0");
  p.max_seqlen_q = 34;
  p.max_seqlen_k = 60;
  p.lse = arena.tensor(DType::kFloat32, {2, 8, 32});
  expect_error(ErrorCode::kInvalidArgument, "lse", "(nheads, total_q)");
}

TEST_F(FwdFixture, NotSupportedYetOptions) {
  p.num_splits = 4;
  expect_error(ErrorCode::kNotSupported, "num_splits", "not supported yet");
  p.num_splits = -1;
  expect_error(ErrorCode::kInvalidArgument, "num_splits", ">= 0");
  p.num_splits = 1;
  p.pack_gqa = true;
  expect_error(ErrorCode::kNotSupported, "pack_gqa", "not supported yet");
  p.pack_gqa = false;
  p.page_table = arena.tensor(DType::kInt32, {2, 4});
  expect_error(ErrorCode::kNotSupported, "page_table", "not supported yet");
  p.page_table = {};
  p.k_new = arena.tensor(DType::kBFloat16, {2, 1, 2, 128});
  expect_error(ErrorCode::kNotSupported, "k_new", "not supported yet");
  p.k_new = {};
  p.v = arena.tensor(DType::kBFloat16, {2, 96, 2, 64});
  expect_error(ErrorCode::kNotSupported, "v", "head_dim_v");
}

TEST(BwdValidation, GradientShapesAndDtypes) {
  Arena arena;
  BwdParams p;
  p.q = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.k = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.v = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.out = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.dout = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.dq = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.dk = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  p.dv = arena.tensor(DType::kBFloat16, {1, 32, 4, 64});
  p.lse = arena.tensor(DType::kFloat32, {1, 4, 32});
  try {
    plan_bwd(p, fake_hopper());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dv") << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  p.dv = arena.tensor(DType::kFloat16, {1, 31, 4, 64});
  try {
    plan_bwd(p, fake_hopper());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dv") << e.what();
  }
  p.dv = arena.tensor(DType::kFloat16, {1, 32, 4, 64});
  const auto expect_invalid = [&](const std::string& arg) {
    try {
      plan_bwd(p, fake_hopper());
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  };
  // Each tuning knob below its range, alone (then back to the library's rule).
  const struct { int32_t BwdTuning::* knob; int32_t bad; const char* arg; } knobs[] = {
      {&BwdTuning::l2_section_pairs, -2, "tuning.l2_section_pairs"},
      {&BwdTuning::lag_dq_min_steps, -1, "tuning.lag_dq_min_steps"},
      {&BwdTuning::dq_convert_sms, -2, "tuning.dq_convert_sms"},
      {&BwdTuning::split_tail_tiles, -2, "tuning.split_tail_tiles"},
      {&BwdTuning::dq_from_stored_ds, -2, "tuning.dq_from_stored_ds"},
      {&BwdTuning::dq_from_stored_ds, 2, "tuning.dq_from_stored_ds"},
  };
  for (const auto& k : knobs) {
    p.tuning.*k.knob = k.bad;
    expect_invalid(k.arg);
    p.tuning.*k.knob = 0;
  }
  p.lse = {};
  try {
    plan_bwd(p, fake_hopper());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "lse") << e.what();
  }
}

// A bf16 MHA backward problem with seqlen queries and keys at head dim d (4 heads, batch 1).
BwdParams bwd_problem(Arena& arena, int d, int64_t seqlen) {
  BwdParams p;
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv})
    *t = arena.tensor(DType::kBFloat16, {1, seqlen, 4, d});
  p.lse = arena.tensor(DType::kFloat32, {1, 4, seqlen});
  return p;
}

TEST(BwdValidation, EveryHeadDimHasABackwardKernel) {
  // Head dims 192 and 256 get the split-head-dim kernel (bwd/consumer_wide.hpp); a head dim that
  // was left out of the build must say so, naming q.
  Arena arena;
  for (int d : {64, 96, 128, 192, 256}) {
    const BwdParams p = bwd_problem(arena, d, 32);
    try {
      EXPECT_EQ(plan_bwd(p, fake_hopper()).kernel, "bwd_sm90_bf16_hd" + std::to_string(d));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
      EXPECT_EQ(e.argument(), "q") << e.what();
      EXPECT_NE(std::string(e.what()).find("head dim " + std::to_string(d)), std::string::npos) << e.what();
    }
  }
}

TEST(BwdValidation, EveryHeadDimHasADenseBackwardKernel) {
  // manifest.cmake gives every head dim a dense instance (d96 and d192 since session 47): a
  // dense problem (128 keys, no mask) takes it wherever the head dim is built.
  Arena arena;
  for (int d : {64, 96, 128, 192, 256}) {
    const BwdParams p = bwd_problem(arena, d, 128);
    try {
      EXPECT_EQ(plan_bwd(p, fake_hopper()).kernel, "bwd_sm90_bf16_hd" + std::to_string(d) + "_dense");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();  // head dim not in this build
    }
  }
}

// Dense problems (no mask, no softcap, fixed lengths, whole 128-key tiles: is_dense_bwd_problem)
// take the dense backward kernel; anything else the general one. A plan made for the dense kernel
// refuses a problem with a mask (the kernel has no mask code) before it launches anything.
TEST(BwdValidation, DenseProblemsTakeTheDenseKernel) {
  Arena arena;
  BwdParams p;
  const auto shape = [&](int64_t seqlen_k) {
    for (TensorView* t : {&p.q, &p.out, &p.dout, &p.dq}) *t = arena.tensor(DType::kBFloat16, {2, 256, 8, 128});
    for (TensorView* t : {&p.k, &p.v, &p.dk, &p.dv}) *t = arena.tensor(DType::kBFloat16, {2, seqlen_k, 2, 128});
    p.lse = arena.tensor(DType::kFloat32, {2, 8, 256});
  };
  shape(512);
  std::string dense_name;
  try {
    dense_name = plan_bwd(p, fake_hopper()).kernel;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
    GTEST_SKIP() << "bf16 head dim 128 not in this build";
  }
  EXPECT_EQ(dense_name, "bwd_sm90_bf16_hd128_dense");  // manifest.cmake: d128 has one
  const auto general = [&](const char* what) {
    EXPECT_EQ(plan_bwd(p, fake_hopper()).kernel, "bwd_sm90_bf16_hd128") << what;
  };
  p.mask.causal = true;
  general("causal");
  p.mask.causal = false;
  p.mask.window_left = 100;
  general("window");
  p.mask.window_left = -1;
  p.softcap = 30.f;
  general("softcap");
  p.softcap = 0.f;
  shape(500);
  general("keys not in whole tiles");
  const int32_t seqused[2] = {256, 200};
  shape(512);
  p.seqused_k = seqused;
  general("seqused_k");
  p.seqused_k = nullptr;

  const Plan plan = plan_bwd(p, fake_hopper());
  ASSERT_EQ(plan.kernel, dense_name);
  p.mask.causal = true;
  void* workspace = reinterpret_cast<void*>(uintptr_t{1} << 20);  // never touched: the call fails first
  try {
    run_bwd(plan, p, workspace, plan.workspace_bytes, nullptr);
    FAIL() << "a causal problem ran on the dense kernel's plan";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan") << e.what();
    EXPECT_NE(std::string(e.what()).find("other parameters"), std::string::npos) << e.what();
  }
}

// ---- combine ------------------------------------------------------------------------------------

struct CombineFixture : ::testing::Test {
  Arena arena;
  CombineParams p;
  void SetUp() override {
    p.out_partial = arena.tensor(DType::kFloat32, {3, 2 * 16, 4, 128});  // (splits, batch * seqlen, heads, d)
    p.lse_partial = arena.tensor(DType::kFloat32, {3, 2, 4, 16});
    p.out = arena.tensor(DType::kBFloat16, {2, 16, 4, 128});
    p.lse = arena.tensor(DType::kFloat32, {2, 4, 16});
  }
  void expect_error(const std::string& arg, const std::string& fragment) {
    try {
      plan_combine(p, fake_hopper());
      FAIL() << "expected an error about " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_EQ(e.argument(), arg) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
};

TEST_F(CombineFixture, ValidCallsPlan) {
  EXPECT_EQ(plan_combine(p, fake_hopper()).kernel, "combine");
  p.lse = TensorView{};  // lse is optional
  p.out = arena.tensor(DType::kFloat32, {2, 16, 4, 128});
  EXPECT_EQ(plan_combine(p, fake_hopper()).workspace_bytes, 0u);
  p.out = arena.tensor(DType::kFloat32, {2, 16, 4, 256});
  p.out.shape[3] = 128;  // every row's first half: strided rows
  EXPECT_NO_THROW(plan_combine(p, fake_hopper()));
}

TEST_F(CombineFixture, Dtypes) {
  p.out_partial.dtype = DType::kBFloat16;
  expect_error("out_partial", "dtype");
  SetUp();
  p.lse_partial.dtype = DType::kFloat16;
  expect_error("lse_partial", "dtype");
  SetUp();
  p.out.dtype = DType::kFloat8E4M3;
  expect_error("out", "dtype");
  SetUp();
  p.lse.dtype = DType::kBFloat16;
  expect_error("lse", "dtype");
}

TEST_F(CombineFixture, Shapes) {
  p.lse_partial = arena.tensor(DType::kFloat32, {2, 2, 4, 16});  // 2 splits against 3
  expect_error("lse_partial", "num_splits");
  SetUp();
  p.out = arena.tensor(DType::kBFloat16, {2, 15, 4, 128});  // 30 rows against 32
  expect_error("out", "batch * seqlen");
  SetUp();
  p.out = arena.tensor(DType::kBFloat16, {2, 16, 4, 64});
  expect_error("out", "head_dim");
  SetUp();
  p.lse = arena.tensor(DType::kFloat32, {2, 16, 4});
  expect_error("lse", "(batch, nheads, seqlen)");
  SetUp();
  p.out_partial = arena.tensor(DType::kFloat32, {0, 32, 4, 128});
  p.lse_partial = arena.tensor(DType::kFloat32, {0, 2, 4, 16});
  expect_error("out_partial", "at least one split");
  SetUp();
  p.out_partial = arena.tensor(DType::kFloat32, {3, 2, 16, 4});  // rank 4 but no fold of (batch, seqlen)
  expect_error("out", "dim 1 of out_partial");
  SetUp();
  p.out_partial.shape[1] = int64_t(1) << 40;  // bounded before any product
  expect_error("out_partial", "int32");
}

// With head dim 0 out_partial and out are never touched (their data may be null), but the LSEs
// still are; with no (row, head) pair at all nothing is.
TEST_F(CombineFixture, EmptyTensors) {
  p.out_partial = TensorView{nullptr, DType::kFloat32, 4, {3, 32, 4, 0}, {0, 0, 0, 1}};
  p.out = TensorView{nullptr, DType::kBFloat16, 4, {2, 16, 4, 0}, {0, 0, 0, 1}};
  EXPECT_NO_THROW(plan_combine(p, fake_hopper()));
  p.lse_partial.data = nullptr;
  expect_error("lse_partial", "null");
  p.lse_partial = TensorView{nullptr, DType::kFloat32, 4, {3, 0, 4, 16}, {0, 0, 0, 1}};
  p.out_partial.shape = {3, 0, 4, 0};
  p.out.shape = {0, 16, 4, 0};
  p.lse = TensorView{nullptr, DType::kFloat32, 3, {0, 4, 16}, {64, 16, 1}};
  EXPECT_NO_THROW(plan_combine(p, fake_hopper()));
}

// Outputs may not share memory with inputs (no in-place merge).
TEST_F(CombineFixture, OutputsOverlappingInputs) {
  p.lse.data = p.lse_partial.data;  // the first split's LSEs
  expect_error("lse", "must not share memory with lse_partial");
  SetUp();
  p.out = TensorView{p.out_partial.data, DType::kFloat32, 4, {2, 16, 4, 128}, {16 * 4 * 128, 4 * 128, 128, 1}};
  expect_error("out", "must not share memory with out_partial");
}

TEST_F(CombineFixture, MissingNullAndOverlap) {
  p.out = TensorView{};
  expect_error("out", "");
  SetUp();
  p.lse_partial.data = nullptr;
  expect_error("lse_partial", "null");
  SetUp();
  p.out.stride = {16 * 4 * 128, 4 * 128, 64, 1};  // heads 64 apart but 128 wide
  expect_error("out", "overlap");
}

TEST_F(CombineFixture, WrongDeviceAndForeignPlan) {
  DeviceInfo ampere = fake_hopper();
  ampere.cc_major = 8;
  try {
    plan_combine(p, ampere);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupportedDevice) << e.what();
  }
  Plan foreign;
  foreign.device = fake_hopper();
  try {
    run_combine(foreign, p, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan") << e.what();
  }
}

TEST(CAbi, ErrorsBecomeStatusAndMessage) {
  hopattn_fwd_params p;
  hopattn_fwd_params_init(&p);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.num_splits, 1);
  size_t bytes = 0;
  EXPECT_EQ(hopattn_fwd_workspace_size(nullptr, &bytes), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("params"), std::string::npos);
  // With no tensors the call fails: on a machine without a GPU at the device check, with one
  // at the first missing tensor. Either way a status and a message, never a crash.
  const hopattn_status s = hopattn_fwd_workspace_size(&p, &bytes);
  EXPECT_TRUE(s == HOPATTN_UNSUPPORTED_DEVICE || s == HOPATTN_INVALID_ARGUMENT) << s;
  EXPECT_FALSE(std::string(hopattn_last_error()).empty());
  EXPECT_STREQ(hopattn_version(), version());
  EXPECT_EQ(hopattn_combine(nullptr, nullptr), HOPATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hopattn_last_error()).find("params"), std::string::npos);
  hopattn_combine_params c{};  // no tensors: a status and a message, never a crash
  const hopattn_status cs = hopattn_combine(&c, nullptr);
  EXPECT_TRUE(cs == HOPATTN_UNSUPPORTED_DEVICE || cs == HOPATTN_INVALID_ARGUMENT) << cs;
  EXPECT_FALSE(std::string(hopattn_last_error()).empty());
}

TEST(Api, ContiguousViewStrides) {
  int dummy[4];
  TensorView t = make_contiguous_view(dummy, DType::kBFloat16, {2, 3, 4, 5});
  EXPECT_EQ(t.rank, 4);
  EXPECT_EQ(t.stride[0], 60);
  EXPECT_EQ(t.stride[2], 5);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_STREQ(dtype_name(DType::kFloat8E4M3), "e4m3");
}

}  // namespace
}  // namespace hopattn
