// streaming (StreamingLLM): the sink tokens and the recent window, nothing else.
#include "index/policies.h"
#include "index/regions.h"

namespace icecache {

namespace {

class StreamingIndex : public SequenceIndex {
 public:
  explicit StreamingIndex(const IndexContext& c) : c_(c) {}
  Status OnAppend(KvSequence&, int64_t, std::span<const int32_t>) override { return Status::Ok(); }
  void Select(const KvSequence& seq, int layer, const float*, std::span<std::vector<PageRef>> out,
              SelectionStats*) override {
    const SelectionLimits& lim = c_.limits;
    for (int h = 0; h < c_.layout.n_kv_heads; ++h) {
      out[h].clear();
      const ListRegions r = RegionsOf(seq, layer, h, lim);
      if (r.window_begin == r.sink_end) {  // nothing between sink and window: attend all
        SelectAll(seq, layer, h, &out[h]);
        continue;
      }
      AssembleSelection(seq, layer, h, r, lim, {}, &out[h]);
    }
  }
  int64_t MemoryBytes() const override { return 0; }
  int64_t AppendPagesBound(const KvSequence&) override { return 0; }  // allocates none

 private:
  IndexContext c_;
};

}  // namespace

Result<std::unique_ptr<SequenceIndex>> MakeStreamingIndex(const IndexContext& context) {
  return std::unique_ptr<SequenceIndex>(new StreamingIndex(context));
}

}  // namespace icecache
