// The device-side selection ops on the CPU: the reference for the CUDA kernels (same ranking,
// walk, slot assignment and table layout), row by row on the calling thread.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/half.h"
#include "core/quant.h"
#include "kv/key_mean.h"

namespace icecache::cpu {

namespace {

float LoadElem(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(base)[i]);
    default:
      ICECACHE_CHECK_MSG(false, "page selection: unsupported element type");
      return 0;
  }
}

int64_t ElemBytes(DType t) { return t == DType::kF32 ? 4 : 2; }

struct Limits {
  int count, sink_end, window_begin, tokens_left, pages_left;
};

// The same clamping as the kernel.
Limits RowLimits(const int32_t* l, int stride) {
  Limits r{std::min(l[0], stride), std::max(0, l[1]), l[2], l[3], l[4]};
  r.window_begin = std::max(r.sink_end, std::min(r.window_begin, r.count));
  r.sink_end = std::min(r.sink_end, r.window_begin);
  return r;
}

}  // namespace

void PageBoundsCpu(const PageBoundsArgs& a) {
  const int64_t d = a.pool.head_dim, n = a.ids.numel();
  const int64_t rows = a.bounds.dim(1);
  const int32_t* ids = a.ids.data_as<const int32_t>();
  const int32_t* lens = a.lens.data_as<const int32_t>();
  const int32_t* summary_rows = a.rows.data_as<const int32_t>();
  const int64_t eb = ElemBytes(a.pool.dtype);
  const int64_t row_bytes = RowBytes(a.bounds.dtype(), rows * d);
  ICECACHE_CHECK_MSG(rows == 2 ? a.bounds.dtype() == a.pool.dtype
                               : a.bounds.dtype() == kMeanKeyDType && MeanKeyFits(d),
                     "PageBounds: summaries of the wrong element type");
  std::vector<float> keys, mean(d);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    ICECACHE_CHECK(id >= 0 && id < a.pool.num_pages && lens[i] >= 1);
    ICECACHE_CHECK(summary_rows[i] >= 0 && summary_rows[i] < a.bounds.dim(0));
    const int64_t count = std::min<int64_t>(lens[i], a.pool.page_size);
    const int64_t page = static_cast<int64_t>(id) * a.pool.page_size * d;
    char* out = static_cast<char*>(a.bounds.data()) + summary_rows[i] * row_bytes;
    if (!a.resident.empty()) {
      const int32_t s = a.resident.data_as<const int32_t>()[id];
      if (s >= 0 && s < a.slot_page.numel() && a.slot_page.data_as<const int32_t>()[s] == id) {
        a.slot_len.data_as<int32_t>()[s] = -1;
      }
    }
    if (rows == 1) {
      keys.resize(static_cast<size_t>(count * d));
      for (int64_t e = 0; e < count * d; ++e) keys[e] = LoadElem(a.pool.k, a.pool.dtype, page + e);
      a.spread.data_as<float>()[summary_rows[i]] =
          StoredKeyMean(keys.data(), static_cast<int>(count), static_cast<int>(d), a.pool.dtype,
                        out, mean.data());
      continue;
    }
    for (int64_t j = 0; j < d; ++j) {
      // Copy the stored bytes of the extreme values: bounds are stored values, exactly.
      int64_t lo = page + j, hi = page + j;
      for (int64_t t = 1; t < count; ++t) {
        const int64_t e = page + t * d + j;
        const float v = LoadElem(a.pool.k, a.pool.dtype, e);
        if (v < LoadElem(a.pool.k, a.pool.dtype, lo)) lo = e;
        if (v > LoadElem(a.pool.k, a.pool.dtype, hi)) hi = e;
      }
      const char* src = static_cast<const char*>(a.pool.k);
      std::memcpy(out + j * eb, src + lo * eb, eb);
      std::memcpy(out + (d + j) * eb, src + hi * eb, eb);
    }
  }
}

