#include "engine/device_selection.h"

#include <algorithm>

#include "core/env_switch.h"
#include "index/icecache/icecache_index.h"
#include "index/regions.h"
#include "kv/key_mean.h"

namespace icecache {

bool DeviceSelection::Supports(const KvConfig& config, int head_dim) {
  if (config.policy == "quest") return true;
  if (!MeanKeyFits(head_dim)) return false;  // mean keys are stored in Q8_0 blocks
  if (config.policy == "lychee") return config.rank == "centroid";
  return config.policy == "icecache" && config.rank == "centroid" && !config.exact &&
         config.reuse_layers == 1;
}

Result<std::unique_ptr<DeviceSelection>> DeviceSelection::Create(
    Backend& backend, const KvConfig& config, const KvLayout& layout, int n_layers, int n_heads,
    const PagePool& pool, const WorkingSet& ws) {
  if (!Supports(config, layout.head_dim)) {
    return Unsupported("KV policy '" + config.policy + "' cannot select in device memory" +
                       (MeanKeyFits(layout.head_dim) ? "" : " (head dim not a multiple of 32)"));
  }
  const SelectionLimits lim = LimitsFor(config);
  if (lim.max_pages > kMaxSelectPicks) {
    return Unsupported("device selection takes at most " + std::to_string(kMaxSelectPicks) +
                       " pages per step; lower --kv-budget or raise --kv-page");
  }
  if (ws.capacity() + lim.max_pages > kMaxMapSlots) {
    return Unsupported("device selection keeps at most " +
                       std::to_string(int64_t{kMaxMapSlots - lim.max_pages} * layout.page_size) +
                       " tokens per (layer, KV head) in the working set at this budget; lower "
                       "--kv-working-set");
  }
  std::unique_ptr<DeviceSelection> d(new DeviceSelection());
  d->backend_ = &backend;
  d->config_ = config;
  d->limits_ = lim;
  d->layout_ = layout;
  d->layers_ = n_layers;
  d->heads_ = layout.n_kv_heads;
  d->n_heads_ = n_heads;
  d->capacity_ = ws.capacity();
  const int64_t rows = static_cast<int64_t>(n_layers) * d->heads_;
  const int64_t out = lim.max_pages;
  d->limits_host_.assign(static_cast<size_t>(rows) * 5, 0);
  d->pending_host_.assign(static_cast<size_t>(rows), -1);
  ICECACHE_RETURN_IF_ERROR(d->AllocatePicks(&d->picks_));
  ICECACHE_RETURN_IF_ERROR(d->AllocatePicks(&d->prefetch_picks_));
  ICECACHE_ASSIGN_OR_RETURN(d->resident_, backend.Allocate(DType::kI32, {pool.capacity()}));
  const int64_t slots = ws.view().num_pages;
  ICECACHE_ASSIGN_OR_RETURN(d->slot_page_, backend.Allocate(DType::kI32, {slots}));
  ICECACHE_ASSIGN_OR_RETURN(d->slot_len_, backend.Allocate(DType::kI32, {slots}));
  ICECACHE_ASSIGN_OR_RETURN(d->slot_used_, backend.Allocate(DType::kI32, {slots}));
  ICECACHE_ASSIGN_OR_RETURN(d->table_,
                            backend.Allocate(DType::kI32, {d->heads_ + 1 + 2 * d->heads_ * out}));
  ICECACHE_ASSIGN_OR_RETURN(d->counters_, backend.Allocate(DType::kI32, {10}));
  ICECACHE_ASSIGN_OR_RETURN(d->counters_host_, backend.AllocateStaging(DType::kI32, {10}));
  d->behind_ = config.fetch == "behind";
  if (d->behind_) {
    // ICECACHE_FETCH_NOW_PERCENT (A/B): that share of the pages the budget leaves between sink and
    // window, the best-ranked first, is fetched now even when fetching behind.
    const int percent = std::clamp(EnvInt("ICECACHE_FETCH_NOW_PERCENT", 0), 0, 100);
    const int middle = std::max(0, lim.budget - lim.sink - lim.window) / layout.page_size;
    d->now_pages_ = middle * percent / 100;
    ICECACHE_ASSIGN_OR_RETURN(d->behind_ids_, backend.Allocate(DType::kI32, {rows, out}));
    ICECACHE_ASSIGN_OR_RETURN(d->behind_lens_, backend.Allocate(DType::kI32, {rows, out}));
    ICECACHE_ASSIGN_OR_RETURN(d->behind_count_, backend.Allocate(DType::kI32, {rows}));
    ICECACHE_ASSIGN_OR_RETURN(
        d->behind_fetch_,
        backend.Allocate(DType::kI32, {d->heads_ * (1 + 2 * int64_t{d->capacity_})}));
    d->layer_picks_.resize(n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const int64_t first = static_cast<int64_t>(l) * d->heads_;
      Picks& p = d->layer_picks_[l];
      p.ids = d->behind_ids_.Slice(first, first + d->heads_);
      p.lens = d->behind_lens_.Slice(first, first + d->heads_);
      p.count = d->behind_count_.Slice(first, first + d->heads_);
      p.fetch = d->picks_.fetch;  // the step's map; the copies behind have behind_fetch_
    }
    ICECACHE_ASSIGN_OR_RETURN(d->no_pending_, backend.Allocate(DType::kI32, {d->heads_}));
    const std::vector<int32_t> none(static_cast<size_t>(d->heads_), -1);
    ICECACHE_RETURN_IF_ERROR(backend.Copy(
        Tensor(const_cast<int32_t*>(none.data()), DType::kI32, {d->heads_}), d->no_pending_));
  }
  d->synced_.assign(rows, 0);
  d->seen_stamp_.assign(rows, 0);
  d->planned_nodes_.assign(n_layers, 0);
  ICECACHE_RETURN_IF_ERROR(d->Grow(64));
  ICECACHE_RETURN_IF_ERROR(d->GrowSummaries());
  d->ResetResidency();
  return d;
}

Status DeviceSelection::AllocatePicks(Picks* p) const {
  const int64_t out = limits_.max_pages;
  ICECACHE_ASSIGN_OR_RETURN(p->ids, backend_->Allocate(DType::kI32, {heads_, out}));
  ICECACHE_ASSIGN_OR_RETURN(p->lens, backend_->Allocate(DType::kI32, {heads_, out}));
  ICECACHE_ASSIGN_OR_RETURN(p->count, backend_->Allocate(DType::kI32, {heads_}));
  ICECACHE_ASSIGN_OR_RETURN(
      p->fetch, backend_->Allocate(DType::kI32, {heads_ * (1 + 2 * int64_t{capacity_})}));
  return Status::Ok();
}

void DeviceSelection::ResetResidency() {
  std::vector<int32_t> none(static_cast<size_t>(std::max(resident_.numel(), slot_page_.numel())),
                            -1);
  const Tensor src(none.data(), DType::kI32, {static_cast<int64_t>(none.size())});
  // Copies of a valid size: failures here are broken devices, reported by the next step.
  (void)backend_->Copy(src.Slice(0, resident_.numel()), resident_);
  (void)backend_->Copy(src.Slice(0, slot_page_.numel()), slot_page_);
  (void)backend_->Copy(src.Slice(0, slot_len_.numel()), slot_len_);
  (void)backend_->Copy(src.Slice(0, slot_used_.numel()), slot_used_);
  clock_ = 1;  // every slot was last listed at -1
}

Status DeviceSelection::Grow(int64_t entries) {
  if (entries <= stride_) return Status::Ok();
  // Grows by an eighth (whole 64-entry steps): the lists of a long context stay near their size.
  int64_t stride = std::max<int64_t>(64, stride_);
  while (stride < entries) stride = (stride + stride / 8 + 63) / 64 * 64;
  const int64_t rows = static_cast<int64_t>(layers_) * heads_;
  // Device arrays first: a failed allocation leaves everything as it was.
  ICECACHE_ASSIGN_OR_RETURN(Tensor ids_dev, backend_->Allocate(DType::kI32, {rows, stride}));
  ICECACHE_ASSIGN_OR_RETURN(Tensor lens_dev, backend_->Allocate(DType::kI32, {rows, stride}));
  ICECACHE_ASSIGN_OR_RETURN(Tensor rows_dev, backend_->Allocate(DType::kI32, {rows, stride}));
  ICECACHE_ASSIGN_OR_RETURN(Tensor scores, backend_->Allocate(DType::kF32, {heads_, stride}));
  ICECACHE_ASSIGN_OR_RETURN(Tensor prefetch_scores,
                            backend_->Allocate(DType::kF32, {heads_, stride}));
  // The uploaded entries move over in backend memory, row by row (queued behind any upload
  // still in flight); entries past a list's count are never read.
  if (stride_ > 0) {
    for (auto [from, to] :
         {std::pair{&list_ids_, &ids_dev}, {&list_lens_, &lens_dev}, {&list_rows_, &rows_dev}}) {
      ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocks(from->data(), to->data(), rows, stride_ * 4,
                                                    stride_ * 4, stride * 4));
    }
  }
  const size_t size = static_cast<size_t>(rows * stride);
  std::vector<int32_t> ids(size, -1), lens(size, 0), summary_rows(size, -1);
  std::vector<uint64_t> vers(size, kNotSummarized);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = synced_[r], from = r * stride_, to = r * stride;
    std::copy_n(host_ids_.begin() + from, n, ids.begin() + to);
    std::copy_n(host_lens_.begin() + from, n, lens.begin() + to);
    std::copy_n(host_rows_.begin() + from, n, summary_rows.begin() + to);
    std::copy_n(host_vers_.begin() + from, n, vers.begin() + to);
  }
  host_ids_ = std::move(ids);
  host_lens_ = std::move(lens);
  host_rows_ = std::move(summary_rows);
  host_vers_ = std::move(vers);
  stride_ = stride;
  list_ids_ = std::move(ids_dev);
  list_lens_ = std::move(lens_dev);
  list_rows_ = std::move(rows_dev);
  picks_.scores = std::move(scores);
  prefetch_picks_.scores = std::move(prefetch_scores);
  for (Picks& p : layer_picks_) p.scores = picks_.scores;
  return Status::Ok();
}

