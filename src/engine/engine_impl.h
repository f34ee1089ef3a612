// The Engine behind include/icecache/engine.h: a loaded model, a backend, the forward pass and
// a KV page pool; generation runs on a KvSequence (fresh per request, or a Session's).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/transformer.h"
#include "icecache/engine.h"
#include "kv/page_pool.h"
#include "model/loader.h"

namespace icecache {

class EngineImpl : public Engine {
 public:
  static Result<std::unique_ptr<EngineImpl>> Create(const EngineOptions& options);

  const ModelInfo& info() const override { return info_; }
  Result<std::vector<int32_t>> Tokenize(std::string_view text, bool add_bos,
                                        bool parse_special) const override;
  std::string Detokenize(std::span<const int32_t> tokens) const override;
  Result<std::string> FormatChat(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const override;
  Result<GenerateResult> Generate(const GenerateRequest& request,
                                  const GenerateCallbacks& callbacks) override;
  Result<std::unique_ptr<Session>> NewSession() override;
  Result<std::vector<std::vector<float>>> Logits(std::span<const int32_t> tokens,
                                                 std::span<const int64_t> positions) override;

  // Runs `request` on `seq`, whose KV holds `history` (updated to what the KV holds after).
  Result<GenerateResult> RunOn(KvSequence& seq, std::vector<int32_t>& history,
                               const GenerateRequest& request, const GenerateCallbacks& callbacks);
  PagePool& pool() { return *pool_; }

 private:
  EngineImpl() = default;
  Result<std::vector<int32_t>> PromptTokens(const GenerateRequest& request) const;
  // Feeds tokens[from:] into `seq` in chunks; returns the logits of the last token.
  Result<std::vector<float>> Prefill(KvSequence& seq, std::span<const int32_t> tokens,
                                     const GenerateCallbacks& callbacks);

  EngineOptions options_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<PagePool> pool_;
  ModelInfo info_;
};

}  // namespace icecache
