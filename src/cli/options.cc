#include "cli/options.h"

#include <charconv>
#include <cstdio>

namespace icecache::cli {

EngineOptions ModelOptions::ToEngineOptions() const {
  EngineOptions e;
  e.model = model;
  e.device = device;
  e.threads = threads;
  e.context_size = ctx_size;
  e.prefill_chunk = prefill_chunk;
  e.kv = kv;
  e.kv_offload = kv_offload;
  e.kv_select = kv_select;
  e.kv_prefetch = kv_prefetch;
  e.kv_route = kv_route;
  e.index_update = index_update;
  e.kv_timing = kv_timing;
  e.device_mem_limit = device_mem_limit;
  e.synthetic = synthetic;
  return e;
}

void OffloadForPolicies(const std::vector<std::string>& policies, EngineOptions* options) {
  if (options->kv_offload != "auto") return;
  for (const std::string& p : policies) {
    if (p != "full") options->kv_offload = "on";
  }
}

SamplingParams SamplingOptions::ToParams() const {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.repetition_window = repeat_last_n;
  p.seed = seed;
  return p;
}

namespace {

// A validator that accepts a whole number no smaller than `min` (written in full: no fraction,
// exponent or trailing text).
CLI::Validator WholeNumberFrom(long long min, const std::string& what) {
  return CLI::Validator(
      [min, what](std::string& text) -> std::string {
        long long v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || ec != std::errc() || ptr != end || v < min) {
          return "'" + text + "' is not " + what;
        }
        return {};
      },
      min > 0 ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace

const CLI::Validator& PositiveInt() {
  static const CLI::Validator v = WholeNumberFrom(1, "a positive whole number");
  return v;
}

const CLI::Validator& NonNegativeInt() {
  static const CLI::Validator v = WholeNumberFrom(0, "a whole number >= 0");
  return v;
}

void AddModelOptions(CLI::App& app, ModelOptions* o) {
  app.add_option("-m,--model", o->model,
                 "GGUF file, Hugging Face model folder, or 'default' (SmolLM2-135M-Instruct)")
      ->capture_default_str();
  app.add_option("--synthetic", o->synthetic,
                 "random-weight model of this shape instead of --model, for speed runs "
                 "(llama-3.1-8b, llama-3.2-3b, qwen2.5-7b, smollm2-135m, tiny; no tokenizer: "
                 "bench only)");
  app.add_option("--device", o->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--device-mem-limit", o->device_mem_limit,
                 "GPU: cap the device memory the engine may allocate, e.g. 24G (emulates a "
                 "smaller GPU; what does not fit fails as it would there)")
      ->transform(CLI::AsSizeValue(false))
      // CLI11 runs the transform added last first: negative sizes are refused before
      // AsSizeValue reads them as huge unsigned numbers.
      ->transform(CLI::Validator(
          [](std::string& text) -> std::string {
            return !text.empty() && text[0] == '-' ? "'" + text + "' is not a size (e.g. 24G)" : "";
          },
          "SIZE"));
  app.add_option("-t,--threads", o->threads,
                 "CPU threads (0: all cores): the model's compute on the CPU, and the threads "
                 "that build, update and search KV indexes (on a GPU, those alone)")
      ->check(NonNegativeInt());
  app.add_option("-c,--ctx-size", o->ctx_size,
                 "context limit in tokens (0: the model's trained context)")
      ->check(NonNegativeInt());
  app.add_option("--prefill-chunk", o->prefill_chunk, "prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  KvConfig& kv = o->kv;
  app.add_option("--kv-policy", kv.policy,
                 "KV selection policy: full, streaming, quest, oracle, icecache, lychee")
      ->capture_default_str();
  app.add_option("--kv-budget", kv.budget,
                 "tokens attended per (layer, KV head) per decode step, sink and window included")
      ->check(PositiveInt())
      ->capture_default_str();
  app.add_option("--kv-page", kv.page_size, "tokens per KV page")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--kv-sink", kv.sink, "first tokens always attended (default: one page)")
      ->check(NonNegativeInt());
  app.add_option("--kv-window", kv.window,
                 "most recent tokens always attended (default: a quarter of the budget)")
      ->check(NonNegativeInt());
  app.add_option("--kv-dense-layers", kv.dense_layers, "first N layers attend every token")
      ->check(NonNegativeInt());
  app.add_option("--kv-fetch", kv.fetch,
                 "device-side selection: when selected pages missing from the device cross the "
                 "host link: now (before the layer attends: exactly the selected pages) or "
                 "behind (experimental: beside the rest of the step, for the next step; a "
                 "layer attends its sink, window and the selected pages already resident, "
                 "which costs accuracy, docs/ACCURACY.md)")
      ->check(CLI::IsMember({"now", "behind"}))
      ->capture_default_str();
  app.add_option("--kv-working-set", kv.working_set,
                 "tokens of KV each (layer, KV head) keeps in the working set (device memory on "
                 "a GPU); pages a step stops selecting stay there until spare slots run out, so "
                 "fewer are fetched again; never less than what one step selects (default 0: "
                 "exactly that)")
      ->check(NonNegativeInt());
  app.add_flag("--kv-exact", kv.exact,
               "icecache and lychee: bound-pruned search equal to exhaustive scoring (icecache: "
               "by bound; lychee: by exact q.k, its auto search with w 1)");
  app.add_option("--kv-rank", kv.rank,
                 "icecache: rank leaves by soft (tree search, keys scored) or centroid (linear "
                 "scan of leaf means, as on the device); auto: centroid where selection runs on "
                 "the GPU. lychee: auto (best-bound-first search, host), spread (search ordered "
                 "by the keys' spread along the query: fewer nodes, weaker on needles) or "
                 "centroid (chunk pages ranked by mean key, selectable on the device)")
      ->check(CLI::IsMember({"auto", "soft", "centroid", "spread"}))
      ->capture_default_str();
  app.add_option("--kv-search-radius", kv.search_radius,
                 "icecache (rank soft) and lychee: how far the search looks past an index "
                 "node's centroid, w in [0, 1]: icecache and lychee rank spread open nodes in "
                 "the order of q.c + w sqrt(2 ln n) s (s: the spread of the node's n keys along "
                 "q), lychee rank auto prunes by q.c + w|q|r (1: its true bound); smaller: "
                 "fewer nodes opened (default: icecache 0.7, lychee 0.5, lychee spread 0.2)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--kv-search-score", kv.search_score,
                 "icecache (rank soft): score keys by their best q.k (logit) or by the "
                 "attention mass they carry for the group's query heads (mass: each head's "
                 "normalizer estimated from the sink, window and the last step's picks)")
      ->check(CLI::IsMember({"logit", "mass"}))
      ->capture_default_str();
  app.add_option("--kv-search-leaves", kv.search_leaves,
                 "icecache (rank soft): candidate leaves the tree search gathers before "
                 "scoring their keys (0: the budget's room in pages plus 8)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-reuse-layers", kv.reuse_layers,
                 "icecache: consecutive layers sharing one tree and selection")
      ->check(PositiveInt());
  app.add_option("--kv-oracle-unit", kv.oracle_unit, "oracle: page or token")
      ->check(CLI::IsMember({"page", "token"}));
  app.add_option("--kv-oracle-score", kv.oracle_score,
                 "token oracle: rank tokens by their best q.k (logit) or by the attention mass "
                 "they carry for the group's query heads (mass: the most mass any selection of "
                 "the budget attends)")
      ->check(CLI::IsMember({"logit", "mass"}))
      ->capture_default_str();
  app.add_option("--kv-dtype", kv.dtype,
                 "stored K/V type: auto (f32 on CPU, bf16 on GPU), f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_flag("--kv-recall", kv.recall,
               "measure attention-mass recall (exact softmax mass on the attended tokens) at "
               "every decode step; a full attention pass per step on the host; shown by "
               "--kv-stats");
  app.add_option("--kv-offload", o->kv_offload,
                 "GPU: keep the full KV in pinned host memory and only the selected pages on the "
                 "device (auto: on for sparse policies; off: all KV in device memory, dense only)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--kv-select", o->kv_select,
                 "where a sparse policy selects: device (kernels, no host round trip per layer; "
                 "quest, and icecache or lychee ranking by centroid), host (the policy's index on "
                 "the host), "
                 "auto (device where supported, "
                 "on a GPU)")
      ->check(CLI::IsMember({"auto", "device", "host"}))
      ->capture_default_str();
  app.add_option("--kv-route", o->kv_route,
                 "icecache: where a token leaving the recent window finds its leaf: host (the "
                 "index's tree search during the update) or device (the nearest leaf mean key, "
                 "computed by device-side selection during the step; needs --kv-select device "
                 "or auto on a GPU; on the CPU backend a slow reference op)")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
  app.add_option("--kv-prefetch", o->kv_prefetch,
                 "device-side selection: while a layer computes, fetch the next layer's likely "
                 "pages from an early estimate of its queries (the selection itself is "
                 "unchanged); auto: for a step of one sequence on a GPU, timed: runs of steps "
                 "with and without it, the faster kept (timed again every 250 steps); off for "
                 "batches (the sequences' prefetches queue one after another) and on the CPU, "
                 "where it cannot overlap")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--index-update", o->index_update,
                 "when an index takes in the tokens that left the recent window: beside (on a "
                 "host thread during the next decode step's device work; icecache selecting on "
                 "the device), after (after the step, the device idle), auto (beside on a GPU)")
      ->check(CLI::IsMember({"auto", "beside", "after"}))
      ->capture_default_str();
  app.add_flag("--kv-timing", o->kv_timing,
               "split each step's time into select/fetch/attend for device-side selection, "
               "with the fetch's rate in GB/s (waits for the device between phases, "
               "--kv-prefetch's side work included, so the prefetch no longer overlaps)");
}

void AddSamplingOptions(CLI::App& app, SamplingOptions* o) {
  app.add_option("--temp", o->temp, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0: off)")
      ->check(NonNegativeInt());
  app.add_option("--top-p", o->top_p, "nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", o->min_p, "drop tokens below min-p times the top probability")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1: off)")
      ->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--repeat-last-n", o->repeat_last_n,
                 "tokens the repetition penalty looks back over (0: all)")
      ->check(NonNegativeInt());
  app.add_option("-s,--seed", o->seed, "random seed");
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

}  // namespace icecache::cli