Status DeviceSelection::Send(Upload upload) {
  const int64_t rows = static_cast<int64_t>(layers_) * heads_;
  const int64_t n = static_cast<int64_t>(changed_idx_.size());
  const int64_t m = static_cast<int64_t>(bound_stage_ids_.size());
  const int64_t k = static_cast<int64_t>(route_slots_.size());
  const int64_t total = 6 * rows + 4 * n + 3 * m + 4 * k;
  // The staging buffer is replaced only once copies queued from it have run, the device buffer
  // once the kernels that read its views (the last summaries, selections and maps) have: growth
  // is rare, so it waits for the device.
  const bool grow_stage = upload_stage_.empty() || upload_stage_.numel() < total;
  const bool grow_dev = upload_dev_.empty() || upload_dev_.numel() < total;
  if ((grow_dev && !upload_dev_.empty()) || (grow_stage && queued_since_sync_)) {
    backend_->Synchronize();
    queued_since_sync_ = false;
  }
  const int64_t size = std::max<int64_t>(16384, total + total / 4);
  if (grow_stage) {
    ICECACHE_ASSIGN_OR_RETURN(upload_stage_, backend_->AllocateStaging(DType::kI32, {size}));
  }
  if (grow_dev) {
    ICECACHE_ASSIGN_OR_RETURN(upload_dev_, backend_->Allocate(DType::kI32, {size}));
  }
  // [limits 5R | pending R | changed: flat index, page id, token count, summary row (n each) |
  //  pages to summarize: id, token count, summary row (m each) | keys to route: host slot (k),
  //  list row, first entry, end entry (3k)]
  int32_t* at = upload_stage_.data_as<int32_t>();
  for (const std::vector<int32_t>* v :
       {&limits_host_, &pending_host_, &changed_idx_, &changed_ids_, &changed_lens_, &changed_rows_,
        &bound_stage_ids_, &bound_stage_lens_, &bound_stage_rows_, &route_slots_, &route_ranges_}) {
    at = std::copy(v->begin(), v->end(), at);
  }
  const Tensor dev = upload_dev_.Slice(0, total);
  if (upload == Upload::kBlocking) {
    ICECACHE_RETURN_IF_ERROR(backend_->Copy(upload_stage_.Slice(0, total), dev));
  } else {
    ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocksQueued(upload_stage_.data(), dev.data(), 1,
                                                        total * 4, total * 4, total * 4));
    queued_since_sync_ = true;
  }
  int64_t off = 0;
  auto next = [&](int64_t len) {
    Tensor t = dev.Slice(off, off + len);
    off += len;
    return t;
  };
  limits_dev_ = next(5 * rows).Reshape({rows, 5});
  pending_dev_ = next(rows);
  const Tensor index = next(n), ids = next(n), lens = next(n), summary_rows = next(n);
  if (n > 0) {
    backend_->ScatterI32(index, ids, list_ids_);
    backend_->ScatterI32(index, lens, list_lens_);
    backend_->ScatterI32(index, summary_rows, list_rows_);
  }
  bound_ids_ = next(m);
  bound_lens_ = next(m);
  bound_rows_ = next(m);
  route_slots_dev_ = next(k);
  route_ranges_dev_ = next(3 * k);
  return Status::Ok();
}

