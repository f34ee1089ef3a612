// How the KV cache of a sequence is kept and which of it each decode step attends to.
#pragma once

#include <string>

#include "icecache/status.h"

namespace icecache {

struct KvConfig {
  // Selection policy: "full" (every page), "streaming" (sink + window), "quest", "oracle",
  // "icecache", "lychee".
  std::string policy = "full";
  // Tokens attended per (layer, KV head) per decode step, sink and window included. Ignored by
  // "full". Layers kept dense (dense_layers) attend everything and are reported separately.
  int budget = 256;
  int page_size = 16;    // tokens per KV page
  int sink = -1;         // first tokens always attended; -1: one page
  int window = -1;       // most recent tokens always attended; -1: a quarter of the budget
  int dense_layers = 0;  // the first N layers attend densely
  // icecache: prune by centroid/radius bounds so the result equals exhaustive scoring by bound.
  // lychee: its bound search unnarrowed, whose result equals exhaustive scoring of every chunk.
  bool exact = false;
  // icecache: how leaves are ranked. "soft": best-first search down the tree, the best leaves
  // scored by the soft maximum of their keys; "centroid": every leaf (and loose page) by the best
  // q.c of the group's query heads over its mean key c stored in the KV dtype, a linear scan, as
  // the device selection does; "auto": centroid when the selection runs in device memory (a GPU),
  // soft otherwise. lychee: "auto", its bound search; "spread", its search ordered by the keys'
  // spread along the query (fewer nodes; weaker on needles, docs/ACCURACY.md); "centroid", chunk
  // pages by mean key (selectable on the device). --kv-exact (bound) excludes centroid and spread.
  std::string rank = "auto";
  // How far the host searches of icecache (rank soft) and lychee (rank auto or spread) look
  // past a node's centroid, a weight w in [0, 1]. icecache, and lychee with rank spread, open
  // their index's nodes in the order of q.c + w sqrt(2 ln n) s, s the spread of the node's n
  // keys along q (icecache/tree_search.h, lychee/search.h); lychee's default search prunes by
  // q.c + w |q| r, and at 1, its true bound, picks exactly what exhaustive scoring picks. Smaller
  // weights open fewer nodes (0: centroids alone). -1: the default (icecache 0.7, lychee 0.5,
  // lychee with rank spread 0.2).
  float search_radius = -1;
  // icecache (rank soft): how the tree search scores keys. "logit": by q.k, the best of the
  // group's query heads. "mass": by the attention mass they carry, each head's q.k less its log
  // softmax normalizer, estimated from the sink, the window and what the list's previous search
  // picked (index/icecache/head_norm.h); one more scoring of about a budget of keys per step.
  // More recall, but it lost needles the default keeps (docs/ACCURACY.md).
  std::string search_score = "logit";
  // icecache (rank soft): leaves the tree search gathers as candidates before it scores their
  // keys. 0: the pages the budget leaves room for, plus 8.
  int search_leaves = 0;
  // icecache: consecutive layers that share one tree and one selection (1: no sharing).
  int reuse_layers = 1;
  // oracle: "page" (best pages by exact max q.k) or "token" (best tokens).
  std::string oracle_unit = "page";
  // Token oracle: how candidate tokens are ranked. "logit": by their best q.k over the group's
  // query heads. "mass": by the attention mass they carry, summed over the group's query heads:
  // sum_g exp(s q_g.k - lse_g), lse_g the exact log-sum-exp of head g's logits over the list, so
  // the oracle attends the most attention mass any selection with the same sink and window can
  // (what --kv-recall measures). The page oracle ignores it.
  std::string oracle_score = "logit";
  // Element type of stored K/V: "auto" (f32 on the CPU, bf16 on GPUs), "f32", "f16", "bf16".
  std::string dtype = "auto";
  // Measure attention-mass recall at every decode step (--kv-recall): the share of the exact
  // softmax mass, over every key of each (layer, KV head), that falls on the attended tokens.
  // Costs a full attention pass per step on the host; results are in KvStats.
  bool recall = false;
  // When a decode step's selected pages that are not on the device cross the host link
  // (device-side selection): "now", before the layer attends (it attends exactly what it
  // selected); "behind", beside the rest of the step, for the next step: a layer attends its
  // sink, window and the selected pages already resident, and the others from the next step on
  // (a step right after a prompt fetches now). Takes the host link off the step's critical path
  // at a cost in what is attended (docs/ACCURACY.md).
  std::string fetch = "now";
  // Tokens of KV that each (layer, KV head) keeps in the working set (the device's page slots
  // on a GPU). 0: the pages one step may select (sink, window and partly filled pages included).
  // A larger set keeps pages a step stops selecting until its spare slots run out, so pages
  // that come back are not fetched again, at the cost of device memory (docs/PERF.md). Raised to
  // the default when smaller.
  int working_set = 0;

  // Sink and window after resolving the -1 defaults (tokens).
  int ResolvedSink() const;
  int ResolvedWindow() const;
  // search_radius after resolving the -1 default.
  float ResolvedSearchRadius() const;
  // Checks names and ranges; the message names the offending option (--kv-...).
  Status Validate() const;
  // "icecache budget 256 (sink 16, window 64, page 16)" or "full".
  std::string Describe() const;
};

}  // namespace icecache
