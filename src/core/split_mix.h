// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit mixing function and the counter-based stream
// built on it. The host's one seedable pseudo-random source for fixtures, k-means seeding, tests
// and the benchmarks' synthetic data. Test fixtures depend on these exact sequences: keep the
// constants and the order of operations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace icecache {

inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;

// The stream's output for state `x`: x + gamma, mixed.
constexpr uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + kSplitMixGamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stream itself: Next() returns SplitMix64(state) and advances state by gamma.
class SplitMixRng {
 public:
  explicit SplitMixRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    const uint64_t out = SplitMix64(state_);
    state_ += kSplitMixGamma;
    return out;
  }
  // Uniform in [0, 1): 24 bits (exact in f32) or 53 bits (exact in f64).
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1p-53; }
  // Standard normal by Box-Muller (one of the pair), from two Uniform() draws.
  float Normal() {
    const float u = std::max(Uniform(), 1e-7f), v = Uniform();
    return std::sqrt(-2.0f * std::log(u)) * std::cos(6.2831853f * v);
  }
  // In [0, n) by modulo (the small bias is irrelevant to the tests and benchmarks using it).
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

}  // namespace icecache