int32_t DeviceSelection::TakeRow() {
  if (!free_rows_.empty()) {
    const int32_t row = free_rows_.back();
    free_rows_.pop_back();
    return row;
  }
  return static_cast<int32_t>(rows_handed_out_++);
}

void DeviceSelection::GiveRow(int32_t row) {
  if (row >= 0) free_rows_.push_back(row);
}

Status DeviceSelection::GrowSummaries() {
  const int64_t have = bounds_.empty() ? 0 : bounds_.dim(0);
  if (rows_handed_out_ <= have && have > 0) return Status::Ok();
  // An eighth more than handed out (at least 64 rows), copied over on the backend.
  const int64_t want = std::max<int64_t>(64, rows_handed_out_ + rows_handed_out_ / 8);
  const int rows = BoundRows(config_);
  const DType dtype = rows == 2 ? layout_.dtype : kMeanKeyDType;
  ICECACHE_ASSIGN_OR_RETURN(Tensor grown,
                            backend_->Allocate(dtype, {want, rows, layout_.head_dim}));
  Tensor spread;  // mean keys' spreads, one f32 per row
  if (rows == 1) {
    ICECACHE_ASSIGN_OR_RETURN(spread, backend_->Allocate(DType::kF32, {want}));
  }
  if (have > 0) {
    ICECACHE_RETURN_IF_ERROR(backend_->Copy(bounds_, grown.Slice(0, have)));
    if (rows == 1) ICECACHE_RETURN_IF_ERROR(backend_->Copy(spread_, spread.Slice(0, have)));
  }
  bounds_ = std::move(grown);
  spread_ = std::move(spread);
  return Status::Ok();
}

