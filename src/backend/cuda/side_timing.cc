#include "backend/cuda/side_timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

namespace icecache::cuda {

namespace {

EventPtr TimingEvent() {
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return EventPtr();
  }
  return EventPtr(e);
}

float Median(std::vector<float> v) {
  if (v.empty()) return 0.0f;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

SideTiming::SideTiming(int slots) : marks_(static_cast<size_t>(slots)) {
  for (Marks& m : marks_) {
    m.begin = TimingEvent();
    m.side_end = TimingEvent();
    m.arrive = TimingEvent();
    m.resume = TimingEvent();
  }
}

SideTiming::~SideTiming() = default;

void SideTiming::Read(Marks& m) {
  if (m.stage == 4 && cudaEventSynchronize(m.resume.get()) == cudaSuccess) {
    float side = 0, arrive = 0, resume = 0;
    if (cudaEventElapsedTime(&side, m.begin.get(), m.side_end.get()) == cudaSuccess &&
        cudaEventElapsedTime(&arrive, m.begin.get(), m.arrive.get()) == cudaSuccess &&
        cudaEventElapsedTime(&resume, m.arrive.get(), m.resume.get()) == cudaSuccess) {
      side_ms_.push_back(side);
      arrive_ms_.push_back(arrive);
      wait_ms_.push_back(resume);
    }
  }
  cudaGetLastError();
  m.stage = 0;
}

void SideTiming::Begin(CUstream_st* main) {
  if (open_ >= 0 && marks_[static_cast<size_t>(open_)].stage == 2) {
    marks_[static_cast<size_t>(open_)].stage = 1;  // more side work before the same join
    return;
  }
  Marks& m = marks_[static_cast<size_t>(next_)];
  Read(m);
  open_ = -1;
  if (!m.begin || !m.side_end || !m.arrive || !m.resume) return;
  if (cudaEventRecord(m.begin.get(), main) != cudaSuccess) return;
  m.stage = 1;
  open_ = next_;
  next_ = (next_ + 1) % static_cast<int>(marks_.size());
}

void SideTiming::End(CUstream_st* side) {
  if (open_ < 0) return;
  Marks& m = marks_[static_cast<size_t>(open_)];
  if (m.stage == 1 && cudaEventRecord(m.side_end.get(), side) == cudaSuccess) m.stage = 2;
}

void SideTiming::Arrive(CUstream_st* main) {
  if (open_ < 0) return;
  Marks& m = marks_[static_cast<size_t>(open_)];
  if (m.stage == 2 && cudaEventRecord(m.arrive.get(), main) == cudaSuccess) m.stage = 3;
}

void SideTiming::Resume(CUstream_st* main) {
  if (open_ < 0) return;
  Marks& m = marks_[static_cast<size_t>(open_)];
  if (m.stage == 3 && cudaEventRecord(m.resume.get(), main) == cudaSuccess) m.stage = 4;
  open_ = -1;
}

void SideTiming::Report() {
  for (Marks& m : marks_) Read(m);
  std::fprintf(stderr,
               "[cuda] side work: %zu stretches; medians from each begin: side work done at "
               "%.3f ms, main stream at the join at %.3f ms, waited there %.3f ms\n",
               side_ms_.size(), Median(side_ms_), Median(arrive_ms_), Median(wait_ms_));
}

}  // namespace icecache::cuda
