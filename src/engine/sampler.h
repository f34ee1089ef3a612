// Turns a row of logits into the next token: repetition penalty, temperature, top-k, top-p,
// min-p (in the order transformers applies them), then a seeded draw; greedy when temperature
// is zero.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "icecache/sampling.h"
#include "icecache/status.h"

namespace icecache {

class Sampler {
 public:
  // Fails on out-of-range parameters with a message naming the parameter.
  static Result<Sampler> Create(const SamplingParams& params);
  static Status Validate(const SamplingParams& params);

  // Picks a token from `logits` (modified in place). `history` is the sequence so far (prompt
  // and generated tokens), used by the repetition penalty.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch
};

}  // namespace icecache