Status DeviceSelection::Prepare(const KvSequence& seq, int pending, Upload upload) {
  ICECACHE_RETURN_IF_ERROR(BeginPrepare(seq, pending, upload));
  CollectChanges(seq, pending);
  return FinishPrepare(seq, upload);
}

Status DeviceSelection::BeginPrepare(const KvSequence& seq, int pending, Upload upload) {
  Status status = Begin(seq, pending, upload);
  // After a failed allocation or copy, what the device holds is unknown: the next call starts
  // over, as after a truncation.
  if (!status.ok()) start_over_ = true;
  return status;
}

Status DeviceSelection::FinishPrepare(const KvSequence& seq, Upload upload) {
  Status status = GrowSummaries();
  // One copy per step for everything CollectChanges found, then the scatters and the summaries
  // on the device.
  if (status.ok()) status = Send(upload);
  if (!status.ok()) {
    start_over_ = true;
    route_keys_.clear();  // nothing routed: the index searches for these tokens itself
    return status;
  }
  if (!bound_stage_ids_.empty()) {
    PageBoundsArgs b;
    b.pool = seq.pool().view();
    b.ids = bound_ids_;
    b.lens = bound_lens_;
    b.rows = bound_rows_;
    b.bounds = bounds_;
    b.spread = spread_;
    b.resident = resident_;
    b.slot_page = slot_page_;
    b.slot_len = slot_len_;
    backend_->PageBounds(b);
  }
  if (!route_keys_.empty()) {
    const int64_t k = static_cast<int64_t>(route_keys_.size());
    if (route_dev_.empty() || route_dev_.numel() < k) {
      const int64_t size = std::max<int64_t>(1024, k + k / 4);
      Result<Tensor> dev = backend_->Allocate(DType::kI32, {size});
      Result<Tensor> host =
          dev.ok() ? backend_->AllocateStaging(DType::kI32, {size}) : Result<Tensor>(dev.status());
      if (!host.ok()) {
        route_keys_.clear();  // nothing routed: the index searches for these tokens itself
        start_over_ = true;
        return host.status();
      }
      route_dev_ = std::move(*dev);
      route_host_ = std::move(*host);
    }
    KeyRouteArgs r;
    r.pool = seq.pool().view();
    r.slots = route_slots_dev_;
    r.ranges = route_ranges_dev_.Reshape({k, 3});
    r.list_rows = list_rows_;
    r.bounds = bounds_;
    r.out = route_dev_.Slice(0, k);
    backend_->RouteKeys(r);
  }
  return Status::Ok();
}

