// Synthetic keys with topic structure, for selection cost far past what a model run can record:
// a few hundred topic centres in R^d; the context is a sequence of segments, each on a topic drawn
// at random (topics recur all through the context, as in long text); a key is its segment's
// centre plus Gaussian noise. Queries are drawn near the centre of a topic the context holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/split_mix.h"

namespace icecache::bench {

// Deterministic and seedable per item.
using Rng = SplitMixRng;

struct SyntheticSpec {
  int dim = 64;
  int topics = 256;
  int segment = 64;           // tokens per topic segment
  float centre_scale = 1.0f;  // per-dimension std of the centres
  float key_noise = 0.5f;     // per-dimension std of a key around its centre
  float query_noise = 0.3f;   // per-dimension std of a query around its centre
  uint64_t seed = 42;
};

class SyntheticKeys {
 public:
  explicit SyntheticKeys(const SyntheticSpec& s) : s_(s) {
    Rng rng(s.seed);
    centres_.resize(static_cast<size_t>(s.topics) * s.dim);
    for (float& x : centres_) x = s.centre_scale * rng.Normal();
  }
  int dim() const { return s_.dim; }
  int Topic(int64_t pos) const {
    Rng rng(s_.seed * 7919 + static_cast<uint64_t>(pos / s_.segment));
    return static_cast<int>(rng.Next() % static_cast<uint64_t>(s_.topics));
  }
  void Key(int64_t pos, float* k) const {
    const float* c = &centres_[static_cast<size_t>(Topic(pos)) * s_.dim];
    Rng rng(s_.seed ^ (static_cast<uint64_t>(pos) * kSplitMixGamma + 1));
    for (int j = 0; j < s_.dim; ++j) k[j] = c[j] + s_.key_noise * rng.Normal();
  }
  // The query of the token at `pos` (> 0): near the centre of the topic of a random earlier
  // token (a query about something the context holds, as decode queries mostly are).
  void Query(int64_t pos, float* q) const {
    Rng rng(s_.seed * 31 + 1000003ull * static_cast<uint64_t>(pos) + 17);
    const int64_t earlier = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(pos));
    const float* c = &centres_[static_cast<size_t>(Topic(earlier)) * s_.dim];
    for (int j = 0; j < s_.dim; ++j) q[j] = c[j] + s_.query_noise * rng.Normal();
  }

 private:
  SyntheticSpec s_;
  std::vector<float> centres_;
};

}  // namespace icecache::bench
