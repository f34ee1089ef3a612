// The IceCache C++ API: load a model, generate text, keep chat sessions.
//
//   auto engine = icecache::Engine::Create({.model = "default"});
//   if (!engine.ok()) { print(engine.status().message()); return 1; }
//   icecache::GenerateRequest req{.prompt = "The capital of France is", .max_tokens = 16};
//   auto out = (*engine)->Generate(req);
//
// Every method that takes user input returns Status/Result; nothing here aborts on bad input.
// An Engine is not thread-safe: one thread drives it (servers enqueue work to that thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "icecache/chat.h"
#include "icecache/kv_config.h"
#include "icecache/sampling.h"
#include "icecache/status.h"

namespace icecache {

struct EngineOptions {
  // A .gguf file, a Hugging Face model folder, or "default" (SmolLM2-135M-Instruct from the
  // model cache; see ResolveModelPath).
  std::string model = "default";
  std::string device = "cpu";  // "cpu" or "cuda"
  int threads = 0;             // CPU threads (0: all cores): CPU backend, KV index workers
  int context_size = 0;        // tokens per sequence; 0: the model's trained context length
  int prefill_chunk = 512;     // prompt tokens per forward pass
  int max_sequences = 1;       // sequences whose full context the KV pool must hold at once
  KvConfig kv;                 // KV policy of sequences that do not choose their own
  // Where the full KV (the host tier) lives on a GPU: "on" keeps it in pinned host memory and
  // only the pages a sparse policy selects in a device working set; "off" keeps everything in
  // device memory (dense only: sparse policies need the host tier); "auto" is "on" when `kv`
  // is a sparse policy. No effect on the CPU, where all KV is in host memory.
  std::string kv_offload = "auto";
  // Where a sparse policy selects on a GPU: "device" (kernels rank pages and fill the working
  // set; no host round trip per layer; quest), "host" (the policy's index on the host, from a
  // copy of each layer's queries), "auto" (device when the policy supports it, on a GPU). The
  // CPU backend runs the same device path with its reference ops when asked for "device".
  std::string kv_select = "auto";
  // Device-side selection: while a layer computes, select and fetch the next layer's pages from
  // an early estimate of its queries (the residual stream after this layer's attention, through
  // the next layer's query projection), so that its own selection finds them resident. What is
  // selected and attended does not change; only when pages cross the host link. "auto": on a
  // GPU (where it overlaps with the layer's compute) for decode steps of one such sequence, off
  // for batches (their prefetches queue one after another: a loss on the H200 at batch 8) and on
  // the CPU (where it only adds work); for one sequence it times runs of steps with and without
  // the prefetch, keeps the faster and times them again every 250 steps or so (the choice
  // changes speed only), and off for sessions that fetch behind (KvConfig::fetch). "on": always,
  // batches included.
  std::string kv_prefetch = "auto";
  // Where icecache finds the leaf a token joins when it leaves the recent window: "host" (the
  // index's beam search down its tree, during the index update) or "device" (device-side
  // selection computes, at each decode step, the leaf with the nearest mean key for every whole
  // page that left the window, with its summaries in backend memory; the update then only moves
  // rows; tokens it has no route for are searched on the host). "device" applies to icecache
  // sessions, which must then select on the device; other policies ignore it. The CPU backend
  // runs it with its reference op when asked.
  std::string kv_route = "host";
  // When a decode step's index updates (indexes taking in the tokens that left the recent window)
  // run: "beside" the next step's device work, on a host thread while the device computes;
  // "after" the step, the device idle; "auto": beside on a GPU. Beside needs every indexed
  // sequence of the step to select on the device with a policy that allows it (icecache), and
  // no kv_timing or recall; otherwise the step runs them after. Beside, a page that left the
  // window waits one more step as a loose page (scored like any other) before it is taken in.
  std::string index_update = "auto";
  // Wait for the device between select, fetch and attend of device-side selection so that
  // KvStats splits each step's time (costs a few waits per layer; off, that time is "rest").
  // The waits include kv_prefetch's side work, which then no longer overlaps the layers.
  bool kv_timing = false;
  // GPU: most bytes of device memory the engine may allocate (0: no cap), to emulate a smaller
  // GPU honestly: what does not fit fails as it would there (--device-mem-limit).
  int64_t device_mem_limit = 0;
  // When set ("llama-3.1-8b", "llama-3.2-3b", "qwen2.5-7b", ...): instead of `model`, a
  // random-weight model of that exact shape made in the device's memory, for speed
  // measurements. It has no tokenizer: requests must give prompt_tokens.
  std::string synthetic;
};

struct ModelInfo {
  std::string name;
  std::string arch;    // "llama", "qwen2", "qwen3"
  std::string format;  // "gguf", "safetensors"
  std::string path;
  int n_layers = 0, hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int trained_context = 0;
  int context_size = 0;  // the limit this engine enforces
  int64_t kv_bytes_per_token = 0;
  std::string kv_dtype;       // "f32", "f16", "bf16"
  bool kv_offloaded = false;  // the full KV is in pinned host memory (GPU with --kv-offload)
  int64_t weight_bytes = 0;
  bool has_chat_template = false;
  std::string backend;  // e.g. "cpu (2 threads)"
};

struct GenerateRequest {
  // Raw prompt text, used when `messages` is empty. Special-token text (e.g. "<|im_start|>") is
  // parsed as special tokens.
  std::string prompt;
  // Chat mode: formatted with the model's chat template (and the generation prompt).
  std::vector<ChatMessage> messages;
  // Pre-tokenized prompt; when non-empty it is used as is (no BOS added, no template).
  std::vector<int32_t> prompt_tokens;
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any
  bool ignore_eos = false;        // keep going past end-of-sequence tokens
};

// Per-decode-step KV accounting (averages over the decode steps of a request).
struct KvStats {
  std::string policy;        // KvConfig::Describe()
  int64_t decode_steps = 0;  // decode forward passes measured
  int sparse_layers = 0;     // layers that attended a selection
  int dense_layers = 0;      // layers that attended every page (reported, not free)
  // Tokens attended per (layer, KV head) per step in sparse layers, and in dense layers.
  double tokens_attended = 0;
  double tokens_attended_dense = 0;
  double context_tokens = 0;  // average sequence length during decode
  double nodes_visited = 0;   // index nodes / pages / keys scored per (layer, KV head) per step
  double pages_fetched = 0;   // pages copied into the working set per step for a selection
  // Pages copied in per step ahead of their layer (--kv-prefetch) or behind it (--kv-fetch
  // behind: the deferred pages, for the next step).
  double pages_prefetched = 0;
  // --kv-fetch behind: selected pages per step not attended because they were not resident
  // (their copies are in pages_prefetched); in the hit rate's denominator.
  double pages_deferred = 0;
  int64_t prefetch_steps = 0;  // decode steps that prefetched (of decode_steps)
  // --kv-prefetch auto: the engine's last timing of steps with and without the prefetch (median
  // seconds per step of each side; 0 before one finished).
  double prefetch_probe_on_seconds = 0, prefetch_probe_off_seconds = 0;
  double bytes_fetched = 0;  // bytes copied into the working set per step (both kinds)
  // Selected pages already resident (prefetched ones included) / pages selected (deferred ones
  // included).
  double hit_rate = 0;
  // Seconds per step: selection, working-set fetch, attention, the index's update after the
  // step (insertions; it first waits for the step's device work, which it then includes), and
  // everything else.
  double select_seconds = 0, fetch_seconds = 0, attend_seconds = 0, update_seconds = 0,
         other_seconds = 0;
  // Seconds per step of index updates that ran beside the next step's device work
  // (EngineOptions::index_update): not in update_seconds, and part of the step's time only where
  // they outlasted the device's work (then in other_seconds).
  double update_beside_seconds = 0;
  // Seconds per step this sequence's device-side selection spent on the host preparing the step
  // (uploads of its list changes) before the step's device work was queued; part of
  // other_seconds. A batch's step waits for every sequence's.
  double prepare_seconds = 0;
  // The last prompt's index build after its prefill (part of its prefill time), in seconds.
  double prompt_index_seconds = 0;
  // KV of this sequence: the host tier, or device memory where kv_on_device (the JSON key keeps
  // its name).
  int64_t host_kv_bytes = 0;
  bool kv_offloaded = false;      // the host tier is pinned host memory of a GPU engine
  bool kv_on_device = false;      // the KV lives in device memory (a GPU engine without offload)
  int64_t working_set_bytes = 0;  // working-set slots reserved for this sequence
  int64_t index_bytes = 0;        // index metadata
  // Selection ran in device memory (--kv-select): the bytes it keeps there for this sequence
  // (list mirrors, residency map, scratch) plus the page bounds as allocated, for every page of
  // the engine's pool (shared by the sequences that select on the device).
  bool device_select = false;
  int64_t device_index_bytes = 0;
  // Tokens the index has inserted one by one into its leaves (icecache; not bulk builds; totals
  // over the session, not per step): at the leaf a route from the device named (--kv-route
  // device), and by its own tree search.
  int64_t tokens_routed_device = 0;
  int64_t tokens_routed_host = 0;
  // Attention-mass recall (KvConfig::recall): per (decode step, layer, query head) the exact
  // softmax mass on the attended tokens over the mass of every token; layers that attended a
  // selection (every layer for "full"). recall_samples == 0: not measured.
  int64_t recall_samples = 0;
  double recall_mean = 0, recall_p10 = 0, recall_min = 0;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV was reused from the session
  int64_t generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_second = 0, decode_tokens_per_second = 0;
  // Steady-state decode step: the median step time over the second half of the decode steps
  // (decode_tokens_per_second averages every step, the first ones' warm-up included).
  double decode_step_ms_steady = 0;
  // Every decode step's time in ms, in order (a step shared by a batch is listed for each).
  std::vector<double> decode_step_ms;
  // The KV index's update after each of those steps (its OnAppend of the step's token), in ms;
  // host time that decode_step_ms leaves out.
  std::vector<double> decode_step_update_ms;
  int64_t kv_bytes = 0;  // KV held by this sequence at the end
  int64_t kv_bytes_per_token = 0;
  int64_t peak_rss_bytes = 0;
  int64_t device_peak_bytes = 0;  // GPU: most device memory the engine's allocations held
  // "stop" (end-of-sequence token or stop string), "length" (max_tokens), "context" (context
  // limit reached), "cancelled" (the callback asked to stop).
  std::string finish_reason;
  KvStats kv;
};

// Teacher-forced scoring: `context` is prefilled (dense), then `continuation` is fed one token
// per decode step under the sequence's KV policy.
struct ScoreRequest {
  std::vector<int32_t> context;
  std::vector<int32_t> continuation;
  bool full_logprobs = false;  // also return the whole log-softmax of every step
};

struct ScoreResult {
  // Step i predicts continuation[i] (step 0 from the prefill, step i > 0 from a decode step).
  std::vector<float> token_logprobs;         // log p(continuation[i] | everything before)
  std::vector<int32_t> top1;                 // most likely token of each step
  std::vector<std::vector<float>> logprobs;  // [step][vocab] when full_logprobs
  KvStats kv;
};

struct GenerateResult {
  std::string text;             // generated text (stop string excluded)
  std::vector<int32_t> tokens;  // generated token ids
  GenerateStats stats;
};

struct GenerateCallbacks {
  // Streamed text as it becomes final; return false to stop generating.
  std::function<bool(std::string_view text)> on_text;
  // Prefill progress: tokens done of total, after each chunk; the last call (done == total)
  // comes once the prompt is ready to decode, its KV index (if any) built.
  std::function<void(int64_t done, int64_t total)> on_prefill;
};

class Session;

class Engine {
 public:
  // Loads the model and prepares the backend. Errors name the file and the problem.
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;