Status DeviceSelection::EnableRoutes() {
  if (config_.policy != "icecache") {
    return Unsupported("--kv-route device: only icecache inserts tokens into leaves");
  }
  route_ = true;
  routed_to_.assign(static_cast<size_t>(layers_) * heads_, 0);
  return Status::Ok();
}

Status DeviceSelection::TakeRoutes(std::vector<KeyRoute>* out) {
  out->clear();
  if (route_keys_.empty()) return Status::Ok();
  const int64_t k = static_cast<int64_t>(route_keys_.size());
  out->swap(route_keys_);  // taken whether or not the copy succeeds: none twice
  ICECACHE_RETURN_IF_ERROR(backend_->Copy(route_dev_.Slice(0, k), route_host_.Slice(0, k)));
  backend_->Synchronize();
  const int32_t* entry = route_host_.data_as<const int32_t>();
  for (int64_t i = 0; i < k; ++i) (*out)[i].entry = entry[i];
  return Status::Ok();
}

Status DeviceSelection::Begin(const KvSequence& seq, int pending, Upload upload) {
  // The staging buffers are rewritten below: blocking uploads first let queued ones finish.
  if (upload == Upload::kBlocking && queued_since_sync_) {
    backend_->Synchronize();
    queued_since_sync_ = false;
  }
  if (seq.length() < last_length_ || start_over_) {
    // Truncated (pages may have been freed and handed out again) or failed: start over.
    start_over_ = false;
    std::fill(synced_.begin(), synced_.end(), 0);
    std::fill(seen_stamp_.begin(), seen_stamp_.end(), 0);
    std::fill(host_rows_.begin(), host_rows_.end(), -1);
    free_rows_.clear();
    rows_handed_out_ = 0;
    ResetResidency();
    std::fill(routed_to_.begin(), routed_to_.end(), 0);
    last_prepare_decode_ = false;
  }
  last_length_ = seq.length();
  host_view_ = seq.pool().view();
  if (pending > 0) ++clock_;
  // A start over emptied the working set above (last_prepare_decode_ was cleared with it).
  defer_step_ = behind_ && pending > 0 && last_prepare_decode_;
  last_prepare_decode_ = pending > 0;
  int64_t most = 0;
  for (int l = 0; l < layers_; ++l) {
    for (int h = 0; h < heads_; ++h) {
      most = std::max<int64_t>(most, static_cast<int64_t>(seq.pages(l, h).size()));
    }
  }
  return Grow(most);
}

