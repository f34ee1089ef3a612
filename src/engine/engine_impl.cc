#include "engine/engine_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/env_switch.h"
#include "core/process.h"
#include "engine/generation.h"
#include "engine/sampler.h"
#include "engine/sparse_attention.h"
#include "engine/stop_matcher.h"
#include "model/arch/arch.h"
#include "model/synthetic.h"

namespace icecache {

namespace {
constexpr const char* kSyntheticNoText =
    "a synthetic model (--synthetic) has no tokenizer: it takes token ids only (icecache bench)";

// What --kv-rank auto means: for icecache, centroid where selection runs on the device and soft
// elsewhere; lychee's auto is its bound search (on the host), and other policies have no rank.
std::string ResolvedRank(const KvConfig& config, bool on_device) {
  if (config.policy != "icecache" || config.rank != "auto") return config.rank;
  return on_device ? "centroid" : "soft";
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  ICECACHE_ASSIGN_OR_RETURN(auto impl, EngineImpl::Create(options));
  return std::unique_ptr<Engine>(std::move(impl));
}

Result<std::unique_ptr<EngineImpl>> EngineImpl::Create(const EngineOptions& options) {
  if (options.prefill_chunk <= 0) return InvalidArgument("prefill chunk must be positive");
  if (options.max_sequences <= 0) return InvalidArgument("max sequences must be positive");
  ICECACHE_RETURN_IF_ERROR(options.kv.Validate());
  if (options.context_size < 0) return InvalidArgument("context size must be >= 0");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0");
  if (options.device_mem_limit < 0) return InvalidArgument("--device-mem-limit must be >= 0");
  if (options.device_mem_limit > 0 && options.device != "cuda") {
    return InvalidArgument("--device-mem-limit applies to --device cuda only");
  }

  std::unique_ptr<EngineImpl> e(new EngineImpl());
  e->options_ = options;
  if (options.device == "cpu") {
    e->backend_ = MakeCpuBackend({.threads = options.threads});
  } else if (options.device == "cuda") {
    ICECACHE_ASSIGN_OR_RETURN(e->backend_,
                              MakeCudaBackend({.memory_limit = options.device_mem_limit}));
  } else {
    return InvalidArgument("unknown device '" + options.device + "' (expected cpu or cuda)");
  }
  std::string path;
  if (!options.synthetic.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(e->model_, MakeSyntheticModel(options.synthetic, *e->backend_));
    path = e->model_->path;
  } else {
    ICECACHE_ASSIGN_OR_RETURN(path, ResolveModelPath(options.model));
    ICECACHE_ASSIGN_OR_RETURN(e->model_, LoadModel(path));
  }
  const ModelConfig& c = e->model_->config;

  const int ctx = options.context_size > 0 ? options.context_size : c.max_context;
  if (c.sliding_window > 0 && ctx > c.sliding_window) {
    return Unsupported(
        "this model uses sliding-window attention (window " + std::to_string(c.sliding_window) +
        "), which is not implemented; use --ctx-size <= " + std::to_string(c.sliding_window));
  }
  const int chunk = std::min(options.prefill_chunk, ctx);
  DType kv_dtype = e->backend_->default_kv_dtype();
  if (options.kv.dtype != "auto" && !ParseDType(options.kv.dtype, &kv_dtype)) {
    return InvalidArgument("--kv-dtype: unknown type '" + options.kv.dtype + "'");
  }
  if (e->backend_->device() == Device::kCpu && kv_dtype == DType::kBF16) {
    return Unsupported("--kv-dtype bf16 is not supported on the CPU backend (use f32 or f16)");
  }
  if (e->backend_->device() == Device::kCuda && kv_dtype != DType::kBF16) {
    return Unsupported("--kv-dtype " + options.kv.dtype +
                       " is not supported on the CUDA backend (use bf16 or auto)");
  }
  if (e->backend_->device() == Device::kCuda && c.head_dim != 64 && c.head_dim != 128) {
    return Unsupported("the CUDA attention kernels support head_dim 64 and 128; this model has " +
                       std::to_string(c.head_dim));
  }
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, options.kv.page_size, kv_dtype};
  if (options.kv_offload != "auto" && options.kv_offload != "on" && options.kv_offload != "off") {
    return InvalidArgument("--kv-offload: expected auto, on or off, got '" + options.kv_offload +
                           "'");
  }
  if (options.kv_select != "auto" && options.kv_select != "device" && options.kv_select != "host") {
    return InvalidArgument("--kv-select: expected auto, device or host, got '" + options.kv_select +
                           "'");
  }
  if (options.kv_route != "host" && options.kv_route != "device") {
    return InvalidArgument("--kv-route: expected host or device, got '" + options.kv_route + "'");
  }
  if (options.kv_prefetch != "auto" && options.kv_prefetch != "on" &&
      options.kv_prefetch != "off") {
    return InvalidArgument("--kv-prefetch: expected auto, on or off, got '" + options.kv_prefetch +
                           "'");
  }