void SelectPagesCpu(const PageSelectArgs& a) {
  const int rows = static_cast<int>(a.list_ids.dim(0));
  const int stride = static_cast<int>(a.list_ids.dim(1));
  const int out_stride = static_cast<int>(a.out_ids.dim(1));
  const int d = static_cast<int>(a.bounds.dim(2));
  const int64_t bound_rows = a.bounds.dim(1);
  const int group = a.n_heads / rows;
  const int64_t summaries = a.bounds.dim(0);
  const int64_t row_bytes = RowBytes(a.bounds.dtype(), bound_rows * d);
  const int32_t* list_ids = a.list_ids.data_as<const int32_t>();
  const int32_t* list_lens = a.list_lens.data_as<const int32_t>();
  const int32_t* list_rows = a.list_rows.data_as<const int32_t>();
  std::vector<float> q(static_cast<size_t>(a.q.numel()));
  for (int64_t i = 0; i < a.q.numel(); ++i) q[i] = LoadElem(a.q.data(), a.q.dtype(), i);
  std::vector<int32_t> order, taken;
  // Dequantized mean keys of the candidates scored together, one row per lane of a batch.
  std::vector<float> c(static_cast<size_t>(kCentroidLanes) * d), qq(group);
  for (int r = 0; r < rows; ++r) {
    const float* qr = q.data() + static_cast<int64_t>(r * group) * d;
    if (bound_rows == 1) QuerySquares(qr, group, d, qq.data());
    const Limits lim = RowLimits(a.limits.data_as<const int32_t>() + r * 5, stride);
    const int64_t base = static_cast<int64_t>(r) * stride;
    float* scores = a.scores.data_as<float>() + base;
    // Mean keys are scored kCentroidLanes at a time (CentroidScores: CentroidScore's bits).
    CentroidBatch batch(qr, qq.data(), group, d, scores);
    for (int e = lim.sink_end; e < lim.window_begin; ++e) {
      const int32_t row = list_rows[base + e];
      float best = -std::numeric_limits<float>::infinity();
      if (row >= 0 && row < summaries && list_lens[base + e] > 0) {
        const char* bytes = static_cast<const char*>(a.bounds.data()) + row * row_bytes;
        if (bound_rows == 1) {
          float* key = c.data() + static_cast<int64_t>(batch.pending()) * d;
          DequantizeRow(a.bounds.dtype(), bytes, key, d);
          batch.Add(key, a.spread.data_as<const float>()[row], e);
          continue;
        }
        const int64_t b = static_cast<int64_t>(row) * bound_rows * d;
        for (int g = 0; g < group; ++g) {
          const float* qg = q.data() + static_cast<int64_t>(r * group + g) * d;
          float s = 0;
          for (int j = 0; j < d; ++j) {
            const float lo = LoadElem(a.bounds.data(), a.bounds.dtype(), b + j);
            const float hi = LoadElem(a.bounds.data(), a.bounds.dtype(), b + d + j);
            s += std::max(qg[j] * lo, qg[j] * hi);
          }
          best = std::max(best, s);
        }
      }
      scores[e] = best;
    }
    batch.Flush();
    // The best `want` by (score descending, entry ascending), walked greedily.
    const int n_cand = lim.window_begin - lim.sink_end;
    const int want =
        std::max(0, std::min({lim.pages_left, n_cand, static_cast<int>(kMaxSelectPicks)}));
    order.resize(n_cand);
    for (int i = 0; i < n_cand; ++i) order[i] = lim.sink_end + i;
    std::partial_sort(order.begin(), order.begin() + want, order.end(), [&](int32_t x, int32_t y) {
      return scores[x] > scores[y] || (scores[x] == scores[y] && x < y);
    });
    taken.clear();
    int tokens = lim.tokens_left;
    for (int i = 0; i < want && tokens > 0; ++i) {
      const int len = list_lens[base + order[i]];
      if (len > tokens) continue;
      tokens -= len;
      taken.push_back(order[i]);
    }
    const int window = lim.count - lim.window_begin;
    const int total = lim.sink_end + static_cast<int>(taken.size()) + window;
    ICECACHE_CHECK_MSG(total <= out_stride, "SelectPages: the selection exceeds the output row");
    int32_t* out_ids = a.out_ids.data_as<int32_t>() + static_cast<int64_t>(r) * out_stride;
    int32_t* out_lens = a.out_lens.data_as<int32_t>() + static_cast<int64_t>(r) * out_stride;
    int k = 0;
    auto put = [&](int e) {
      out_ids[k] = list_ids[base + e];
      out_lens[k++] = list_lens[base + e];
    };
    for (int e = 0; e < lim.sink_end; ++e) put(e);
    for (int e : taken) put(e);
    for (int e = lim.window_begin; e < lim.count; ++e) put(e);
    a.out_count.data_as<int32_t>()[r] = total;
  }
}

