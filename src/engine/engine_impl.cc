#include "engine/engine_impl.h"

#include <algorithm>
#include <cstring>

#include "core/process.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "model/arch/arch.h"

namespace icecache {

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  ICECACHE_ASSIGN_OR_RETURN(auto impl, EngineImpl::Create(options));
  return std::unique_ptr<Engine>(std::move(impl));
}

Result<std::unique_ptr<EngineImpl>> EngineImpl::Create(const EngineOptions& options) {
  if (options.prefill_chunk <= 0) return InvalidArgument("prefill chunk must be positive");
  if (options.max_sequences <= 0) return InvalidArgument("max sequences must be positive");
  if (options.kv_page_size <= 0 || options.kv_page_size > 4096) {
    return InvalidArgument("KV page size must be in [1, 4096]");
  }
  if (options.context_size < 0) return InvalidArgument("context size must be >= 0");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0");

  std::unique_ptr<EngineImpl> e(new EngineImpl());
  e->options_ = options;
  if (options.device == "cpu") {
    e->backend_ = MakeCpuBackend({.threads = options.threads});
  } else if (options.device == "cuda") {
    return Unsupported("device 'cuda': this build has no CUDA backend yet");
  } else {
    return InvalidArgument("unknown device '" + options.device + "' (expected cpu or cuda)");
  }
  ICECACHE_ASSIGN_OR_RETURN(std::string path, ResolveModelPath(options.model));
  ICECACHE_ASSIGN_OR_RETURN(e->model_, LoadModel(path));
  const ModelConfig& c = e->model_->config;

  const int ctx = options.context_size > 0 ? options.context_size : c.max_context;
  if (c.sliding_window > 0 && ctx > c.sliding_window) {
    return Unsupported("this model uses sliding-window attention (window " +
                       std::to_string(c.sliding_window) +
                       "), which is not implemented; use --ctx-size <= " +
                       std::to_string(c.sliding_window));
  }
  const int chunk = std::min(options.prefill_chunk, ctx);
  ICECACHE_ASSIGN_OR_RETURN(e->transformer_,
                            Transformer::Create(c, e->model_->weights, e->backend_.get(), chunk));
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, options.kv_page_size, DType::kF32};
  ICECACHE_ASSIGN_OR_RETURN(
      e->pool_, PagePool::Create(*e->backend_, layout,
                                 layout.PagesForTokens(ctx) * options.max_sequences));

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
  for (const TensorEntry& t : e->model_->tensors) i.weight_bytes += t.bytes;
  i.has_chat_template = e->model_->chat_template.has_value();
  i.backend = e->backend_->Describe();
  return e;
}

Result<std::vector<int32_t>> EngineImpl::Tokenize(std::string_view text, bool add_bos,
                                                  bool parse_special) const {
  return model_->tokenizer->Encode(text, add_bos, parse_special);
}

std::string EngineImpl::Detokenize(std::span<const int32_t> tokens) const {
  return model_->tokenizer->Decode(tokens);
}