  if (options.index_update != "auto" && options.index_update != "beside" &&
      options.index_update != "after") {
    return InvalidArgument("--index-update: expected auto, beside or after, got '" +
                           options.index_update + "'");
  }

  const bool gpu = e->backend_->device() != Device::kCpu;
  const bool offload = gpu && (options.kv_offload == "on" ||
                               (options.kv_offload == "auto" && options.kv.policy != "full"));
  if (gpu && options.kv_offload == "off" && options.kv.policy != "full") {
    return InvalidArgument("--kv-policy " + options.kv.policy +
                           " on the GPU selects from the host tier: drop --kv-offload off");
  }
  // A session may fork into any policy (Session::Fork with another KvConfig), so reserve what
  // the hungriest policy needs where the pool can take forks into sparse policies; otherwise a
  // fork into a re-arranging policy would find no room and never re-arrange. On the CPU pages
  // are committed only when first written (address space, not RAM); a pinned host tier commits
  // everything, so it grows only for an engine whose own policy is full (forks are the point).
  int64_t per_sequence = PoolPagesFor(options.kv, layout, ctx);
  if (!gpu || (offload && options.kv.policy == "full")) {
    for (const char* policy : {"lychee", "icecache"}) {
      KvConfig any = options.kv;
      any.policy = policy;
      per_sequence = std::max(per_sequence, PoolPagesFor(any, layout, ctx));
    }
  }
  // A pinned host tier for a sparse policy reserves what that policy needs (PinnedPoolPagesFor:
  // for icecache much less than its worst case at every sequence at once).
  const int64_t capacity = offload && options.kv.policy != "full"
                               ? PinnedPoolPagesFor(options.kv, layout, ctx, options.max_sequences)
                               : per_sequence * options.max_sequences;
  ICECACHE_ASSIGN_OR_RETURN(
      e->pool_, PagePool::Create(*e->backend_, layout, capacity,
                                 offload ? PoolPlacement::kHost : PoolPlacement::kBackend));
  // Indexes that re-arrange pages leave the positional pages of every sequence at full length
  // free for their tokens (PagePool::spare).
  e->pool_->set_growth_reserve(layout.PagesForTokens(ctx) * options.max_sequences);
  ICECACHE_ASSIGN_OR_RETURN(e->transformer_,
                            Transformer::Create(c, e->model_->weights, e->backend_.get(), chunk,
                                                options.max_sequences, capacity));

  e->sparse_ = std::make_unique<SparseAttention>(e->backend_.get(), c);
  e->sparse_->set_phase_timing(options.kv_timing);
  // Prefetching can pay only where it overlaps with the layer's compute (a GPU's side stream);
  // on the CPU it would only add work. Whether it does pay is timed (PrefetchTuner).
  using Prefetch = SparseAttention::PrefetchMode;
  e->sparse_->set_prefetch(options.kv_prefetch == "on"            ? Prefetch::kOn
                           : options.kv_prefetch == "auto" && gpu ? Prefetch::kAuto
                                                                  : Prefetch::kOff);
  // The KV index workers: on the CPU they share the backend's thread count; on a GPU they are
  // the engine's only host threads besides the one that drives the device.
  e->index_workers_ = std::make_unique<ThreadPool>(options.threads);
  e->sparse_->set_workers(e->index_workers_.get());
  if (offload) {
    // One layer of the pool (what a dense step of every sequence may list), grown on demand.
    e->staged_ = std::make_unique<StagedAttention>(e->backend_.get(), c, layout,
                                                   (capacity + c.n_layers - 1) / c.n_layers);
  }