  virtual Result<std::vector<int32_t>> Tokenize(std::string_view text, bool add_bos,
                                                bool parse_special) const = 0;
  virtual std::string Detokenize(std::span<const int32_t> tokens) const = 0;
  // The model's chat template applied to `messages` (fails if the model has none we support).
  virtual Result<std::string> FormatChat(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const = 0;

  // Generates on a fresh sequence (its KV is freed afterwards).
  virtual Result<GenerateResult> Generate(const GenerateRequest& request,
                                          const GenerateCallbacks& callbacks = {}) = 0;
  // Generates for several requests on fresh sequences: prompts are prefilled one after another,
  // then every unfinished request advances one token per batched forward pass. Needs
  // EngineOptions::max_sequences >= requests.size(). Results are in request order; each one's
  // decode_seconds is the shared decode phase.
  virtual Result<std::vector<GenerateResult>> GenerateBatch(
      std::span<const GenerateRequest> requests) = 0;
  // A sequence whose KV persists across requests (multi-turn chat): each request reuses the
  // longest token prefix it shares with the session's history. `kv` overrides the engine's
  // KV policy for this session.
  virtual Result<std::unique_ptr<Session>> NewSession(const KvConfig* kv = nullptr) = 0;
  // Scores on a fresh sequence with the engine's KV policy.
  virtual Result<ScoreResult> Score(const ScoreRequest& request) = 0;

  // Teacher-forced logits of `tokens` at the given positions (row i predicts the token after
  // position positions[i]). For evaluation and tests.
  virtual Result<std::vector<std::vector<float>>> Logits(std::span<const int32_t> tokens,
                                                         std::span<const int64_t> positions) = 0;
};

class Session {
 public:
  virtual ~Session() = default;
  virtual Result<GenerateResult> Generate(const GenerateRequest& request,
                                          const GenerateCallbacks& callbacks = {}) = 0;
  // Tokens whose KV the session holds (prompts and generated tokens so far).
  virtual const std::vector<int32_t>& history() const = 0;
  virtual void Reset() = 0;
  virtual Result<ScoreResult> Score(const ScoreRequest& request) = 0;
  // A new session holding a copy of this one's KV and history, under policy `kv` (its index is
  // built over the copied KV). Lets one prefill serve several policies.
  virtual Result<std::unique_ptr<Session>> Fork(const KvConfig& kv) = 0;
};

// "default" (or empty) -> the cached default model file; anything else is returned as is.
// Looks in $ICECACHE_MODEL_DIR, <source tree>/.cache/models and ~/.cache/icecache/models.
Result<std::string> ResolveModelPath(const std::string& model);

// Name of the default model's file.
extern const char* const kDefaultModelFile;

}  // namespace icecache
