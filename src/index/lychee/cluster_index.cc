#include "index/lychee/cluster_index.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "index/lychee/kmeans.h"
#include "index/lychee/vec_math.h"

namespace icecache::lychee {

int32_t ClusterIndex::AddChunk(const float* keys, int n, int pages) {
  ICECACHE_CHECK(n >= 1 && pages >= 1 && dim_ > 0);
  const size_t at = chunk_centroid_.size();
  chunk_centroid_.resize(at + dim_, 0.0f);
  float* c = chunk_centroid_.data() + at;
  std::vector<double> sum(dim_, 0.0);
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < dim_; ++j) sum[j] += keys[static_cast<size_t>(t) * dim_ + j];
  }
  for (int j = 0; j < dim_; ++j) c[j] = static_cast<float>(sum[j] / n);
  float r2 = -1;
  int far = 0;
  for (int t = 0; t < n; ++t) {
    const float d2 = SqDist(keys + static_cast<size_t>(t) * dim_, c, dim_);
    if (d2 > r2) r2 = d2, far = t;
  }
  if (spread_stats_) {
    std::vector<double> var(dim_, 0.0);
    for (int t = 0; t < n; ++t) {
      const float* k = keys + static_cast<size_t>(t) * dim_;
      for (int j = 0; j < dim_; ++j) var[j] += (static_cast<double>(k[j]) - c[j]) * (k[j] - c[j]);
    }
    for (int j = 0; j < dim_; ++j) chunk_variance_.push_back(static_cast<float>(var[j] / n));
    chunk_far_.insert(chunk_far_.end(), keys + static_cast<size_t>(far) * dim_,
                      keys + static_cast<size_t>(far + 1) * dim_);
  }
  chunk_radius_.push_back(PadRadius(std::sqrt(r2), Norm(c, dim_)));
  chunk_tokens_.push_back(n);
  chunk_pages_.push_back(pages);
  chunk_cluster_.push_back(-1);
  chunk_sq_norm_.push_back(static_cast<double>(DotF(c, c, dim_)));
  return static_cast<int32_t>(chunk_radius_.size() - 1);
}

namespace {

// Appends to node `id` of `level` (whose centroid is in place) what the keys of `chunks` say
// about it: the radius (largest |k - c|, padded for rounding) and, with `stats`, the farthest
// key, the per-dimension sums and the variance about c.
void Summarize(const KeyTable& keys, const std::vector<int32_t>& chunks, int dim, bool stats,
               ClusterIndex::Level* level, int32_t id) {
  const float* c = level->c(id, dim);
  const size_t at = static_cast<size_t>(id) * dim;
  double* s1 = nullptr;
  double* s2 = nullptr;
  if (stats) {
    level->sum.resize(at + dim, 0.0);
    level->sum_sq.resize(at + dim, 0.0);
    s1 = level->sum.data() + at;
    s2 = level->sum_sq.data() + at;
  }
  float r2 = 0;
  const float* far = c;
  int64_t n = 0;
  for (int32_t ch : chunks) {
    for (int64_t row = keys.offsets[ch]; row < keys.offsets[ch + 1]; ++row, ++n) {
      const float* k = keys.keys + row * dim;
      const float d2 = SqDist(k, c, dim);
      if (d2 > r2) r2 = d2, far = k;
      if (!stats) continue;
      for (int j = 0; j < dim; ++j) {
        s1[j] += k[j];
        s2[j] += static_cast<double>(k[j]) * k[j];
      }
    }
  }
  level->radius.push_back(PadRadius(std::sqrt(r2), Norm(c, dim)));
  if (!stats) return;
  level->far.insert(level->far.end(), far, far + dim);
  level->variance.resize(at + dim, 0.0f);
  if (n > 0) VarianceAbout(s1, s2, n, c, dim, level->variance.data() + at);
}

}  // namespace