  ModelInfo& i = e->info_;
  i.name = c.name;
  i.arch = std::string(c.arch->name);
  i.format = e->model_->format;
  i.path = path;
  i.n_layers = c.n_layers;
  i.hidden = c.hidden;
  i.n_heads = c.n_heads;
  i.n_kv_heads = c.n_kv_heads;
  i.head_dim = c.head_dim;
  i.ffn = c.ffn;
  i.vocab = c.vocab;
  i.trained_context = c.max_context;
  i.context_size = ctx;
  i.kv_bytes_per_token = c.KvBytesPerToken(layout.dtype);
  i.kv_dtype = std::string(DTypeName(layout.dtype));
  i.kv_offloaded = offload;
  for (const TensorEntry& t : e->model_->tensors) i.weight_bytes += t.bytes;
  i.has_chat_template = e->model_->chat_template.has_value();
  i.backend = e->backend_->Describe();
  return e;
}

Result<std::vector<int32_t>> EngineImpl::Tokenize(std::string_view text, bool add_bos,
                                                  bool parse_special) const {
  if (model_->format == "synthetic") return Unsupported(kSyntheticNoText);
  return model_->tokenizer->Encode(text, add_bos, parse_special);
}

std::string EngineImpl::Detokenize(std::span<const int32_t> tokens) const {
  return model_->tokenizer->Decode(tokens);
}

Result<std::string> EngineImpl::FormatChat(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
  if (!model_->chat_template) {
    return Unsupported("this model has no supported chat template (" + model_->chat_template_note +
                       ")");
  }
  return model_->chat_template->Apply(messages, add_generation_prompt);
}

Result<std::vector<int32_t>> EngineImpl::PromptTokens(const GenerateRequest& r) const {
  std::vector<int32_t> tokens;
  if (!r.prompt_tokens.empty()) {
    for (int32_t id : r.prompt_tokens) {
      if (id < 0 || id >= info_.vocab) {
        return InvalidArgument("prompt token id " + std::to_string(id) +
                               " is outside the vocabulary (" + std::to_string(info_.vocab) + ")");
      }
    }
    tokens = r.prompt_tokens;
  } else if (model_->format == "synthetic") {
    return Unsupported(kSyntheticNoText);
  } else if (!r.messages.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(std::string text, FormatChat(r.messages, true));
    // The template writes any BOS text itself (as transformers' apply_chat_template does).
    tokens = model_->tokenizer->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
  } else {
    tokens = model_->tokenizer->Encode(r.prompt, /*add_bos=*/true, /*parse_special=*/true);
  }
  if (tokens.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int64_t>(tokens.size()) >= info_.context_size) {
    return OutOfRange("the prompt is " + std::to_string(tokens.size()) +
                      " tokens, which does not fit the context limit of " +
                      std::to_string(info_.context_size) + " tokens");
  }
  return tokens;
}

size_t EngineImpl::ReusePrefix(SequenceState& state, std::span<const int32_t> tokens) {
  size_t common = 0;
  const std::vector<int32_t>& h = state.history;
  while (common < h.size() && common < tokens.size() && h[common] == tokens[common]) ++common;
  if (common == tokens.size() && common > 0) --common;
  // A policy may have re-arranged old pages; only tail tokens can be dropped.
  if (!state.seq.CanTruncate(static_cast<int64_t>(common))) common = 0;
  state.DropTokens(static_cast<int64_t>(common));
  if (common == 0 && state.index) {
    // Start the index over (it may hold state about dropped pages).
    auto fresh = MakeSequenceIndex(IndexFor(state.kv));
    if (fresh.ok()) state.index = std::move(fresh).value();
  } else if (state.index) {
    state.index->OnTruncate(state.seq);
  }
  return common;
}

IndexContext EngineImpl::IndexFor(const KvConfig& kv) const {
  IndexContext c;
  c.config = kv;
  c.layout = pool_->layout();
  c.n_heads = info_.n_heads;
  c.limits = LimitsFor(kv);
  c.tokenizer = model_->tokenizer.get();
  c.workers = index_workers_.get();
  // ICECACHE_PREFILL_AHEAD=0 builds a prompt's index only at its end (for comparisons).
  static const bool ahead = EnvSwitch("ICECACHE_PREFILL_AHEAD", true);
  c.overlap_prefill = ahead && backend_->device() != Device::kCpu;
  return c;
}

Status EngineImpl::AfterForward(SequenceState& state, int64_t first,
                                std::span<const int32_t> tokens) {
  if (!state.index) return Status::Ok();
  // Indexes read and re-arrange the host tier on the host: wait for the device's KV writes.
  if (backend_->device() != Device::kCpu) backend_->Synchronize();
  const double t0 = NowSeconds();
  Status s = state.index->OnAppend(state.seq, first, tokens);
  const double dt = NowSeconds() - t0;
  state.acct.update_s += dt;  // a prompt's share is dropped with its accounting
  if (!state.acct.step_update_s.empty()) state.acct.step_update_s.back() += dt;  // a step's
  return s;
}

Result<std::vector<float>> EngineImpl::Prefill(SequenceState& state,
                                               std::span<const int32_t> tokens,
                                               const GenerateCallbacks& callbacks) {
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t chunk = transformer_->max_tokens();
  const int64_t start = state.seq.length();
  KvSequence* seqs[] = {&state.seq};
  std::vector<float> last;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(chunk, total - done);
    const int32_t counts[] = {static_cast<int32_t>(n)};
    ForwardInput in{seqs,
                    tokens.subspan(done, n),
                    counts,
                    done + n == total ? LogitsMode::kLast : LogitsMode::kNone,
                    {}};
    in.attention = staged_.get();
    auto logits = transformer_->Forward(in);
    if (!logits.ok()) {
      state.DropTokens(start);
      if (state.index) state.index->OnTruncate(state.seq);
      return logits.status();
    }
    state.history.insert(state.history.end(), tokens.begin() + done, tokens.begin() + done + n);
    // Device-side selection over positional lists summarizes the pages that became selectable
    // chunk by chunk, while the next chunk computes (their pages never change again).
    if (state.device_select && DeviceSelection::KeepsPositions(state.kv))
      ICECACHE_RETURN_IF_ERROR(state.device_select->Prepare(state.seq, 0));
    done += n;
    if (state.index && done < total) {
      // The index may start on the prompt's finished pages while the next chunks run.
      ICECACHE_RETURN_IF_ERROR(state.index->OnPrefillChunk(state.seq, start + total, [&] {
        if (backend_->device() != Device::kCpu) backend_->Synchronize();
      }));
    }
    if (done == total) {
      const float* row = logits->data_as<float>();
      last.assign(row, row + logits->cols());
    }
    if (callbacks.on_prefill && done < total) callbacks.on_prefill(done, total);
  }
  // The prompt's attention is dense, so the index sees the whole prompt once: one bulk build of
  // every list instead of one per chunk (or token by token insertion of later chunks).
  if (backend_->device() != Device::kCpu) backend_->Synchronize();  // the prompt's own work
  const double t0 = NowSeconds();
  ICECACHE_RETURN_IF_ERROR(AfterForward(state, start, tokens));
  if (state.device_select) {
    ICECACHE_RETURN_IF_ERROR(state.device_select->Prepare(state.seq, 0));
    // The summaries it queued (every leaf page after a bulk build) belong to the prompt's time,
    // not to the first decode step's.
    backend_->Synchronize();
  }
  state.prompt_index_s = NowSeconds() - t0;
  // The prompt is ready once its index is built (that is part of the time to first token).
  if (callbacks.on_prefill && total > 0) callbacks.on_prefill(total, total);
  return last;
}