void DeviceSelection::CollectChanges(const KvSequence& seq, int pending) {
  const PagePool& pool = seq.pool();
  // Changed entries (flat index, page id, token count, summary row), scattered into the device's
  // lists by one upload and one op per array: a step changes a few entries of most lists (the
  // growing tail page) and a few dozen of the lists an index re-arranged.
  changed_idx_.clear();
  changed_ids_.clear();
  changed_lens_.clear();
  changed_rows_.clear();
  std::vector<int32_t>& to_bound_ids = bound_stage_ids_;
  std::vector<int32_t>& to_bound_lens = bound_stage_lens_;
  std::vector<int32_t>& to_bound_rows = bound_stage_rows_;
  to_bound_ids.clear();
  to_bound_lens.clear();
  to_bound_rows.clear();
  route_slots_.clear();
  route_ranges_.clear();
  // Routes computed before and not taken are dropped (their step's update went without them).
  route_keys_.clear();
  const int p_size = layout_.page_size;
  int32_t* lim = limits_host_.data();
  int32_t* pend = pending_host_.data();
  const int64_t length = seq.length();
  std::fill(planned_nodes_.begin(), planned_nodes_.end(), 0);
  for (int l = 0; l < layers_; ++l) {
    for (int h = 0; h < heads_; ++h) {
      const int64_t r = static_cast<int64_t>(l) * heads_ + h;
      const int64_t base = r * stride_;
      const std::vector<PageRef>& pages = seq.pages(l, h);
      const int32_t count = static_cast<int32_t>(pages.size());
      // An unchanged stamp: only the last known page and the pages after it may differ. A list
      // the index re-arranged since: what its edit names (HeadEdit), or everything.
      const uint64_t stamp = seq.stamp(l, h);
      int32_t from = std::max(0, std::min(synced_[r] - 1, count));
      std::span<const int32_t> also;
      if (stamp != seen_stamp_[r]) {
        const HeadEdit* edit = seq.EditSince(l, h, seen_stamp_[r]);
        from = edit != nullptr ? std::min(from, edit->from) : 0;
        if (edit != nullptr) also = edit->entries;
      }
      seen_stamp_[r] = stamp;
      auto visit = [&](int32_t e) {
        const PageRef& p = pages[e];
        if (e >= synced_[r] || host_ids_[base + e] != p.id || host_lens_[base + e] != p.len) {
          // Each entry owns a summary row while the list has it; whatever page the entry now
          // holds is summarized into that row below.
          if (e >= synced_[r]) host_rows_[base + e] = TakeRow();
          host_ids_[base + e] = p.id;
          host_lens_[base + e] = p.len;
          host_vers_[base + e] = kNotSummarized;
          changed_idx_.push_back(static_cast<int32_t>(base + e));
          changed_ids_.push_back(p.id);
          changed_lens_.push_back(p.len);
          changed_rows_.push_back(host_rows_[base + e]);
        }
        // New contents wherever the page sits (sink, window or selectable): summarizing it also
        // marks any resident copy stale, which its token count alone cannot tell (a page freed
        // and handed out again may come back with the same id and count). The page that holds
        // the step's own tokens is summarized at the next call: their keys are written during
        // the step, layer by layer (its resident copies are stale by their token count).
        const uint64_t ver = pool.version(p.id);
        if (p.len >= 1 && host_vers_[base + e] != ver && !(pending > 0 && e == count - 1)) {
          host_vers_[base + e] = ver;
          to_bound_ids.push_back(p.id);
          to_bound_lens.push_back(p.len);
          to_bound_rows.push_back(host_rows_[base + e]);
        }
      };
      for (int32_t e : also) {
        if (e < from && e < count) visit(e);
      }
      for (int32_t e = from; e < count; ++e) visit(e);
      for (int32_t e = count; e < synced_[r]; ++e) {  // entries the list no longer has
        GiveRow(host_rows_[base + e]);
        host_rows_[base + e] = -1;
      }
      synced_[r] = count;
      pend[r] = pending > 0 && count > 0 ? pages[count - 1].id : -1;
      int32_t* row = lim + r * 5;
      row[0] = count;
      if (length <= limits_.budget && count <= limits_.max_pages) {
        row[1] = row[2] = row[3] = row[4] = 0;  // covered: every entry is "window"
        continue;
      }
      const ListRegions reg = RegionsOf(seq, l, h, limits_);
      row[1] = reg.sink_end;
      row[2] = reg.window_begin;
      row[3] = limits_.budget - reg.sink_tokens - reg.window_tokens;
      row[4] = limits_.max_pages - reg.sink_end - (reg.end - reg.window_begin);
      planned_nodes_[l] += reg.window_begin - reg.sink_end;
      // Loose pages (whole pages between the leaves and the window) not routed yet, against
      // the leaf entries [sink_end, tail), once the index update after this step takes them in
      // (the list's insertions are staggered: IceCacheIndex::Stagger), so that a step routes
      // the pages of a few lists rather than one page of every list every page_size steps.
      const int32_t tail = seq.tail_index(l, h);
      if (!route_ || pending == 0 || tail <= reg.sink_end) continue;
      const int64_t due =
          length - limits_.window - ice::IceCacheIndex::Stagger(config_, layout_, l, h);
      int64_t pos = seq.tail_pos(l, h);
      for (int32_t e = tail; e < reg.window_begin && pos + p_size <= due; ++e, pos += p_size) {
        const PageRef& page = pages[e];
        if (pos < routed_to_[r]) continue;
        for (int t = 0; t < page.len; ++t) {
          route_slots_.push_back(page.id * p_size + t);
          route_ranges_.insert(route_ranges_.end(), {static_cast<int32_t>(r), reg.sink_end, tail});
          route_keys_.push_back({l, h, pos + t, -1});
        }
        routed_to_[r] = pos + page.len;
      }
    }
  }
}

