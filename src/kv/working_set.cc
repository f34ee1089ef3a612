#include "kv/working_set.h"

#include <cstring>

#include "core/check.h"

namespace icecache {

Result<std::unique_ptr<WorkingSet>> WorkingSet::Create(Backend& backend, const KvLayout& layout,
                                                       int groups, int capacity, int scratch) {
  if (groups <= 0 || capacity <= 0 || scratch < 0) {
    return InvalidArgument("working set: groups and capacity must be positive");
  }
  std::unique_ptr<WorkingSet> ws(new WorkingSet());
  ws->backend_ = &backend;
  ws->capacity_ = capacity;
  ws->scratch_ = scratch;
  const int64_t total = static_cast<int64_t>(groups) * (capacity + scratch);
  ICECACHE_ASSIGN_OR_RETURN(ws->slots_, PagePool::Create(backend, layout, total));
  ws->groups_.resize(groups);
  for (Group& g : ws->groups_) g.slots.resize(capacity);
  if (backend.device() != Device::kCpu) {
    ICECACHE_ASSIGN_OR_RETURN(ws->ids_dev_, backend.Allocate(DType::kI32, {2 * total}));
  }
  return ws;
}

int64_t WorkingSet::bytes() const { return slots_->capacity() * slots_->layout().page_bytes(); }

void WorkingSet::Map(int group, std::span<const PageRef> pages, const PagePool& host,
                     std::vector<PageRef>* out) {
  Group& g = groups_[group];
  ICECACHE_CHECK(static_cast<int>(pages.size()) <= capacity_);
  const int64_t now = ++clock_;
  for (const PageRef& p : pages) {
    ++counters_.lookups;
    const uint32_t version = host.version(p.id);
    int32_t slot = -1;
    auto it = g.where.find(p.id);
    if (it != g.where.end()) {
      slot = it->second;
      if (g.slots[slot].version == version) {
        ++counters_.hits;
        g.slots[slot].last_used = now;
        out->push_back({SlotPage(group, slot), p.len});
        continue;
      }
    } else {
      // Least recently used slot not used in this call.
      int64_t oldest = now;
      for (int s = 0; s < capacity_; ++s) {
        if (g.slots[s].last_used < oldest) {
          oldest = g.slots[s].last_used;
          slot = s;
        }
      }
      ICECACHE_CHECK(slot >= 0);
      if (g.slots[slot].host_page >= 0) g.where.erase(g.slots[slot].host_page);
      g.where[p.id] = slot;
      g.slots[slot].host_page = p.id;
    }
    g.slots[slot].version = version;
    g.slots[slot].last_used = now;
    queue_src_.push_back(p.id);
    queue_dst_.push_back(SlotPage(group, slot));
    out->push_back({SlotPage(group, slot), p.len});
  }
}

Status WorkingSet::Gather(int group, std::span<const int32_t> host_slots, const PagePool& host,
                          std::vector<PageRef>* out) {
  if (backend_->device() != Device::kCpu) {
    return Unsupported("token-level selection needs a host-memory working set (CPU backend)");
  }
  const KvLayout& l = slots_->layout();
  const int p = l.page_size;
  if (static_cast<int64_t>(host_slots.size()) > static_cast<int64_t>(scratch_) * p) {
    return Internal("token selection larger than the scratch pages");
  }
  const KvPoolView src = host.view(), dst = slots_->view();
  const int64_t row = RowBytes(l.dtype, l.head_dim);
  for (size_t i = 0; i < host_slots.size(); ++i) {
    const int64_t from = host_slots[i];
    const int64_t to =
        static_cast<int64_t>(SlotPage(group, capacity_)) * p + static_cast<int64_t>(i);
    std::memcpy(static_cast<char*>(dst.k) + to * row, static_cast<const char*>(src.k) + from * row,
                row);
    std::memcpy(static_cast<char*>(dst.v) + to * row, static_cast<const char*>(src.v) + from * row,
                row);
    dst.positions[to] = src.positions[from];
  }
  counters_.rows_gathered += static_cast<int64_t>(host_slots.size());
  counters_.bytes_fetched += static_cast<int64_t>(host_slots.size()) * 2 * row;
  for (size_t i = 0; i < host_slots.size(); i += p) {
    const int32_t n = static_cast<int32_t>(std::min<size_t>(p, host_slots.size() - i));
    out->push_back({SlotPage(group, capacity_) + static_cast<int32_t>(i / p), n});
  }
  return Status::Ok();
}

Status WorkingSet::Flush(const PagePool& host) {
  if (queue_src_.empty()) return Status::Ok();
  const int64_t n = static_cast<int64_t>(queue_src_.size());
  Tensor src(queue_src_.data(), DType::kI32, {n}), dst(queue_dst_.data(), DType::kI32, {n});
  if (backend_->device() == Device::kCpu) {
    backend_->CopyPages(host.view(), slots_->view(), src, dst);
  } else {
    ICECACHE_RETURN_IF_ERROR(backend_->Copy(src, ids_dev_.Slice(0, n)));
    ICECACHE_RETURN_IF_ERROR(backend_->Copy(dst, ids_dev_.Slice(n, 2 * n)));
    backend_->CopyPages(host.view(), slots_->view(), ids_dev_.Slice(0, n),
                        ids_dev_.Slice(n, 2 * n));
  }
  counters_.pages_fetched += n;
  counters_.bytes_fetched += n * slots_->layout().page_bytes();
  queue_src_.clear();
  queue_dst_.clear();
  return Status::Ok();
}

}  // namespace icecache
