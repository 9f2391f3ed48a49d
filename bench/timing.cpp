#include "timing.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_util.hpp"

namespace hopattn_bench {

namespace {

// Owns cudaEvent_t handles.
class EventPool {
 public:
  explicit EventPool(int n) : events_(static_cast<size_t>(n), nullptr) {
    for (cudaEvent_t& e : events_) BENCH_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventPool() {
    for (cudaEvent_t e : events_)
      if (e != nullptr) cudaEventDestroy(e);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t operator[](int i) const { return events_[static_cast<size_t>(i)]; }

 private:
  std::vector<cudaEvent_t> events_;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Launch counts that fill `ms` at `launch_ms` each, at least `floor`, at most kMaxLaunches.
int count_for(double ms, double launch_ms, int floor) {
  constexpr int kMaxLaunches = 20000;
  const double n = launch_ms > 0 ? ms / launch_ms : 0.0;
  return std::max(floor, static_cast<int>(std::min<double>(std::ceil(n), kMaxLaunches)));
}

}  // namespace

TimingResult time_launches(const std::function<void(int)>& launch, int buffer_sets,
                           const TimingOptions& opt, cudaStream_t stream) {
  // One probe launch, timed alone, sizes the warm-up and the timed launches.
  float probe_ms = 0;
  {
    EventPool probe(2);
    BENCH_CUDA_CHECK(cudaEventRecord(probe[0], stream));
    launch(0);
    BENCH_CUDA_CHECK(cudaEventRecord(probe[1], stream));
    BENCH_CUDA_CHECK(cudaEventSynchronize(probe[1]));
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&probe_ms, probe[0], probe[1]));
  }
  const int warmup = count_for(opt.min_warmup_ms, probe_ms, opt.warmup);
  const int reps = count_for(opt.min_timed_ms, probe_ms, std::max(1, opt.reps));
  for (int i = 0; i < warmup; ++i) launch(1 + i);
  BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));

  EventPool start(reps), stop(reps);
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA_CHECK(cudaEventRecord(start[r], stream));
    launch(1 + warmup + r);
    BENCH_CUDA_CHECK(cudaEventRecord(stop[r], stream));
  }
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop[reps - 1]));
  BENCH_CUDA_CHECK(cudaGetLastError());

  std::vector<double> ms(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&t, start[r], stop[r]));
    ms[static_cast<size_t>(r)] = t;
  }
  TimingResult res;
  res.median_ms = median_of(ms);
  res.min_ms = *std::min_element(ms.begin(), ms.end());
  res.max_ms = *std::max_element(ms.begin(), ms.end());
  res.reps = reps;
  res.buffer_sets = buffer_sets;
  return res;
}

}  // namespace hopattn_bench