PageSelectArgs DeviceSelection::SelectArgs(int layer, const Tensor& q, const Picks& picks) const {
  const int64_t first = static_cast<int64_t>(layer) * heads_;
  PageSelectArgs s;
  s.q = q;
  s.list_ids = list_ids_.Slice(first, first + heads_);
  s.list_lens = list_lens_.Slice(first, first + heads_);
  s.list_rows = list_rows_.Slice(first, first + heads_);
  s.limits = limits_dev_.Slice(first, first + heads_);
  s.bounds = bounds_;
  s.spread = spread_;
  s.scores = picks.scores;
  s.out_ids = picks.ids;
  s.out_lens = picks.lens;
  s.out_count = picks.count;
  s.n_heads = n_heads_;
  return s;
}

void DeviceSelection::Select(int layer, const Tensor& q) {
  backend_->SelectPages(SelectArgs(layer, q));
}

const DeviceSelection::Picks& DeviceSelection::LayerPicks(int layer) const {
  return behind_ ? layer_picks_[layer] : picks_;
}

PageMapArgs DeviceSelection::MapArgs(int layer, const WorkingSet& ws) const {
  PageMapArgs m = MapArgs(layer, ws, LayerPicks(layer));
  if (defer_step_) {
    const int64_t first = static_cast<int64_t>(layer) * heads_;
    m.defer_limits = limits_dev_.Slice(first, first + heads_);
    m.defer_after = now_pages_;
  }
  return m;
}

PageMapArgs DeviceSelection::BehindMapArgs(int layer, const WorkingSet& ws) const {
  Picks p = LayerPicks(layer);
  p.fetch = behind_fetch_;
  PageMapArgs m = MapArgs(layer, ws, p);
  m.pending = no_pending_;
  return m;
}

void DeviceSelection::CopyBehind(int layer, const WorkingSet& ws) {
  if (defer_step_) backend_->MapPages(BehindMapArgs(layer, ws));
}

