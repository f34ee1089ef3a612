// The numbers behind the fidelity task, kept apart so that tests can check them on known
// distributions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace icecache::eval {

// KL(p || q) in nats from two log-softmax vectors of equal size (p is the reference).
double KlDivergence(std::span<const float> p_logprobs, std::span<const float> q_logprobs);

// Index of the first position where the two token lists differ (the shorter length if one is a
// prefix of the other).
size_t FirstDivergence(std::span<const int32_t> a, std::span<const int32_t> b);

// Mean negative log-likelihood of the true tokens (their log-probabilities); 0 if empty.
double MeanNll(std::span<const float> token_logprobs);

}  // namespace icecache::eval