Result<Tensor> EngineImpl::DecodeStep(SequenceState& state, int32_t token) {
  SequenceState* states[] = {&state};
  const int32_t ids[] = {token};
  ICECACHE_ASSIGN_OR_RETURN(Tensor out, DecodeBatch(states, ids));
  return out;
}

Status EngineImpl::AfterDecodeStep(std::span<SequenceState* const> states,
                                   std::span<const int32_t> tokens, bool beside_next) {
  // Routes the step computed on the device (--kv-route device) go to the indexes before the
  // updates that take those tokens in (none runs now: updates beside the step were joined).
  std::vector<KeyRoute> routes;
  for (SequenceState* st : states) {
    if (!st->index || !st->device_select || !st->device_select->routes_enabled()) continue;
    ICECACHE_RETURN_IF_ERROR(st->device_select->TakeRoutes(&routes));
    if (!routes.empty()) st->index->AcceptRoutes(routes);
  }
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i]->index) pending_.push_back({states[i], states[i]->seq.length() - 1, tokens[i]});
  }
  // Beside: the next step runs them beside its device work.
  return beside_next ? Status::Ok() : FlushPendingUpdates(states);
}

Status EngineImpl::RunIndexUpdates(std::span<const IndexUpdate> updates,
                                   std::vector<double>* took) {
  took->assign(updates.size(), 0.0);
  // Side by side, each index works on one thread; alone, it spreads its lists over all of them.
  // So a few sequences on many workers update one after another.
  const size_t workers = static_cast<size_t>(index_workers_->size());
  bool together = updates.size() > 1 && workers > 1 && 2 * updates.size() >= workers;
  if (together) {
    int64_t need = 0;
    for (const IndexUpdate& u : updates) {
      const int64_t pages = u.state->index->AppendPagesBound(u.state->seq);
      if (pages < 0) together = false;
      need += std::max<int64_t>(pages, 0);
    }
    together = together && need <= pool_->spare();
  }
  std::vector<Status> status(updates.size(), Status::Ok());
  auto run = [&](size_t k) {
    const IndexUpdate& u = updates[k];
    const double t = NowSeconds();
    status[k] = u.state->index->OnAppend(u.state->seq, u.first, {&u.token, 1});
    (*took)[k] = NowSeconds() - t;
  };
  if (together) {
    ++parallel_index_updates_;
    index_workers_->ParallelFor(static_cast<int64_t>(updates.size()), 1,
                                [&](int, int64_t begin, int64_t end) {
                                  for (int64_t k = begin; k < end; ++k) run(k);
                                });
  } else {
    for (size_t k = 0; k < updates.size(); ++k) run(k);
  }
  for (const Status& st : status) ICECACHE_RETURN_IF_ERROR(st);
  return Status::Ok();
}

