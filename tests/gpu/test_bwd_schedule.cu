// Host-side checks of the backward schedule's block arithmetic (no GPU needed): the run of key
// blocks that visit a query block, which the dQ writer counts arrivals against and the
// preprocess uses to find query blocks nobody writes, against a brute-force scan of
// KeyBlockMask::m_block_range over every key block.
#include <gtest/gtest.h>

#include <random>

#include "kernels/bwd/mask.hpp"
#include "kernels/bwd/tile_table.hpp"

namespace {

using hopattn::kernels::bwd::KeyBlockMask;

template <int kBlockM, int kBlockN>
void check_visiting_runs(unsigned seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  for (int it = 0; it < 20000; ++it) {
    const int seqlen_q = pick(700), seqlen_k = pick(700);
    int left = pick(3) == 0 ? -1 : pick(300), right = pick(3) == 0 ? -1 : pick(300);
    if (pick(8) == 0) left = pick(2) == 0 ? 0 : left, right = 0;  // windows of one key and left-only windows
    if (pick(4) == 0) left = -1, right = 0;  // causal
    const KeyBlockMask<kBlockM, kBlockN> mask{seqlen_q, seqlen_k, left, right};
    const int num_n = (seqlen_k + kBlockN - 1) / kBlockN, num_m = (seqlen_q + kBlockM - 1) / kBlockM;
    for (int m = 0; m < num_m; ++m) {
      int first = -1, end = -1, count = 0;
      for (int n = 0; n < num_n; ++n) {
        int b, e;
        mask.m_block_range(n, b, e);
        if (m >= b && m < e) {
          if (first < 0) first = n;
          end = n + 1;
          ++count;
        }
      }
      const auto run = mask.visiting_key_blocks(m);
      SCOPED_TRACE(testing::Message() << "seqlen_q " << seqlen_q << " seqlen_k " << seqlen_k << " window (" << left
                                      << ", " << right << ") m_block " << m);
      if (count == 0) {
        ASSERT_EQ(run.first, run.end);
      } else {
        ASSERT_EQ(count, end - first);  // the visitors are contiguous
        ASSERT_EQ(run.first, first);
        ASSERT_EQ(run.end, end);
      }
    }
  }
}

TEST(BwdSchedule, VisitingKeyBlocksMatchBruteForce) {
  check_visiting_runs<64, 128>(1);
  check_visiting_runs<128, 128>(2);
  check_visiting_runs<64, 64>(3);
  check_visiting_runs<80, 128>(4);
}

// The in-kernel dQ converter (dq_convert.hpp) finds a value's (row, col) as its thread's first
// coordinate plus thread 0's coordinate of that value: check that the dQ GEMM's layout is
// additive that way for every head dim's tiled MMA.
template <class T>
void check_dq_coordinates_additive() {
  using namespace cute;
  typename T::MmaDQ mma;
  const auto value_coords = mma.get_thread_slice(0).partition_C(make_identity_tensor(typename T::DqTile{}));
  for (int t = 0; t < T::kNumConsumerThreads; ++t) {
    const auto coords = mma.get_thread_slice(t).partition_C(make_identity_tensor(typename T::DqTile{}));
    for (int i = 0; i < T::kDqPerThread; ++i) {
      ASSERT_EQ(int(get<0>(coords(i))), int(get<0>(coords(0)) + get<0>(value_coords(i)))) << "thread " << t << " value " << i;
      ASSERT_EQ(int(get<1>(coords(i))), int(get<1>(coords(0)) + get<1>(value_coords(i)))) << "thread " << t << " value " << i;
    }
  }
}

TEST(BwdSchedule, DqCoordinatesAreAdditive) {
  using hopattn::kernels::bwd::DefaultBwdTraits;
  check_dq_coordinates_additive<DefaultBwdTraits<cutlass::bfloat16_t, 64>>();
  check_dq_coordinates_additive<DefaultBwdTraits<cutlass::bfloat16_t, 96>>();
  check_dq_coordinates_additive<DefaultBwdTraits<cutlass::bfloat16_t, 128>>();
  check_dq_coordinates_additive<DefaultBwdTraits<cutlass::half_t, 256>>();
}

}  // namespace
