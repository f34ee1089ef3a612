// The inner-product to nearest-neighbour transform of the icecache tree.
//
// A key k becomes k' = [k ; e(k)] with e(k) = sqrt(M - |k|^2), where M bounds every |k|^2 of
// the (layer, KV head) (the running maximum); a query q becomes q' = [q ; 0]. Then every k' has
// norm sqrt(M) and |q' - k'|^2 = |q|^2 + M - 2 q.k, so the nearest k' is the key of largest
// q.k: grouping keys by distance in k' space groups keys that score alike for every query.
//
// The tree stores only the first d coordinates of each centroid plus the mean extra coordinate
// of the keys below it (`ext`); when M grows the caller recomputes those means from the keys
// (leaves) and the children (inner nodes), so they are always exact for the current M.
#pragma once

#include <algorithm>
#include <cmath>

#include "index/lychee/vec_math.h"

namespace icecache::ice {

using lychee::DotF;
using lychee::Norm;
using lychee::SqDist;

// e(k) for a key of squared norm `sq_norm` under the bound `max_sq_norm` (>= sq_norm).
inline float ExtraCoord(float max_sq_norm, float sq_norm) {
  return std::sqrt(std::max(0.0f, max_sq_norm - sq_norm));
}

// |a' - b'|^2 for a' = [a ; ea], b' = [b ; eb].
inline float LiftedSqDist(const float* a, float ea, const float* b, float eb, int dim) {
  const float de = ea - eb;
  return SqDist(a, b, dim) + de * de;
}

// LiftedSqDist(a, ea, b[r], eb[r], dim) for four rows at once, bit for bit (lychee::SqDist4).
inline void LiftedSqDist4(const float* a, float ea, const float* const b[4], const float eb[4],
                          int dim, float out[4]) {
  lychee::SqDist4(a, b, dim, out);
  for (int r = 0; r < 4; ++r) {
    const float de = ea - eb[r];
    out[r] = out[r] + de * de;
  }
}

// Radii are computed in f32 and the search compares f32 dot products: a slack relative to the
// magnitudes involved covers the rounding of q.c, q.k and |q| r (about 1e-6 of |q| (|c| + r) at
// head_dim 128, with DotF's eight partial sums), so that a stored radius bounds its members and
// a parent's bound is never below a child's as the search computes them.
inline float Slack(float magnitude) { return 2e-5f * magnitude; }

}  // namespace icecache::ice