double SteadyStepSeconds(std::vector<double> steps) {
  if (steps.empty()) return 0;
  // The median of the second half: warm-up steps (a first page-table build, a graph capture)
  // left out, as tools/gpu/torch_reference_bench.py does for PyTorch.
  std::vector<double> late(steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2),
                           steps.end());
  std::sort(late.begin(), late.end());
  return late[late.size() / 2];
}

void EngineImpl::ChargeStep(SequenceState& st, int32_t token, double seconds, int64_t length,
                            bool sparse) {
  st.history.push_back(token);
  ++st.acct.steps;
  st.acct.total_s += seconds;
  st.acct.step_s.push_back(seconds);
  st.acct.step_update_s.push_back(0);  // AfterForward adds the index update that follows
  st.acct.context += static_cast<double>(length);
  if (!sparse) {  // dense attention: every token of every (layer, KV head)
    st.acct.dense_layer_steps += info_.n_layers;
    st.acct.tokens_dense += static_cast<double>(length) * info_.n_layers * info_.n_kv_heads;
  }
}

Result<GenerateResult> EngineImpl::RunOn(SequenceState& state, const GenerateRequest& request,
                                         const GenerateCallbacks& callbacks) {
  SequenceState* states[] = {&state};
  ICECACHE_ASSIGN_OR_RETURN(auto results, RunBatch(states, {&request, 1}, &callbacks));
  return std::move(results[0]);
}

Result<std::vector<GenerateResult>> EngineImpl::RunBatch(std::span<SequenceState* const> states,
                                                         std::span<const GenerateRequest> requests,
                                                         const GenerateCallbacks* callbacks) {
  // Check every request before running any.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Generation> gens;
  gens.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    if (r.max_tokens < 0) return InvalidArgument("max tokens must be >= 0");
    ICECACHE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(r.sampling));
    ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptTokens(r));
    prompts.push_back(std::move(prompt));
    gens.emplace_back(states[i], &r, callbacks, std::move(sampler), *model_->tokenizer,
                      info_.context_size);
  }
  // Prefill one request after another.
  for (size_t i = 0; i < gens.size(); ++i) {
    GenerateStats& st = gens[i].result().stats;
    SequenceState& state = *states[i];
    const size_t common = ReusePrefix(state, prompts[i]);
    st.prompt_tokens = static_cast<int64_t>(prompts[i].size());
    st.cached_tokens = static_cast<int64_t>(common);
    st.kv_bytes_per_token = info_.kv_bytes_per_token;
    const double t0 = NowSeconds();
    ICECACHE_ASSIGN_OR_RETURN(gens[i].logits(),
                              Prefill(state, std::span<const int32_t>(prompts[i]).subspan(common),
                                      callbacks != nullptr ? *callbacks : GenerateCallbacks{}));
    st.prefill_seconds = NowSeconds() - t0;
    if (st.prefill_seconds > 0) {
      st.prefill_tokens_per_second =
          static_cast<double>(st.prompt_tokens - st.cached_tokens) / st.prefill_seconds;
    }
  }
  // Decode in lockstep: one batched forward pass per step over the unfinished requests.
  const double t1 = NowSeconds();
  std::vector<Generation*> active;
  for (Generation& g : gens) active.push_back(&g);
  std::vector<int32_t> tokens;
  std::vector<Generation*> stepping;
  // Ids the last step sampled on the device, one per active request (empty: sample on the host
  // from each request's logits). A GPU samples greedy requests itself, so that only the ids
  // cross to the host; seeded random sampling stays on the host, where it draws the same tokens
  // as on the CPU backend.
  std::vector<int32_t> sampled;
  const bool device_sampler = backend_->device() != Device::kCpu;
  for (SequenceState* s : states) s->ResetAccounting();
  trace_ids_at_ = 0;
  sparse_->BeginDecode();
  if (gens.size() == 1 && CanDecodeAhead(gens[0])) {
    ICECACHE_RETURN_IF_ERROR(DecodeAhead(gens[0]));
    active.clear();
  }
  // Within the loop a step may leave its index updates to the next one (UpdatesBeside). Should
  // the loop fail, they are dropped: an index takes in everything that left the window at its
  // next update, so nothing is lost, only taken in later.
  beside_scope_ = true;
  struct EndScope {
    EngineImpl* e;
    ~EndScope() {
      e->beside_scope_ = false;
      e->pending_.clear();
    }
  } end_scope{this};
  while (!active.empty()) {
    tokens.clear();
    stepping.clear();
    for (size_t i = 0; i < active.size(); ++i) {
      Generation* g = active[i];
      if (std::optional<int32_t> next =
              sampled.empty() ? g->Step(g->logits()) : g->Accept(sampled[i])) {
        tokens.push_back(*next);
        stepping.push_back(g);
      }
    }
    active = stepping;
    if (active.empty()) break;
    std::vector<SequenceState*> step_states;
    bool greedy = device_sampler;
    for (Generation* g : active) {
      step_states.push_back(g->state());
      greedy = greedy && g->GreedyOnly();
    }
    sampled.clear();
    ICECACHE_ASSIGN_OR_RETURN(Tensor out,
                              DecodeBatch(step_states, tokens, greedy ? &sampled : nullptr));
    for (size_t i = 0; i < active.size(); ++i) {
      ++active[i]->forwards;
      if (greedy) continue;
      const float* row = static_cast<const float*>(out.row(static_cast<int64_t>(i)));
      active[i]->logits().assign(row, row + out.cols());
    }
  }
  ICECACHE_RETURN_IF_ERROR(FlushPendingUpdates());
  const double decode_seconds = NowSeconds() - t1;
  std::vector<GenerateResult> results;
  const int64_t peak = PeakRssBytes();
  for (Generation& g : gens) {
    g.Finish();
    GenerateStats& st = g.result().stats;
    st.decode_seconds = decode_seconds;
    // Decode speed: single-token forward passes per second of the decode phase.
    if (decode_seconds > 0 && g.forwards > 0) {
      st.decode_tokens_per_second = static_cast<double>(g.forwards) / decode_seconds;
    }
    st.decode_step_ms_steady = 1e3 * SteadyStepSeconds(g.state()->acct.step_s);
    st.decode_step_ms.clear();
    for (double s : g.state()->acct.step_s) st.decode_step_ms.push_back(1e3 * s);
    st.decode_step_update_ms.clear();
    for (double s : g.state()->acct.step_update_s) st.decode_step_update_ms.push_back(1e3 * s);
    st.peak_rss_bytes = peak;
    st.device_peak_bytes = backend_->device_memory().peak;
    st.kv = g.state()->Stats(info_.n_layers, info_.n_kv_heads);
    if (st.kv.device_select && sparse_->prefetch_tuner().probes() > 0) {
      st.kv.prefetch_probe_on_seconds = sparse_->prefetch_tuner().probe_on_seconds();
      st.kv.prefetch_probe_off_seconds = sparse_->prefetch_tuner().probe_off_seconds();
    }
    results.push_back(std::move(g.result()));
  }
  return results;
}

