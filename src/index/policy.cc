#include "index/policy.h"

#include <algorithm>

#include "index/icecache/segment_layout.h"
#include "index/policies.h"

namespace icecache {

SelectionLimits LimitsFor(const KvConfig& config) {
  SelectionLimits l;
  l.budget = config.budget;
  const int p = config.page_size;
  const int full = (config.budget + p - 1) / p;  // pages the budget fills
  // Semantic pages may be partly filled: allow twice the pages full pages would need. Icecache
  // ranked by centroid (how it selects in device memory) takes a quarter more instead: its bulk
  // builds fill every leaf but the last of a run, the cap sizes the device working set (which
  // counts against the device-memory target), and on SmolLM2 at 8K, budgets 256 and 1024, it
  // changed recall by less than 0.001. The soft ranking keeps twice the pages: with the tighter
  // cap its teacher-forced top-1 agreement fell from 0.906 to 0.893 (docs/ACCURACY.md).
  const bool tight = config.policy == "icecache" && config.rank == "centroid";
  l.max_pages = (tight ? full + full / 4 : 2 * full) + 4;
  l.sink = config.ResolvedSink();
  l.window = config.ResolvedWindow();
  return l;
}

int64_t PoolPagesFor(const KvConfig& config, const KvLayout& layout, int64_t tokens) {
  const int64_t positional = layout.PagesForTokens(tokens);
  if (config.policy == "lychee") {
    // Chunks of at least half a page fill their pages at least half on average; the sink,
    // pending and tail pages add at most 4 pages per list.
    return 2 * positional + 4LL * layout.n_layers * layout.n_kv_heads;
  }
  if (config.policy == "icecache") {
    // Leaves hold at least L = max(1, P / 2) tokens (balanced splits and bulk partitions),
    // except a list's only leaf while its leaves hold fewer than P tokens; sink and tail pages
    // are positional. So a list of n tokens holds at most n / L + 3 pages.
    const int64_t min_fill = std::max(1, layout.page_size / 2);
    return ((tokens + min_fill - 1) / min_fill + 4) * layout.n_layers * layout.n_kv_heads;
  }
  return positional;
}

int64_t PinnedPoolPagesFor(const KvConfig& config, const KvLayout& layout, int64_t tokens,
                           int64_t sequences) {
  const int64_t worst = sequences * PoolPagesFor(config, layout, tokens);
  if (config.policy != "icecache") return worst;
  const int64_t positional = layout.PagesForTokens(tokens);
  const int64_t lists = static_cast<int64_t>(layout.n_layers) * layout.n_kv_heads;
  const int32_t list_pages =
      static_cast<int32_t>((tokens + layout.page_size - 1) / layout.page_size);
  const int64_t runs = static_cast<int64_t>(ice::RunLengths(list_pages, layout.page_size).size());
  const int64_t steady = positional + positional / 8 + lists * (runs + 4);
  return std::min(worst, sequences * steady + positional);
}

Result<std::unique_ptr<SequenceIndex>> MakeSequenceIndex(const IndexContext& context) {
  const std::string& p = context.config.policy;
  if (p == "full") return std::unique_ptr<SequenceIndex>();
  if (p == "streaming") return MakeStreamingIndex(context);
  if (p == "quest") return MakeQuestIndex(context);
  if (p == "oracle") return MakeOracleIndex(context);
  if (p == "icecache") return MakeIceCacheIndex(context);
  if (p == "lychee") return MakeLycheeIndex(context);
  return InvalidArgument("unknown KV policy '" + p + "'");
}

}  // namespace icecache
