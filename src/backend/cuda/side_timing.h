// Timing of side work against the main work beside it (ICECACHE_CUDA_SIDE_TIMING=1; for A/B runs,
// docs/PERF.md): each stretch of side work, from BeginSideWork to the JoinSideWork that orders
// the main stream after it, gets four timing events: the main stream at the begin, the side
// stream at its end, the main stream reaching the join, and the main stream going on after it.
// Stretches queued before one join count as one, from the first begin to the last end. Read
// lazily (a ring of stretches; a slot is read before it is reused) and summarized, as
// medians, when the backend goes.
#pragma once

#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace icecache::cuda {

class SideTiming {
 public:
  // Events for `slots` stretches; a stretch whose slot cannot be read is skipped.
  explicit SideTiming(int slots = 256);
  SideTiming(const SideTiming&) = delete;
  SideTiming& operator=(const SideTiming&) = delete;
  ~SideTiming();

  void Begin(CUstream_st* main);
  void End(CUstream_st* side);
  void Arrive(CUstream_st* main);  // before the main stream waits for the side work
  void Resume(CUstream_st* main);  // after it
  // Medians over the stretches read so far, one line on stderr.
  void Report();

 private:
  struct Marks {
    EventPtr begin, side_end, arrive, resume;
    int stage = 0;  // 0 free, 1 begun, 2 ended, 3 arrived, 4 resumed (to read)
  };
  void Read(Marks& m);

  std::vector<Marks> marks_;
  int next_ = 0;
  int open_ = -1;  // the stretch under way
  std::vector<float> side_ms_, arrive_ms_, wait_ms_;
};

}  // namespace icecache::cuda