Result<std::vector<GenerateResult>> EngineImpl::GenerateBatch(
    std::span<const GenerateRequest> requests) {
  if (requests.empty()) return std::vector<GenerateResult>();
  if (static_cast<int>(requests.size()) > options_.max_sequences) {
    return InvalidArgument("batch of " + std::to_string(requests.size()) +
                           " requests exceeds max_sequences (" +
                           std::to_string(options_.max_sequences) + ")");
  }
  std::vector<std::unique_ptr<SequenceState>> owned;
  std::vector<SequenceState*> states;
  for (size_t i = 0; i < requests.size(); ++i) {
    ICECACHE_ASSIGN_OR_RETURN(auto s, NewState(nullptr));
    states.push_back(s.get());
    owned.push_back(std::move(s));
  }
  return RunBatch(states, requests, nullptr);
}

Result<ScoreResult> EngineImpl::ScoreOn(SequenceState& state, const ScoreRequest& request) {
  if (request.context.empty()) return InvalidArgument("score: the context is empty");
  const int64_t total = static_cast<int64_t>(request.context.size() + request.continuation.size());
  if (total > info_.context_size) {
    return OutOfRange("score: " + std::to_string(total) + " tokens exceed the context limit of " +
                      std::to_string(info_.context_size));
  }
  for (const auto* list : {&request.context, &request.continuation}) {
    for (int32_t id : *list) {
      if (id < 0 || id >= info_.vocab) {
        return InvalidArgument("score: token id " + std::to_string(id) +
                               " is outside the vocabulary (" + std::to_string(info_.vocab) + ")");
      }
    }
  }
  const size_t common = ReusePrefix(state, request.context);
  ICECACHE_ASSIGN_OR_RETURN(
      std::vector<float> logits,
      Prefill(state, std::span<const int32_t>(request.context).subspan(common), {}));
  ScoreResult r;
  state.ResetAccounting();
  const size_t steps = request.continuation.size();
  for (size_t i = 0; i < steps; ++i) {
    if (i > 0) {
      ICECACHE_ASSIGN_OR_RETURN(Tensor out, DecodeStep(state, request.continuation[i - 1]));
      const float* row = out.data_as<float>();
      logits.assign(row, row + out.cols());
    }
    // log-softmax in double for a stable reference.
    double max_logit = logits[0];
    int32_t best = 0;
    for (size_t v = 1; v < logits.size(); ++v) {
      if (logits[v] > max_logit) {
        max_logit = logits[v];
        best = static_cast<int32_t>(v);
      }
    }
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    const double log_z = max_logit + std::log(sum);
    r.token_logprobs.push_back(static_cast<float>(logits[request.continuation[i]] - log_z));
    r.top1.push_back(best);
    if (request.full_logprobs) {
      std::vector<float> lp(logits.size());
      for (size_t v = 0; v < logits.size(); ++v) lp[v] = static_cast<float>(logits[v] - log_z);
      r.logprobs.push_back(std::move(lp));
    }
  }
  r.kv = state.Stats(info_.n_layers, info_.n_kv_heads);
  return r;
}