namespace {

// Copies the first `rows` token rows (K, V and positions) of host page `src` into slot page
// `dst`: the rows the map lists. Rows past them are left alone, since an index updating beside
// the step may be writing them (SequenceIndex::UpdatesBesideDeviceReads).
void CopyPage(const PageMapArgs& a, int64_t src, int64_t dst, int32_t rows) {
  const int64_t n = std::clamp<int64_t>(rows, 0, a.host.page_size);
  const int64_t row_bytes = static_cast<int64_t>(a.host.head_dim) * ElemBytes(a.host.dtype);
  const int64_t page_bytes = a.host.page_size * row_bytes;
  std::memcpy(static_cast<char*>(a.slots.k) + dst * page_bytes,
              static_cast<const char*>(a.host.k) + src * page_bytes, n * row_bytes);
  std::memcpy(static_cast<char*>(a.slots.v) + dst * page_bytes,
              static_cast<const char*>(a.host.v) + src * page_bytes, n * row_bytes);
  std::memcpy(a.slots.positions + dst * a.host.page_size, a.host.positions + src * a.host.page_size,
              n * sizeof(int32_t));
}

// MapStage::kCopy: the copies that a kPlace map listed in `fetch` (count, then source/slot
// pairs per row), as the CUDA fetch kernel makes them: entries out of range are skipped.
void CopyListed(const PageMapArgs& a) {
  const int rows = static_cast<int>(a.sel_ids.dim(0));
  const int64_t width = 1 + 2 * static_cast<int64_t>(a.capacity);
  for (int r = 0; r < rows; ++r) {
    const int32_t* fetch = a.fetch.data_as<const int32_t>() + r * width;
    const int n = std::clamp(fetch[0], 0, a.capacity);
    for (int c = 0; c < n; ++c) {
      const int32_t src = fetch[1 + 2 * c], dst = fetch[2 + 2 * c];
      if (src >= 0 && src < a.host.num_pages && dst >= 0 && dst < a.slots.num_pages) {
        CopyPage(a, src, dst, a.slot_len.data_as<const int32_t>()[dst]);  // set by kPlace
      }
    }
  }
}

}  // namespace