Result<std::string> EngineImpl::FormatChat(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
  if (!model_->chat_template) {
    return Unsupported("this model has no supported chat template (" +
                       model_->chat_template_note + ")");
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

Result<std::vector<float>> EngineImpl::Prefill(KvSequence& seq, std::span<const int32_t> tokens,
                                               const GenerateCallbacks& callbacks) {
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t chunk = transformer_->max_tokens();
  KvSequence* seqs[] = {&seq};
  std::vector<float> last;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(chunk, total - done);
    const int32_t counts[] = {static_cast<int32_t>(n)};
    ForwardInput in{seqs, tokens.subspan(done, n), counts,
                    done + n == total ? LogitsMode::kLast : LogitsMode::kNone, {}};
    ICECACHE_ASSIGN_OR_RETURN(Tensor logits, transformer_->Forward(in));
    done += n;
    if (done == total) {
      const float* row = logits.data_as<float>();
      last.assign(row, row + logits.cols());
    }
    if (callbacks.on_prefill) callbacks.on_prefill(done, total);
  }
  return last;
}

Result<GenerateResult> EngineImpl::RunOn(KvSequence& seq, std::vector<int32_t>& history,
                                         const GenerateRequest& request,
                                         const GenerateCallbacks& callbacks) {
  if (request.max_tokens < 0) return InvalidArgument("max tokens must be >= 0");
  ICECACHE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(request.sampling));
  ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptTokens(request));
  const Tokenizer& tok = *model_->tokenizer;

  // Reuse the KV of the longest common prefix; at least one token must run to get logits.
  size_t common = 0;
  while (common < history.size() && common < prompt.size() && history[common] == prompt[common]) {
    ++common;
  }
  if (common == prompt.size()) --common;
  seq.Truncate(static_cast<int64_t>(common));
  history.resize(common);

  GenerateResult result;
  GenerateStats& st = result.stats;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  st.cached_tokens = static_cast<int64_t>(common);
  st.kv_bytes_per_token = info_.kv_bytes_per_token;

  const double t0 = NowSeconds();
  auto fresh = std::span<const int32_t>(prompt).subspan(common);
  auto logits_or = Prefill(seq, fresh, callbacks);
  if (!logits_or.ok()) {
    seq.Truncate(static_cast<int64_t>(common));
    return logits_or.status();
  }
  std::vector<float> logits = std::move(logits_or).value();
  history.insert(history.end(), fresh.begin(), fresh.end());
  const double t1 = NowSeconds();
  st.prefill_seconds = t1 - t0;

  std::vector<int32_t> stop_ids;
  if (!request.ignore_eos) stop_ids = tok.StopTokenIds();
  StopMatcher stops(request.stop);
  StreamDecoder decoder(tok);
  KvSequence* seqs[] = {&seq};
  const int32_t one[] = {1};
  bool cancelled = false;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (callbacks.on_text && !callbacks.on_text(text)) cancelled = true;
  };

  st.finish_reason = "length";
  int64_t forwards = 0;
  for (int i = 0; i < request.max_tokens; ++i) {
    const int32_t next = sampler.Sample(logits, history);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
      st.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(next);
    emit(stops.Push(decoder.Push(next)));
    if (stops.stopped()) {
      st.finish_reason = "stop";
      break;
    }
    if (cancelled) {
      st.finish_reason = "cancelled";
      break;
    }
    if (i + 1 == request.max_tokens) break;  // no need to run the last token
    if (seq.length() + 1 >= info_.context_size) {
      st.finish_reason = "context";
      break;
    }
    const int32_t ids[] = {next};
    ForwardInput in{seqs, ids, one, LogitsMode::kLast, {}};
    ICECACHE_ASSIGN_OR_RETURN(Tensor out, transformer_->Forward(in));
    history.push_back(next);
    ++forwards;
    const float* row = out.data_as<float>();
    logits.assign(row, row + out.cols());
  }
  if (!stops.stopped()) emit(stops.Push(decoder.Flush()) + stops.Flush());
  const double t2 = NowSeconds();
  st.generated_tokens = static_cast<int64_t>(result.tokens.size());
  st.decode_seconds = t2 - t1;
  if (st.prefill_seconds > 0) {
    st.prefill_tokens_per_second =
        static_cast<double>(st.prompt_tokens - st.cached_tokens) / st.prefill_seconds;
  }
  // Decode speed: single-token forward passes per second of the decode phase.
  if (st.decode_seconds > 0 && forwards > 0) {
    st.decode_tokens_per_second = static_cast<double>(forwards) / st.decode_seconds;
  }
  st.kv_bytes = seq.num_pages() * seq.layout().page_bytes();
  st.peak_rss_bytes = PeakRssBytes();
  return result;
}

Result<GenerateResult> EngineImpl::Generate(const GenerateRequest& request,
                                            const GenerateCallbacks& callbacks) {
  KvSequence seq(pool_.get());
  std::vector<int32_t> history;
  return RunOn(seq, history, request, callbacks);
}

namespace {

class SessionImpl : public Session {
 public:
  explicit SessionImpl(EngineImpl* engine) : engine_(engine), seq_(&engine->pool()) {}
  Result<GenerateResult> Generate(const GenerateRequest& request,
                                  const GenerateCallbacks& callbacks) override {
    return engine_->RunOn(seq_, history_, request, callbacks);
  }
  const std::vector<int32_t>& history() const override { return history_; }
  void Reset() override {
    seq_.Truncate(0);
    history_.clear();
  }

 private:
  EngineImpl* engine_;
  KvSequence seq_;
  std::vector<int32_t> history_;
};

}  // namespace

Result<std::unique_ptr<Session>> EngineImpl::NewSession() {
  return std::unique_ptr<Session>(new SessionImpl(this));
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