Result<std::unique_ptr<SequenceState>> EngineImpl::NewState(const KvConfig* kv) {
  KvConfig config = kv != nullptr ? *kv : options_.kv;
  ICECACHE_RETURN_IF_ERROR(config.Validate());
  if (config.page_size != options_.kv.page_size ||
      (config.dtype != "auto" && config.dtype != info_.kv_dtype)) {
    return InvalidArgument("a session's KV page size and dtype must match the engine's (" +
                           std::to_string(options_.kv.page_size) + ", " + info_.kv_dtype + ")");
  }
  ICECACHE_ASSIGN_OR_RETURN(const bool on_device, SelectsOnDevice(config));
  config.rank = ResolvedRank(config, on_device);
  if (config.fetch == "behind" && config.policy != "full" && !on_device) {
    return Unsupported(
        "--kv-fetch behind: pages are deferred by device-side selection's map, which this "
        "session does not use (it needs --kv-select device, or auto on a GPU, with quest, "
        "icecache rank centroid or lychee rank centroid, and no --kv-recall)");
  }
  auto state = std::make_unique<SequenceState>(pool_.get(), config);
  state->seq.ReserveTokens(info_.context_size);
  ICECACHE_ASSIGN_OR_RETURN(state->index, MakeSequenceIndex(IndexFor(config)));
  if (state->index && !pool_->host_accessible()) {
    return Unsupported("KV policy '" + config.policy +
                       "' selects pages from the host tier, but this engine keeps its KV in "
                       "device memory: start it with --kv-offload on (or with a sparse "
                       "--kv-policy)");
  }
  if (state->index) {
    const SelectionLimits lim = LimitsFor(config);
    // Slots per (layer, KV head): at least the pages a step may select, plus a quarter for
    // pages that come back after a step away, or what --kv-working-set asks for. The quarter
    // was measured on SmolLM2 at 8K, budget 256, when a device-side map still took spare slots
    // lowest first, refilling the same ones: the host path's LRU fetched 7% more without it
    // (icecache) and device-side lychee 12% more, while device-side quest and icecache fetched
    // exactly as much, so they leave it out of device memory. Since the map takes empty slots
    // first, spare slots cut their fetches too (docs/PERF.md, "A larger working set").
    const bool tight = on_device && config.policy != "lychee";
    const int wanted = (config.working_set + config.page_size - 1) / config.page_size;
    const int capacity = std::max(lim.max_pages + (tight ? 0 : lim.max_pages / 4), wanted);
    const int scratch =
        state->index->token_level() ? (config.budget + config.page_size - 1) / config.page_size : 0;
    ICECACHE_ASSIGN_OR_RETURN(
        state->working_set,
        WorkingSet::Create(*backend_, pool_->layout(), info_.n_layers * info_.n_kv_heads, capacity,
                           scratch));
    if (on_device) ICECACHE_RETURN_IF_ERROR(StartDeviceSelection(*state));
    if (options_.kv_route == "device" && config.policy == "icecache") {
      if (!on_device) {
        return Unsupported(
            "--kv-route device: insertion routes are computed by device-side selection, which "
            "this icecache session does not use (it needs --kv-select device or auto on a GPU, "
            "rank centroid, no --kv-exact, no --kv-reuse-layers, no --kv-recall)");
      }
      ICECACHE_RETURN_IF_ERROR(state->device_select->EnableRoutes());
    }
  }
  return state;
}

Result<bool> EngineImpl::SelectsOnDevice(const KvConfig& config) const {
  if (config.policy == "full") return false;
  const std::string& where = options_.kv_select;
  KvConfig resolved = config;
  resolved.rank = ResolvedRank(config, true);
  const bool supported = DeviceSelection::Supports(resolved, info_.head_dim) && !config.recall;
  if (where == "host" || (where == "auto" && (backend_->device() == Device::kCpu || !supported))) {
    return false;
  }
  if (!supported) {
    return Unsupported(
        "--kv-select device: policy '" + config.policy + "' selects on the host" +
        (config.recall ? " (and --kv-recall measures there)" : "") +
        "; device selection serves quest, icecache (rank centroid, no --kv-exact, no "
        "--kv-reuse-layers) and lychee with --kv-rank centroid, the last two for head dims that "
        "are multiples of 32");
  }
  return true;
}

