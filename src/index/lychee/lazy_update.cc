// Lazy update of the lychee index: a new chunk joins its nearest fine cluster without
// re-clustering anything; drift tracking says when the clusters have loosened enough that a
// rebuild is worth it.
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "index/lychee/cluster_index.h"
#include "index/lychee/vec_math.h"

namespace icecache::lychee {

namespace {

// Moves the centroid of a node with `count` chunks (before the new one) toward `x` by a running
// mean and grows its radius so that it still bounds the old keys (which are at most the shift
// further away from the new centroid) and covers the new keys. Radii never shrink. With `stats`,
// the sums take in the new keys, the variance is recomputed about the moved centroid, and a new
// key farther from it than the kept farthest key replaces that.
void Absorb(ClusterIndex::Level* level, int32_t node, int dim, bool stats, const float* x,
            const float* keys, int n) {
  const size_t at = static_cast<size_t>(node) * dim;
  float* c = level->centroid.data() + at;
  const int32_t count = level->count[node];
  float shift2 = 0;
  for (int j = 0; j < dim; ++j) {
    const float old = c[j];
    c[j] = old + (x[j] - old) / static_cast<float>(count + 1);
    shift2 += (c[j] - old) * (c[j] - old);
  }
  const float cn = Norm(c, dim);
  float r = level->radius[node] + std::sqrt(shift2) * (1.0f + 1e-5f) + 1e-6f * cn;
  float far = 0;
  const float* farthest = nullptr;
  for (int t = 0; t < n; ++t) {
    const float d2 = SqDist(keys + static_cast<size_t>(t) * dim, c, dim);
    if (d2 > far) far = d2, farthest = keys + static_cast<size_t>(t) * dim;
  }
  r = std::max(r, PadRadius(std::sqrt(far), cn));
  level->radius[node] = r;
  level->count[node] = count + 1;
  level->keys[node] += n;
  if (!stats) return;
  double* s1 = level->sum.data() + at;
  double* s2 = level->sum_sq.data() + at;
  for (int t = 0; t < n; ++t) {
    const float* k = keys + static_cast<size_t>(t) * dim;
    for (int j = 0; j < dim; ++j) {
      s1[j] += k[j];
      s2[j] += static_cast<double>(k[j]) * k[j];
    }
  }
  float* far_key = level->far.data() + at;
  if (farthest != nullptr && far > SqDist(far_key, c, dim)) std::copy_n(farthest, dim, far_key);
  VarianceAbout(s1, s2, level->keys[node], c, dim, level->variance.data() + at);
}

}  // namespace

void ClusterIndex::Insert(int32_t id, const float* keys, int n) {
  ICECACHE_CHECK(built() && id >= 0 && id < chunks() && chunk_cluster_[id] < 0);
  const float* x = chunk_centroid(id);
  int32_t best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int32_t f = 0; f < fine_.size(); ++f) {
    const float d = SqDist(x, fine_.c(f, dim_), dim_);
    if (d < best_d) {
      best_d = d;
      best = f;
    }
  }
  const int32_t u = fine_parent_[best];
  Absorb(&fine_, best, dim_, spread_stats_, x, keys, n);
  Absorb(&coarse_, u, dim_, spread_stats_, x, keys, n);
  fine_.children[best].push_back(id);
  fine_sum_sq_[best] += chunk_sq_norm_[id];
  chunk_cluster_[id] = best;
  ++clustered_;
}

double ClusterIndex::MeanSquaredDistance() const {
  double inertia = 0;
  int64_t n = 0;
  for (int32_t f = 0; f < fine_.size(); ++f) {
    const float* c = fine_.c(f, dim_);
    const double c2 = static_cast<double>(DotF(c, c, dim_));
    inertia += std::max(0.0, fine_sum_sq_[f] - fine_.count[f] * c2);
    n += fine_.count[f];
  }
  return n > 0 ? inertia / static_cast<double>(n) : 0.0;
}

double ClusterIndex::MeanRadius() const {
  double sum = 0;
  int64_t n = 0;
  for (int32_t f = 0; f < fine_.size(); ++f) {
    sum += static_cast<double>(fine_.radius[f]) * fine_.count[f];
    n += fine_.count[f];
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

void ClusterIndex::ResetDriftBaseline() {
  msd_at_build_ = MeanSquaredDistance();
  radius_at_build_ = MeanRadius();
}

double ClusterIndex::Drift() const {
  if (!built()) return 1.0;
  auto ratio = [](double now, double base) {
    if (base > 0) return now / base;
    return now > 0 ? std::numeric_limits<double>::infinity() : 1.0;
  };
  return std::max(ratio(MeanSquaredDistance(), msd_at_build_),
                  ratio(MeanRadius(), radius_at_build_));
}

bool ClusterIndex::NeedsRebuild() const {
  if (!built()) return chunks() > 0;
  return chunks() >= kRebuildGrowth * built_chunks_ || Drift() > kDriftLimit;
}

}  // namespace icecache::lychee
