#include "index/icecache/head_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "index/icecache/mips.h"

namespace icecache::ice {

void HeadLse::Reset(int group) {
  max_.assign(group, -std::numeric_limits<float>::infinity());
  sum_.assign(group, 0.0f);
}

void HeadLse::Add(const TreeQuery& query, const float* keys, int n) {
  const float s = 1.0f / std::sqrt(static_cast<float>(query.dim));
  for (int t = 0; t < n; ++t) {
    const float* k = keys + static_cast<size_t>(t) * query.dim;
    for (int g = 0; g < query.group; ++g) {
      const float d = DotF(query.q + static_cast<size_t>(g) * query.dim, k, query.dim);
      if (d > max_[g]) {
        sum_[g] *= std::exp(s * (max_[g] - d));  // 0 while max_ is still -inf
        max_[g] = d;
      }
      sum_[g] += std::exp(s * (d - max_[g]));
    }
  }
}

float HeadLse::LogZ(int g, int dim) const {
  return max_[g] + std::log(sum_[g]) * std::sqrt(static_cast<float>(dim));
}

float LogAddExp(float a, float b, int dim) {
  const float r = std::sqrt(static_cast<float>(dim));  // 1 / s
  const float hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp((lo - hi) / r)) * r;
}

}  // namespace icecache::ice
