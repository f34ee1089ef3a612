// Selection policies: which pages of a sequence each decode step attends to.
//
// A policy keeps a SequenceIndex per sequence. The index sees keys as they are appended
// (prefill chunks and decode tokens, through OnAppend) and, once per decode step and layer,
// that layer's queries (Select); it returns, per KV head, an ordered list of pages within the
// budget. The query heads of a GQA group share one selection. Storage stays apart from search:
// an index reads keys from the sequence's pages and may re-arrange the pages before the tail
// (KvSequence::ReplaceHead), but never owns K/V.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "icecache/kv_config.h"
#include "kv/kv_sequence.h"

namespace icecache {

class ThreadPool;

class Tokenizer;

// What a step may attend per (layer, KV head).
struct SelectionLimits {
  int budget = 0;     // tokens, sink and window included
  int max_pages = 0;  // pages (semantic pages may be partly filled)
  int sink = 0;       // tokens at the start, always attended
  int window = 0;     // most recent tokens, always attended
};

struct IndexContext {
  KvConfig config;
  KvLayout layout;
  int n_heads = 0;  // query heads
  SelectionLimits limits;
  const Tokenizer* tokenizer = nullptr;  // for boundary-aware chunking (may be null)
  // Host threads an index may use to maintain the lists of its sequence in parallel (may be
  // null: one thread). Shared by the engine's indexes, which never run at the same time.
  ThreadPool* workers = nullptr;
  // Whether the index may work on a prompt's keys on `workers` while its later chunks prefill
  // (OnPrefillChunk): set when the model runs elsewhere (a GPU), so that the two do not compete
  // for the same cores.
  bool overlap_prefill = false;
};

// Work an index did for one Select call (summed over the KV heads of the call).
struct SelectionStats {
  int64_t nodes_visited = 0;  // tree nodes, clusters, chunks or pages whose bound was computed
  int64_t keys_scored = 0;    // exact q.k products
};

// An insertion route computed outside the index (--kv-route device: Backend::RouteKeys over the
// summaries of device-side selection): the token at `position` of list (layer, head), once it
// leaves the recent window, joins the page at list entry `entry` (as the list was when the route
// was computed).
struct KeyRoute {
  int32_t layer = 0;
  int32_t head = 0;
  int64_t position = 0;
  int32_t entry = -1;
};

class SequenceIndex {
 public:
  virtual ~SequenceIndex() = default;

  // Tokens [first, seq.length()) were appended to every layer (their K/V are in the pages);
  // `tokens` are their ids. Called after every decode step and once after a whole prompt (its
  // prefill chunks attend densely, so the index sees the prompt at once).
  virtual Status OnAppend(KvSequence& seq, int64_t first, std::span<const int32_t> tokens) = 0;

  // Called during a prompt's prefill after each chunk but the last, with the length the prompt
  // will have: the index may start work on pages that will not change before the prompt's
  // OnAppend, in the background, while the next chunks run. It calls `kv_ready` (which waits
  // for the chunks' K/V writes) before it reads any page, and it never changes `seq`; OnAppend,
  // StopBackground, OnTruncate and the destructor finish or drop that work. The result must not
  // depend on whether this ran. Default: nothing.
  virtual Status OnPrefillChunk(const KvSequence& seq, int64_t prompt_end,
                                const std::function<void()>& kv_ready) {
    return Status::Ok();
  }

  // Pages to attend at this decode step of `layer`. `q` holds the layer's n_heads query
  // vectors (after RoPE, f32, host memory). For each KV head h, out[h] receives an ordered list
  // whose tokens total at most limits.budget in at most limits.max_pages pages; every listed
  // page belongs to (layer, h). Sink and window pages come first and last.
  virtual void Select(const KvSequence& seq, int layer, const float* q,
                      std::span<std::vector<PageRef>> out, SelectionStats* stats) = 0;

