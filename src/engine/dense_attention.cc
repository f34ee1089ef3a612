#include "engine/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"

namespace icecache {

namespace {

// Empty entries after a row's pages: a few decode steps' worth at short context, more at long
// context (where a rebuild costs more), at most ~3% more entries for the kernels to skip.
constexpr int64_t kMaxSlack = 64;
int64_t Slack(int64_t pages) { return std::clamp<int64_t>(pages / 32, 4, kMaxSlack); }

// Copies beyond this many per array and step: one flat copy of the whole span instead.
constexpr size_t kMaxCopies = 16;

}  // namespace

Result<std::unique_ptr<DenseAttention>> DenseAttention::Create(Backend* backend,
                                                               const ModelConfig& config,
                                                               int64_t max_rows,
                                                               int64_t max_entries, Layout layout) {
  std::unique_ptr<DenseAttention> d(new DenseAttention());
  d->backend_ = backend;
  // On the CPU the default is packed: the table is used in place (no upload to save), and a
  // packed table splits the work exactly as the sparse path's tables do, so that dense and
  // sparse attention over the same pages agree bit for bit.
  d->slack_ =
      layout == Layout::kSlack || (layout == Layout::kAuto && backend->device() != Device::kCpu);
  d->config_ = config;
  d->max_rows_ = max_rows;
  // Room for every row's slack beside `max_entries`: a table without it falls back to packed
  // rows once the sequences hold nearly all of their pool, and every new page rebuilds it (on an
  // H100, 32K tokens x 12 sequences, 9-12 ms of host work at every 16th decode step).
  d->area_ = (max_entries + (d->slack_ ? max_rows * kMaxSlack : 0)) * config.n_layers;
  if (d->area_ > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("dense attention: " + std::to_string(d->area_) +
                           " page-table entries exceed the 32-bit offsets");
  }
  const int64_t total = d->LensAt() + d->area_;
  ICECACHE_ASSIGN_OR_RETURN(d->host_, backend->AllocateStaging(DType::kI32, {total}));
  if (!d->slack_) {
    ICECACHE_CHECK_MSG(backend->device() == Device::kCpu, "a GPU table needs the slack layout");
    d->device_ = d->host_;
  } else {
    ICECACHE_ASSIGN_OR_RETURN(d->device_, backend->Allocate(DType::kI32, {total}));
  }
  return d;
}

Status DenseAttention::Prepare(const StepContext& step) {
  const int heads = config_.n_kv_heads;
  const int64_t rows = static_cast<int64_t>(step.seqs.size()) * heads;
  if (rows > max_rows_) {
    return Internal("dense attention: " + std::to_string(rows) + " rows exceed capacity " +
                    std::to_string(max_rows_));
  }
  rows_ = static_cast<int32_t>(rows);
  pool_view_ = step.seqs.front()->pool().view();
  positions_ = step.positions;
  row_base_ = step.row_base;
  Status st = CanUpdate(step, rows) ? Update(step) : Rebuild(step, rows);
  if (!st.ok()) layout_rows_ = -1;  // the device copy may be stale: rebuild next time
  return st;
}

bool DenseAttention::CanUpdate(const StepContext& step, int64_t rows) const {
  if (rows != layout_rows_) return false;
  const int heads = config_.n_kv_heads;
  const RowState* st = state_.data();
  for (int l = 0; l < config_.n_layers; ++l) {
    for (KvSequence* s : step.seqs) {
      for (int h = 0; h < heads; ++h, ++st) {
        const int64_t n = static_cast<int64_t>(s->pages(l, h).size());
        if (s->stamp(l, h) != st->stamp || n < st->count || n > st->cap) return false;
      }
    }
  }
  return true;
}

Status DenseAttention::Update(const StepContext& step) {
  const int heads = config_.n_kv_heads;
  int32_t* indices = host_.data_as<int32_t>() + IndicesAt();
  int32_t* lens = host_.data_as<int32_t>() + LensAt();
  dirty_.clear();
  RowState* st = state_.data();
  for (int l = 0; l < config_.n_layers; ++l) {
    for (KvSequence* s : step.seqs) {
      for (int h = 0; h < heads; ++h, ++st) {
        const std::vector<PageRef>& pages = s->pages(l, h);
        const int32_t n = static_cast<int32_t>(pages.size());
        // The last page written may have gained tokens; pages after it are new.
        const int32_t first = std::max(st->count - 1, 0);
        for (int32_t k = first; k < n; ++k) {
          indices[st->begin + k] = pages[k].id;
          lens[st->begin + k] = pages[k].len;
        }
        if (n > first) dirty_.push_back({st->begin + first, n - first});
        st->count = n;
      }
    }
  }
  return Upload(dirty_);
}

Status DenseAttention::Rebuild(const StepContext& step, int64_t rows) {
  const int heads = config_.n_kv_heads;
  int64_t pages_total = 0, slack_total = 0;
  for (int l = 0; l < config_.n_layers; ++l) {
    for (KvSequence* s : step.seqs) {
      for (int h = 0; h < heads; ++h) {
        const int64_t n = static_cast<int64_t>(s->pages(l, h).size());
        pages_total += n;
        slack_total += Slack(n);
      }
    }
  }
  if (pages_total > area_) return Internal("dense attention: page table capacity exceeded");
  const bool slack = slack_ && pages_total + slack_total <= area_;  // else packed
  ++rebuilds_;
  layout_rows_ = rows;
  state_.assign(static_cast<size_t>(config_.n_layers * rows), RowState());
  int32_t* base = host_.data_as<int32_t>();
  int32_t* indices = base + IndicesAt();
  int32_t* lens = base + LensAt();
  int64_t used = 0;
  RowState* st = state_.data();
  for (int l = 0; l < config_.n_layers; ++l) {
    int32_t* indptr = base + Indptr(l);
    indptr[0] = static_cast<int32_t>(used);
    int64_t r = 0;
    for (KvSequence* s : step.seqs) {
      for (int h = 0; h < heads; ++h, ++st) {
        const std::vector<PageRef>& pages = s->pages(l, h);
        const int64_t n = static_cast<int64_t>(pages.size());
        const int64_t cap = n + (slack ? Slack(n) : 0);
        st->stamp = s->stamp(l, h);
        st->begin = static_cast<int32_t>(used);
        st->cap = static_cast<int32_t>(cap);
        st->count = static_cast<int32_t>(n);
        for (int64_t k = 0; k < n; ++k) {
          indices[used + k] = pages[k].id;
          lens[used + k] = pages[k].len;
        }
        // Slack: page 0 (a valid id) with no tokens.
        std::fill(indices + used + n, indices + used + cap, 0);
        std::fill(lens + used + n, lens + used + cap, 0);
        used += cap;
        indptr[++r] = static_cast<int32_t>(used);
      }
    }
  }
  if (slack_) {
    const int64_t pitch = (max_rows_ + 1) * 4;
    ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocksQueued(
        host_.data(), device_.data(), config_.n_layers, (rows + 1) * 4, pitch, pitch));
  }
  dirty_.clear();
  if (used > 0) dirty_.push_back({0, used});
  return Upload(dirty_);
}

