#include "eval/fidelity_metrics.h"

#include <algorithm>
#include <cmath>

namespace icecache::eval {

double KlDivergence(std::span<const float> p_logprobs, std::span<const float> q_logprobs) {
  const size_t n = std::min(p_logprobs.size(), q_logprobs.size());
  double kl = 0;
  for (size_t v = 0; v < n; ++v) {
    const double lp = p_logprobs[v];
    if (lp < -80) continue;  // exp(lp) underflows: this token carries no mass under p
    kl += std::exp(lp) * (lp - static_cast<double>(q_logprobs[v]));
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative value
}

size_t FirstDivergence(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

double MeanNll(std::span<const float> token_logprobs) {
  if (token_logprobs.empty()) return 0;
  double s = 0;
  for (float lp : token_logprobs) s -= lp;
  return s / static_cast<double>(token_logprobs.size());
}

}  // namespace icecache::eval