Status EngineImpl::StartDeviceSelection(SequenceState& state) {
  ICECACHE_ASSIGN_OR_RETURN(
      state.device_select,
      DeviceSelection::Create(*backend_, state.kv, pool_->layout(), info_.n_layers, info_.n_heads,
                              *pool_, *state.working_set));
  return Status::Ok();
}

Result<std::unique_ptr<SequenceState>> EngineImpl::ForkState(const SequenceState& state,
                                                             const KvConfig& kv) {
  for (int l = 0; l < info_.n_layers; ++l) {
    for (int h = 0; h < info_.n_kv_heads; ++h) {
      if (state.seq.tail_index(l, h) != 0 && kv.policy != state.kv.policy) {
        return Unsupported("fork: this session's pages were re-arranged by policy '" +
                           state.kv.policy +
                           "'; fork from a session that keeps pages in "
                           "position order (e.g. policy full)");
      }
    }
  }
  ICECACHE_ASSIGN_OR_RETURN(auto copy, NewState(&kv));
  ICECACHE_RETURN_IF_ERROR(copy->seq.CopyFrom(state.seq, *backend_));
  copy->history = state.history;
  ICECACHE_RETURN_IF_ERROR(AfterForward(*copy, 0, copy->history));
  return copy;
}

Result<GenerateResult> EngineImpl::Generate(const GenerateRequest& request,
                                            const GenerateCallbacks& callbacks) {
  ICECACHE_ASSIGN_OR_RETURN(auto state, NewState(nullptr));
  return RunOn(*state, request, callbacks);
}

Result<ScoreResult> EngineImpl::Score(const ScoreRequest& request) {
  ICECACHE_ASSIGN_OR_RETURN(auto state, NewState(nullptr));
  return ScoreOn(*state, request);
}

namespace {

class SessionImpl : public Session {
 public:
  SessionImpl(EngineImpl* engine, std::unique_ptr<SequenceState> state)
      : engine_(engine), state_(std::move(state)) {}
  Result<GenerateResult> Generate(const GenerateRequest& request,
                                  const GenerateCallbacks& callbacks) override {
    return engine_->RunOn(*state_, request, callbacks);
  }
  Result<ScoreResult> Score(const ScoreRequest& request) override {
    return engine_->ScoreOn(*state_, request);
  }
  const std::vector<int32_t>& history() const override { return state_->history; }
  void Reset() override { state_->DropTokens(0); }
  Result<std::unique_ptr<Session>> Fork(const KvConfig& kv) override {
    ICECACHE_ASSIGN_OR_RETURN(auto copy, engine_->ForkState(*state_, kv));
    return std::unique_ptr<Session>(new SessionImpl(engine_, std::move(copy)));
  }

 private:
  EngineImpl* engine_;
  std::unique_ptr<SequenceState> state_;
};

}  // namespace

Result<std::unique_ptr<Session>> EngineImpl::NewSession(const KvConfig* kv) {
  ICECACHE_ASSIGN_OR_RETURN(auto state, NewState(kv));
  return std::unique_ptr<Session>(new SessionImpl(this, std::move(state)));
}

Result<std::vector<std::vector<float>>> EngineImpl::Logits(std::span<const int32_t> tokens,
                                                           std::span<const int64_t> positions) {
  if (tokens.empty()) return InvalidArgument("no tokens");
  if (static_cast<int64_t>(tokens.size()) > info_.context_size) {
    return OutOfRange(std::to_string(tokens.size()) + " tokens exceed the context limit of " +
                      std::to_string(info_.context_size));
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || positions[i] >= static_cast<int64_t>(tokens.size()) ||
        (i > 0 && positions[i] <= positions[i - 1])) {
      return InvalidArgument("positions must be ascending and inside the token list");
    }
  }
  KvSequence seq(pool_.get());
  KvSequence* seqs[] = {&seq};
  std::vector<std::vector<float>> out;
  const int64_t chunk = transformer_->max_tokens();
  size_t next = 0;
  for (int64_t done = 0; done < static_cast<int64_t>(tokens.size());) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - done);
    std::vector<int32_t> rows;
    while (next < positions.size() && positions[next] < done + n) {
      rows.push_back(static_cast<int32_t>(positions[next++] - done));
    }
    const int32_t counts[] = {static_cast<int32_t>(n)};
    ForwardInput in{seqs, tokens.subspan(done, n), counts, LogitsMode::kRows, rows};
    in.attention = staged_.get();
    ICECACHE_ASSIGN_OR_RETURN(Tensor logits, transformer_->Forward(in));
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* row = static_cast<const float*>(logits.row(static_cast<int64_t>(r)));
      out.emplace_back(row, row + logits.cols());
    }
    done += n;
  }
  return out;
}

}  // namespace icecache