void ClusterIndex::Build(const KeyTable& all, uint64_t seed) {
  const int32_t n = chunks();
  ICECACHE_CHECK(n >= 1 && static_cast<int32_t>(all.offsets.size()) == n + 1);
  coarse_ = Level();
  fine_ = Level();
  fine_parent_.clear();
  fine_sum_sq_.clear();

  // Coarse units: k-means over all chunk keys.
  const int per_coarse = kChunksPerCluster * kClustersPerCoarse;
  const int n_coarse = std::clamp((n + per_coarse - 1) / per_coarse, 1, kMaxCoarse);
  KMeansResult top = KMeans(chunk_centroid_.data(), n, dim_, n_coarse, kKMeansIters, seed);
  std::vector<std::vector<int32_t>> members(top.k);
  for (int32_t i = 0; i < n; ++i) members[top.assign[i]].push_back(i);

  std::vector<float> points;
  for (int u = 0; u < top.k; ++u) {
    const std::vector<int32_t>& m = members[u];
    const int32_t cu = coarse_.size();
    coarse_.centroid.insert(coarse_.centroid.end(),
                            top.centroids.begin() + static_cast<size_t>(u) * dim_,
                            top.centroids.begin() + static_cast<size_t>(u + 1) * dim_);
    Summarize(all, m, dim_, spread_stats_, &coarse_, cu);
    coarse_.count.push_back(static_cast<int32_t>(m.size()));
    int32_t unit_keys = 0;
    for (int32_t c : m) unit_keys += chunk_tokens_[c];
    coarse_.keys.push_back(unit_keys);
    coarse_.children.emplace_back();
    // Fine clusters of this unit: k-means over its chunks.
    points.resize(m.size() * dim_);
    for (size_t i = 0; i < m.size(); ++i) {
      std::copy_n(chunk_centroid(m[i]), dim_, points.data() + i * dim_);
    }
    const int k = static_cast<int>((m.size() + kChunksPerCluster - 1) / kChunksPerCluster);
    KMeansResult sub = KMeans(points.data(), static_cast<int>(m.size()), dim_, k, kKMeansIters,
                              seed ^ (0x9e3779b97f4a7c15ull * (u + 1)));
    const int32_t first_fine = fine_.size();
    for (int f = 0; f < sub.k; ++f) {
      fine_.centroid.insert(fine_.centroid.end(),
                            sub.centroids.begin() + static_cast<size_t>(f) * dim_,
                            sub.centroids.begin() + static_cast<size_t>(f + 1) * dim_);
      fine_.children.emplace_back();
      fine_parent_.push_back(cu);
      coarse_.children[cu].push_back(first_fine + f);
    }
    for (size_t i = 0; i < m.size(); ++i) {
      const int32_t f = first_fine + sub.assign[i];
      fine_.children[f].push_back(m[i]);
      chunk_cluster_[m[i]] = f;
    }
    for (int f = 0; f < sub.k; ++f) {
      const int32_t id = first_fine + f;
      const std::vector<int32_t>& ch = fine_.children[id];
      Summarize(all, ch, dim_, spread_stats_, &fine_, id);
      fine_.count.push_back(static_cast<int32_t>(ch.size()));
      int32_t cluster_keys = 0;
      for (int32_t c : ch) cluster_keys += chunk_tokens_[c];
      fine_.keys.push_back(cluster_keys);
      double sq = 0;
      for (int32_t c : ch) sq += chunk_sq_norm_[c];
      fine_sum_sq_.push_back(sq);
    }
  }
  built_chunks_ = n;
  clustered_ = n;
  ++builds_;
  ResetDriftBaseline();
}

int64_t ClusterIndex::MemoryBytes() const {
  auto level = [](const Level& l) {
    int64_t b = static_cast<int64_t>(l.centroid.size() + l.variance.size() + l.far.size()) * 4 +
                static_cast<int64_t>(l.sum.size() + l.sum_sq.size()) * 8 + l.size() * 12;
    for (const auto& c : l.children) b += static_cast<int64_t>(c.capacity()) * 4 + 24;
    return b;
  };
  return static_cast<int64_t>(chunk_centroid_.size() + chunk_variance_.size() + chunk_far_.size()) *
             4 +
         chunks() * (4 + 4 + 4 + 4 + 8) + level(coarse_) + level(fine_) +
         static_cast<int64_t>(fine_parent_.size()) * 4 +
         static_cast<int64_t>(fine_sum_sq_.size()) * 8;
}

}  // namespace icecache::lychee
