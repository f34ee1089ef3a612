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
  // Semantic pages may be partly filled. Lychee's chunks fill their pages to about half: allow
  // twice the pages. Icecache's bulk builds fill every leaf but the last of a run, and only
  // leaves split during decode drop to half: a quarter more covers them (on SmolLM2 at 8K,
  // budgets 256 and 1024, it changes recall by less than 0.002 against twice the pages), and the
  // page cap sizes the working set, whose device memory counts against the 5% target.
  l.max_pages = (config.policy == "icecache" ? full + full / 4 : 2 * full) + 4;
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