void MapPagesCpu(const PageMapArgs& a) {
  if (a.stage == MapStage::kCopy) {
    CopyListed(a);
    return;
  }
  const int rows = static_cast<int>(a.sel_ids.dim(0));
  const int stride = static_cast<int>(a.sel_ids.dim(1));
  const int cap = a.capacity;
  int32_t* resident = a.resident.data_as<int32_t>();
  int32_t* slot_page = a.slot_page.data_as<int32_t>();
  int32_t* slot_len = a.slot_len.data_as<int32_t>();
  int32_t* indptr = a.table.data_as<int32_t>();
  int32_t* indices = indptr + rows + 1;
  int32_t* table_lens = indices + static_cast<int64_t>(rows) * stride;
  int64_t* counters = reinterpret_cast<int64_t*>(a.counters.data());
  // Prefetch mode: each row's pending page is left out, and nothing but the slots changes.
  const int32_t* pending = a.pending.empty() ? nullptr : a.pending.data_as<const int32_t>();
  int32_t* used = a.slot_used.empty() ? nullptr : a.slot_used.data_as<int32_t>();
  const int32_t* defer = pending == nullptr && !a.defer_limits.empty()
                             ? a.defer_limits.data_as<const int32_t>()
                             : nullptr;
  std::vector<uint8_t> kept, deferred;
  std::vector<int32_t> slot_of, copies, free_slots, spare, recent;
  if (pending == nullptr) indptr[0] = 0;
  for (int r = 0; r < rows; ++r) {
    int n = std::min({a.sel_count.data_as<const int32_t>()[r], stride, cap});
    if (pending != nullptr && a.prefetch_pages > 0) n = std::min(n, a.prefetch_pages);
    const int64_t base = static_cast<int64_t>(a.first_group + r) * cap;
    const int32_t* ids = a.sel_ids.data_as<const int32_t>() + static_cast<int64_t>(r) * stride;
    const int32_t* lens = a.sel_lens.data_as<const int32_t>() + static_cast<int64_t>(r) * stride;
    const int32_t skip = pending != nullptr ? pending[r] : -1;
    kept.assign(cap, 0);
    slot_of.assign(n, -1);
    deferred.assign(n, 0);
    copies.clear();
    // Fetch behind: the entries [lo, hi) between the sink's and the window's may be deferred.
    int lo = n, hi = n;
    if (defer != nullptr) {
      const int32_t* lim = defer + static_cast<int64_t>(r) * 5;
      lo = std::clamp(lim[1] + std::max(a.defer_after, 0), 0, n);
      hi = std::max(lo, n - std::clamp(lim[0] - lim[2], 0, n));
    }
    for (int i = 0; i < n; ++i) {
      const int32_t id = ids[i];
      ICECACHE_CHECK(id >= 0 && id < a.host.num_pages);
      if (id == skip) continue;
      const int32_t s = resident[id];
      const bool in_slot = s >= base && s < base + cap && slot_page[s] == id;
      const bool current = in_slot && slot_len[s] == lens[i];
      if (!current && i >= lo && i < hi) {
        deferred[i] = 1;
        if (in_slot) kept[s - base] = 1;  // a stale copy stays for the copy behind
        continue;
      }
      if (in_slot) {
        slot_of[i] = s;
        kept[s - base] = 1;
        if (!current) {
          copies.push_back(i);  // stale: copied again into its slot
        } else if (pending == nullptr) {
          ++counters[0];
        }
      }
    }
    // Free slots, lowest first within each class: empty ones, then (with slot_used) those the
    // last normal map did not list, then the rest.
    free_slots.clear();
    spare.clear();
    recent.clear();
    for (int j = 0; j < cap; ++j) {
      if (kept[j]) continue;
      if (slot_page[base + j] < 0) {
        free_slots.push_back(j);
      } else if (used != nullptr && used[base + j] >= a.clock - 1) {
        recent.push_back(j);
      } else {
        spare.push_back(j);
      }
    }
    free_slots.insert(free_slots.end(), spare.begin(), spare.end());
    free_slots.insert(free_slots.end(), recent.begin(), recent.end());
    size_t next_free = 0;
    for (int i = 0; i < n; ++i) {
      if (slot_of[i] >= 0 || ids[i] == skip || deferred[i]) continue;
      // A free slot exists: n <= capacity.
      const int32_t s = static_cast<int32_t>(base + free_slots[next_free++]);
      const int32_t old = slot_page[s];
      if (old >= 0 && old < a.host.num_pages && resident[old] == s) resident[old] = -1;
      slot_page[s] = ids[i];
      resident[ids[i]] = s;
      slot_of[i] = s;
      copies.push_back(i);
    }
    if (a.stage == MapStage::kPlace) {
      int32_t* fetch = a.fetch.data_as<int32_t>() + r * (1 + 2 * static_cast<int64_t>(cap));
      fetch[0] = static_cast<int32_t>(copies.size());
      for (size_t c = 0; c < copies.size(); ++c) {
        fetch[1 + 2 * c] = ids[copies[c]];
        fetch[2 + 2 * c] = slot_of[copies[c]];
      }
    } else {
      for (int i : copies) CopyPage(a, ids[i], slot_of[i], lens[i]);
    }
    if (pending != nullptr) {
      counters[3] += static_cast<int64_t>(copies.size());
      for (int i : copies) slot_len[slot_of[i]] = lens[i];
      continue;
    }
    counters[1] += static_cast<int64_t>(copies.size());
    for (int i = 0; i < n; ++i) {
      if (deferred[i]) {
        // Listed with no tokens at a slot of the row (attention skips it).
        indices[indptr[r] + i] = static_cast<int32_t>(base);
        table_lens[indptr[r] + i] = 0;
        ++counters[4];
        continue;
      }
      counters[2] += lens[i];
      indices[indptr[r] + i] = slot_of[i];
      table_lens[indptr[r] + i] = lens[i];
      slot_len[slot_of[i]] = lens[i];
      if (used != nullptr) used[slot_of[i]] = a.clock;
    }
    indptr[r + 1] = indptr[r] + n;
  }
}

}  // namespace icecache::cpu