  // Token-level policies (oracle per token) choose single tokens instead of pages: they
  // answer true here and implement SelectTokens, which lists for each KV head the host slots
  // (page * page_size + offset) of at most limits.budget tokens. The attention gathers them.
  virtual bool token_level() const { return false; }
  virtual void SelectTokens(const KvSequence& seq, int layer, const float* q,
                            std::span<std::vector<int32_t>> slots, SelectionStats* stats) {}

  // Finishes or drops the work OnPrefillChunk started. Call it before the sequence drops tokens
  // (KvSequence::Truncate): that work reads the sequence's pages and allocates pages from its
  // pool, so pages freed while it runs could be read and written at once. Default: nothing.
  virtual void StopBackground() {}

  // Called after the sequence was truncated (only tail tokens are ever dropped), and after
  // StopBackground.
  virtual void OnTruncate(const KvSequence& seq) {}

  // Bytes of index metadata (not K/V).
  virtual int64_t MemoryBytes() const = 0;

  // At most how many pool pages the next OnAppend may allocate (before it frees any), with `seq`
  // as it is now (the new tokens appended), or -1 when the index cannot tell. The engine runs the
  // OnAppends of several sequences at once, each on its own thread, only when the bounds of all
  // of them fit the pool's spare pages together (then none of them can find the pool short).
  // Default: -1 (the sequence's OnAppend runs alone).
  virtual int64_t AppendPagesBound(const KvSequence& seq) { return -1; }

  // Whether OnAppend may run beside the next decode step's device work, which reads the pages
  // the lists showed before it, and with the next token's slot already in `seq` (not yet
  // written; OnAppend(seq, first, tokens) with the step's ids then covers tokens up to
  // first + tokens.size() only).
  // The engine holds the pool's frees meanwhile (PagePool::HoldFrees); the index must never
  // rewrite a row that a page already holds (it may write rows past a page's count, and fresh
  // pages). An OnAppend the engine then skips (a failed step) must lose nothing: the next one
  // takes in what it missed. Default: false (OnAppend runs after the step, the device idle).
  virtual bool UpdatesBesideDeviceReads() const { return false; }

  // Routes for tokens the next OnAppends take in (KeyRoute). An index that arranges tokens into
  // pages by similarity may follow them instead of searching itself; the result must stay a
  // valid arrangement whatever the routes say. Never called while OnAppend runs. Default:
  // ignored.
  virtual void AcceptRoutes(std::span<const KeyRoute> routes) {}
  // Tokens inserted so far at the leaf a KeyRoute named, and by the index's own search.
  struct InsertionCounts {
    int64_t routed = 0;
    int64_t searched = 0;
  };
  virtual InsertionCounts insertion_counts() const { return {}; }
};

// The limits a config implies (budget, page count, resolved sink and window).
SelectionLimits LimitsFor(const KvConfig& config);

// Host pages one sequence of `tokens` tokens may hold under `config`, over all layers and KV
// heads (the engine sizes its page pool with it). Policies that re-arrange tokens into partly
// filled pages need more than positional paging does.
int64_t PoolPagesFor(const KvConfig& config, const KvLayout& layout, int64_t tokens);

// Host pages an engine reserves for `sequences` sequences of up to `tokens` tokens each when its
// pool is pinned host memory (a GPU's offloaded host tier commits all of it up front). For
// icecache it is at most sequences x (positional + 1/8 for leaves split during decode + a few
// partly filled pages per list) + one sequence's positional pages (the runs of one prompt laid
// out while it prefills), when that is less than sequences x PoolPagesFor: leaves of bulk builds
// are full but for the last of each run, and a pool short of room only skips re-arranging (the
// growth reserve, PagePool::spare, keeps every sequence's own growth safe).
int64_t PinnedPoolPagesFor(const KvConfig& config, const KvLayout& layout, int64_t tokens,
                           int64_t sequences);

// The index of `context.config.policy` ("full" has none: returns nullptr).
Result<std::unique_ptr<SequenceIndex>> MakeSequenceIndex(const IndexContext& context);

}  // namespace icecache
