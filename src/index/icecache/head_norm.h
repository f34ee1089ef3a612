// Per-head softmax normalizers for icecache's mass-scored search (--kv-search-score mass).
//
// A token's share of the attention mass of query head g is exp(s q_g.k - lse_g), s = 1 /
// sqrt(dim) and lse_g the log-sum-exp of head g's logits over the whole list. Ranking by q.k
// alone favours the heads whose logits run high; subtracting each head's lse / s from its q.k
// (TreeQuery::shift) ranks by mass instead, which is what attention-mass recall counts.
// The exact lse needs every key, so the search estimates it: the exact log-sum-exp over the
// sink and window (always attended) with this step's query, plus the log of how much the pages
// the list's previous search picked added on top of them (the "gain", measured with that
// step's query after its search). Scoring the ~budget keys of a selection once per step costs
// far less than a second search.
#pragma once

#include <vector>

#include "index/icecache/tree_search.h"

namespace icecache::ice {

// Running log-sum-exp of q_g.k over keys, per query head of a group, in q.k units.
class HeadLse {
 public:
  void Reset(int group);
  // Adds `n` keys ([n][dim]) for every head of `query` (its shift is not applied).
  void Add(const TreeQuery& query, const float* keys, int n);
  bool empty(int g) const { return sum_[g] <= 0; }
  // log sum_t exp(s q_g.k_t) / s; REQUIRES: !empty(g).
  float LogZ(int g, int dim) const;

 private:
  std::vector<float> max_, sum_;  // sum_ of exp(s (q.k - max_))
};

// log(exp(s a) + exp(s b)) / s, for values in q.k units.
float LogAddExp(float a, float b, int dim);

}  // namespace icecache::ice
