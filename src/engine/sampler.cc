#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

namespace icecache {

Status Sampler::Validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument("temperature must be >= 0");
  }
  if (p.top_k < 0) return InvalidArgument("top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument("top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgument("min-p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return InvalidArgument("repetition penalty must be > 0");
  }
  if (p.repetition_window < 0) return InvalidArgument("repetition window must be >= 0");
  return Status::Ok();
}

Result<Sampler> Sampler::Create(const SamplingParams& params) {
  ICECACHE_RETURN_IF_ERROR(Validate(params));
  return Sampler(params);
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (p_.repetition_penalty != 1.0f && !history.empty()) {
    const size_t from =
        p_.repetition_window == 0 || history.size() <= static_cast<size_t>(p_.repetition_window)
            ? 0
            : history.size() - p_.repetition_window;
    std::unordered_set<int32_t> seen(history.begin() + from, history.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= vocab) continue;
      float& l = logits[id];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  }
  if (p_.temperature <= 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  }

  cand_.clear();
  for (int32_t i = 0; i < vocab; ++i) {
    if (std::isfinite(logits[i])) cand_.emplace_back(logits[i] / p_.temperature, i);
  }
  if (cand_.empty()) return 0;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(keep);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the survivors.
  const float max_logit = cand_[0].first;
  double sum = 0;
  std::vector<double> prob(cand_.size());
  for (size_t i = 0; i < cand_.size(); ++i) {
    prob[i] = std::exp(static_cast<double>(cand_[i].first - max_logit));
    sum += prob[i];
  }
  for (double& v : prob) v /= sum;
  if (p_.top_p < 1.0f) {
    double acc = 0;
    size_t cut = prob.size();
    for (size_t i = 0; i < prob.size(); ++i) {
      acc += prob[i];
      if (acc >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    prob.resize(cut);
  }
  if (p_.min_p > 0.0f) {
    const double floor = p_.min_p * prob[0];
    size_t cut = 1;
    while (cut < prob.size() && prob[cut] >= floor) ++cut;
    prob.resize(cut);
  }
  double total = 0;
  for (double v : prob) total += v;
  std::uniform_real_distribution<double> dist(0.0, total);
  const double r = dist(rng_);
  double acc = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    acc += prob[i];
    if (r < acc) return cand_[i].second;
  }
  return cand_[prob.size() - 1].second;
}

}  // namespace icecache
