// The 3-level lychee index of one (layer, KV head): chunks (the leaves) grouped into fine
// clusters, fine clusters grouped into at most kMaxCoarse coarse units. Every node keeps a
// centroid c and a radius r with |k - c| <= r for every key k below it (all keys, not only the
// chunk means), so for any query q and any such key: q.k = q.c + q.(k - c) <= q.c + |q| r.
// With spread statistics (for the spread-ordered search, search.h; lychee's --kv-rank spread)
// every node also keeps the per-dimension variance of its keys about c and its farthest key (the
// one that set the radius, as far as lazy inserts know); without, those arrays stay empty.
//
// Built top-down by k-means over chunk keys (the mean of each chunk's keys): the chunks are
// split into coarse units, then each unit's chunks into fine clusters of about
// kChunksPerCluster chunks. Later chunks join their nearest fine cluster (lazy_update.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace icecache::lychee {

// Keys of a set of chunks: the rows of chunk i are keys[offsets[i] .. offsets[i + 1]) of
// [rows][dim] f32.
struct KeyTable {
  const float* keys = nullptr;
  std::span<const int64_t> offsets;  // chunks + 1 entries
};

class ClusterIndex {
 public:
  static constexpr int kMaxCoarse = 64;
  static constexpr int kChunksPerCluster = 8;
  static constexpr int kClustersPerCoarse = 4;
  static constexpr int kKMeansIters = 8;

  explicit ClusterIndex(int dim = 0, bool spread_stats = false)
      : dim_(dim), spread_stats_(spread_stats) {}
  bool spread_stats() const { return spread_stats_; }

  // Records a chunk from its keys ([n][dim], n >= 1) with `pages` pages: its mean and radius.
  // It is not in any cluster until Build or Insert. Returns its id (0, 1, ...).
  int32_t AddChunk(const float* keys, int n, int pages);

  // Clusters every chunk anew. `all` holds the keys of chunks 0 .. chunks() - 1.
  void Build(const KeyTable& all, uint64_t seed);
  // Puts chunk `id` (added after the last Build; `keys` are its rows) in its nearest fine
  // cluster: that cluster's centroid and its coarse unit's centroid move by a running mean and
  // their radii grow to cover the new keys. REQUIRES: built().
  void Insert(int32_t id, const float* keys, int n);

  // Drift since the last Build: the larger of (mean squared distance of chunk keys to their
  // cluster centroid) / (the same at build time) and (mean member radius of fine clusters) /
  // (the same at build time). 1 right after a Build.
  double Drift() const;
  // Whether a rebuild is due: chunks grew kRebuildGrowth-fold since the last build, or the
  // drift passed kDriftLimit.
  bool NeedsRebuild() const;

  bool built() const { return built_chunks_ > 0; }
  // Every chunk is in a cluster (true after Build and the Inserts of the chunks added since).
  bool complete() const { return clustered_ == chunks(); }
  int dim() const { return dim_; }
  int32_t chunks() const { return static_cast<int32_t>(chunk_radius_.size()); }
  int32_t built_chunks() const { return built_chunks_; }
  int64_t rebuilds() const { return builds_; }
  int64_t MemoryBytes() const;

  // Read access for the search and the tests.
  struct Level {
    std::vector<float> centroid;  // [nodes][dim]
    std::vector<float> radius;
    std::vector<float> variance;      // [nodes][dim]: mean of (k_j - c_j)^2 over the keys below
    std::vector<float> far;           // [nodes][dim]: the farthest key from c seen
    std::vector<double> sum, sum_sq;  // [nodes][dim]: sums of k_j and k_j^2 over the keys below
    std::vector<std::vector<int32_t>> children;  // fine clusters (coarse) or chunks (fine)
    std::vector<int32_t> count;                  // chunks below
    std::vector<int32_t> keys;                   // keys below
    int32_t size() const { return static_cast<int32_t>(radius.size()); }
    const float* c(int32_t i, int dim) const {
      return centroid.data() + static_cast<size_t>(i) * dim;
    }
    const float* v(int32_t i, int dim) const {
      return variance.data() + static_cast<size_t>(i) * dim;
    }
    const float* f(int32_t i, int dim) const { return far.data() + static_cast<size_t>(i) * dim; }
  };
  const Level& coarse() const { return coarse_; }
  const Level& fine() const { return fine_; }
  const float* chunk_centroid(int32_t i) const {
    return chunk_centroid_.data() + static_cast<size_t>(i) * dim_;
  }
  float chunk_radius(int32_t i) const { return chunk_radius_[i]; }
  const float* chunk_variance(int32_t i) const {
    return chunk_variance_.data() + static_cast<size_t>(i) * dim_;
  }
  const float* chunk_far(int32_t i) const {
    return chunk_far_.data() + static_cast<size_t>(i) * dim_;
  }
  int32_t chunk_tokens(int32_t i) const { return chunk_tokens_[i]; }
  int32_t chunk_pages(int32_t i) const { return chunk_pages_[i]; }
  int32_t chunk_cluster(int32_t i) const { return chunk_cluster_[i]; }
  int32_t fine_parent(int32_t f) const { return fine_parent_[f]; }

  // The drift limit: re-cluster when clusters have grown this much looser than at build time.
  // Lazy insertion keeps every bound valid but lets clusters loosen as the context moves away
  // from what they were built on (new topics, generated text); looser clusters mean looser
  // bounds, more nodes visited and less coherent clusters. 1.5 re-clusters a head once its mean
  // squared member distance or its mean radius is half again what it was after the build.
  static constexpr double kDriftLimit = 1.5;
  // Re-cluster when the chunk count doubles (prefill appends most of a long prompt after the
  // first build; doubling keeps the total k-means work within a constant factor of one build).
  static constexpr double kRebuildGrowth = 2.0;

 private:
  void ResetDriftBaseline();
  double MeanSquaredDistance() const;
  double MeanRadius() const;

  int dim_;
  bool spread_stats_;
  // Chunks.
  std::vector<float> chunk_centroid_;
  std::vector<float> chunk_radius_;
  std::vector<float> chunk_variance_;  // [chunks][dim]
  std::vector<float> chunk_far_;       // [chunks][dim]
  std::vector<int32_t> chunk_tokens_;
  std::vector<int32_t> chunk_pages_;
  std::vector<int32_t> chunk_cluster_;  // fine cluster, -1 before clustering
  std::vector<double> chunk_sq_norm_;   // |chunk key|^2
  // Levels.
  Level coarse_, fine_;
  std::vector<int32_t> fine_parent_;
  std::vector<double> fine_sum_sq_;  // sum of |chunk key|^2 over each fine cluster's chunks
  // Drift baseline.
  int32_t built_chunks_ = 0;
  int32_t clustered_ = 0;
  int64_t builds_ = 0;
  double msd_at_build_ = 0;
  double radius_at_build_ = 0;
};

}  // namespace icecache::lychee