Status DenseAttention::Upload(const std::vector<Range>& ranges) {
  if (!slack_ || ranges.empty()) return Status::Ok();
  // Runs of ranges of one width at one pitch (every row in lockstep: a single run) become one
  // strided copy each.
  struct Run {
    int64_t start, width, pitch, count;
  };
  std::vector<Run> runs;
  for (const Range& r : ranges) {
    if (!runs.empty()) {
      Run& last = runs.back();
      const int64_t pitch = r.start - (last.start + (last.count - 1) * last.pitch);
      if (r.width == last.width && (last.count == 1 || pitch == last.pitch) && pitch >= r.width) {
        last.pitch = pitch;
        ++last.count;
        continue;
      }
    }
    runs.push_back({r.start, r.width, r.width, 1});
  }
  if (runs.size() > kMaxCopies) {
    const int64_t start = ranges.front().start;
    runs = {{start, ranges.back().start + ranges.back().width - start, 0, 1}};
  }
  const char* src = static_cast<const char*>(host_.data());
  char* dst = static_cast<char*>(device_.data());
  for (const int64_t at : {IndicesAt(), LensAt()}) {
    for (const Run& run : runs) {
      const int64_t off = (at + run.start) * 4;
      const int64_t pitch = std::max(run.pitch, run.width) * 4;
      ICECACHE_RETURN_IF_ERROR(
          backend_->CopyBlocksQueued(src + off, dst + off, run.count, run.width * 4, pitch, pitch));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::vector<PageRef>>> DenseAttention::ReadTable(int layer) const {
  const int64_t bytes = device_.numel() * 4;
  std::vector<int32_t> all(static_cast<size_t>(device_.numel()));
  ICECACHE_RETURN_IF_ERROR(
      backend_->CopyBlocks(device_.data(), all.data(), 1, bytes, bytes, bytes));
  backend_->Synchronize();
  const int32_t* indptr = all.data() + Indptr(layer);
  std::vector<std::vector<PageRef>> rows(static_cast<size_t>(rows_));
  for (int32_t r = 0; r < rows_; ++r) {
    for (int32_t e = indptr[r]; e < indptr[r + 1]; ++e) {
      rows[r].push_back({all[IndicesAt() + e], all[LensAt() + e]});
    }
  }
  return rows;
}

Status DenseAttention::Attend(int layer, const Tensor& q, const Tensor& out) {
  // All sequences of a forward share one pool.
  const int32_t* base = device_.data_as<int32_t>();
  AttentionArgs a;
  a.q = q;
  a.out = out;
  a.positions = positions_;
  a.row_base = row_base_;
  a.table.indptr = base + Indptr(layer);
  a.table.indices = base + IndicesAt();
  a.table.lens = base + LensAt();
  a.table.num_rows = rows_;
  a.pool = pool_view_;
  a.n_heads = config_.n_heads;
  a.n_kv_heads = config_.n_kv_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  a.causal = true;
  backend_->Attention(a);
  return Status::Ok();
}

}  // namespace icecache
