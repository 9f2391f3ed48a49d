// Timing with CUDA events: warm-up launches, then one event pair around every timed launch,
// all enqueued back to back (one host synchronisation at the end); the result is the median.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace hopattn_bench {

struct TimingOptions {
  int warmup = 10;  // untimed launches first (clocks, caches, lazy module loading)
  int reps = 30;    // timed launches; the median is reported
  // Floors in time: at least this long of warm-up and of timed launches, counts grown from one
  // probe launch. Identical variants in one process read 2-7% apart at 30 reps of 10 ms (the
  // card ramps to its power limit over a second), 0.9% at 100 (H100, perf-log session 40).
  double min_warmup_ms = 300;
  double min_timed_ms = 500;
};

struct TimingResult {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  int reps = 0;
  int buffer_sets = 1;
};

// launch(i) enqueues the i-th call on stream; call i should use buffer set i % buffer_sets so
// that consecutive calls read inputs that are not in L2. The probe and warm-up calls are numbered
// first.
TimingResult time_launches(const std::function<void(int)>& launch, int buffer_sets,
                           const TimingOptions& opt, cudaStream_t stream);

}  // namespace hopattn_bench
