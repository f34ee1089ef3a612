// Backend::RouteKeys on the CPU: the reference for the CUDA kernel (same distances, operation
// for operation, and the same tie rule), key by key on the calling thread.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/quant.h"

namespace icecache::cpu {

void RouteKeysCpu(const KeyRouteArgs& a) {
  const int d = a.pool.head_dim;
  const int64_t n = a.slots.numel(), rows = a.list_rows.dim(0), stride = a.list_rows.dim(1);
  const int64_t summaries = a.bounds.dim(0), row_bytes = RowBytes(a.bounds.dtype(), d);
  const int64_t key_bytes = RowBytes(a.pool.dtype, d);  // a stored key, read as f32
  const int32_t* slots = a.slots.data_as<const int32_t>();
  const int32_t* ranges = a.ranges.data_as<const int32_t>();
  const int32_t* list_rows = a.list_rows.data_as<const int32_t>();
  const char* bounds = static_cast<const char*>(a.bounds.data());
  int32_t* out = a.out.data_as<int32_t>();
  std::vector<float> keys, best_dist, mean(d);
  // Runs of consecutive keys with the same range (a page's keys) read each mean key once.
  for (int64_t i0 = 0; i0 < n;) {
    const int32_t row = ranges[3 * i0], first = ranges[3 * i0 + 1], end = ranges[3 * i0 + 2];
    ICECACHE_CHECK(row >= 0 && row < rows && first >= 0 && end <= stride);
    int64_t i1 = i0 + 1;
    while (i1 < n && ranges[3 * i1] == row && ranges[3 * i1 + 1] == first &&
           ranges[3 * i1 + 2] == end) {
      ++i1;
    }
    const int64_t m = i1 - i0;
    keys.resize(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t slot = slots[i0 + i];
      ICECACHE_CHECK(slot >= 0 && slot < a.pool.num_pages * a.pool.page_size);
      DequantizeRow(a.pool.dtype, static_cast<const char*>(a.pool.k) + slot * key_bytes,
                    keys.data() + i * d, d);
      out[i0 + i] = -1;
    }
    best_dist.assign(static_cast<size_t>(m), 0.0f);
    for (int32_t e = first; e < end; ++e) {
      const int32_t s = list_rows[row * stride + e];
      ICECACHE_CHECK(s >= 0 && s < summaries);
      DequantizeRow(a.bounds.dtype(), bounds + s * row_bytes, mean.data(), d);
      for (int64_t i = 0; i < m; ++i) {
        const float* k = keys.data() + i * d;
        float dist = 0;
        for (int j = 0; j < d; ++j) {
          const float x = k[j] - mean[j];
          dist = std::fma(x, x, dist);
        }
        // Ascending entries: a later one wins only when strictly nearer (ties to the lower).
        if (dist < best_dist[i] || (out[i0 + i] < 0 && !std::isnan(dist))) {
          out[i0 + i] = e;
          best_dist[i] = dist;
        }
      }
    }
    i0 = i1;
  }
}

}  // namespace icecache::cpu