PageMapArgs DeviceSelection::MapArgs(int layer, const WorkingSet& ws, const Picks& picks) const {
  PageMapArgs m;
  m.sel_ids = picks.ids;
  m.sel_lens = picks.lens;
  m.sel_count = picks.count;
  m.host = host_view_;
  m.slots = ws.view();
  m.first_group = layer * heads_;
  m.capacity = capacity_;
  m.resident = resident_;
  m.slot_page = slot_page_;
  m.slot_len = slot_len_;
  m.slot_used = slot_used_;
  m.clock = clock_;
  m.table = table_;
  m.fetch = picks.fetch;
  m.counters = counters_;
  return m;
}

PageTableView DeviceSelection::Table() const {
  const int32_t* t = table_.data_as<const int32_t>();
  PageTableView table;
  table.indptr = t;
  table.indices = t + heads_ + 1;
  table.lens = t + heads_ + 1 + static_cast<int64_t>(heads_) * limits_.max_pages;
  table.num_rows = heads_;
  return table;
}

void DeviceSelection::Map(int layer, const WorkingSet& ws, PageTableView* table) {
  backend_->MapPages(MapArgs(layer, ws));
  *table = Table();
}

PageMapArgs DeviceSelection::PrefetchMapArgs(int layer, const WorkingSet& ws) const {
  PageMapArgs m = MapArgs(layer, ws, prefetch_picks_);
  const int64_t first = static_cast<int64_t>(layer) * heads_;
  m.pending = pending_dev_.Slice(first, first + heads_);
  return m;
}

void DeviceSelection::Prefetch(int layer, const Tensor& q, const WorkingSet& ws, int percent,
                               bool defer_copy) {
  PageSelectArgs s = SelectArgs(layer, q, prefetch_picks_);
  s.n_heads = static_cast<int>(q.numel() / layout_.head_dim);  // the estimate may hold fewer
  backend_->SelectPages(s);
  PageMapArgs m = PrefetchMapArgs(layer, ws);
  if (percent < 100) {
    const int budget_pages = (limits_.budget + layout_.page_size - 1) / layout_.page_size;
    m.prefetch_pages = std::max(1, budget_pages * std::max(percent, 0) / 100);
  }
  if (defer_copy) m.stage = MapStage::kPlace;
  backend_->MapPages(m);
}

void DeviceSelection::CopyPrefetched(int layer, const WorkingSet& ws) {
  PageMapArgs m = PrefetchMapArgs(layer, ws);
  m.stage = MapStage::kCopy;
  backend_->MapPages(m);
}

Result<WorkingSetCounters> DeviceSelection::Counters(const KvLayout& layout) {
  ICECACHE_RETURN_IF_ERROR(backend_->Copy(counters_, counters_host_));
  backend_->Synchronize();
  const int64_t* c = reinterpret_cast<const int64_t*>(counters_host_.data());
  WorkingSetCounters w;
  w.hits = c[0];
  w.pages_fetched = c[1];
  w.pages_prefetched = c[3];
  w.bytes_fetched = (c[1] + c[3]) * layout.page_bytes();  // every page that crossed
  w.pages_deferred = c[4];
  w.lookups = c[0] + c[1] + c[4];  // every listed page is a hit, fetched or deferred
  w.tokens_listed = c[2];
  return w;
}

int64_t DeviceSelection::device_bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&list_ids_,
                          &list_lens_,
                          &list_rows_,
                          &picks_.scores,
                          &picks_.ids,
                          &picks_.lens,
                          &picks_.count,
                          &picks_.fetch,
                          &prefetch_picks_.scores,
                          &prefetch_picks_.ids,
                          &prefetch_picks_.lens,
                          &prefetch_picks_.count,
                          &prefetch_picks_.fetch,
                          &behind_ids_,
                          &behind_lens_,
                          &behind_count_,
                          &behind_fetch_,
                          &no_pending_,
                          &resident_,
                          &slot_page_,
                          &slot_len_,
                          &slot_used_,
                          &table_,
                          &counters_,
                          &upload_dev_,
                          &route_dev_}) {
    b += t->empty() ? 0 : t->numel() * 4;
  }
  return b;
}

}  // namespace icecache
