// The Engine behind include/icecache/engine.h: a loaded model, a backend, the forward pass and
// a KV page pool; generation runs on a KvSequence (fresh per request, or a Session's).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "engine/sequence_state.h"
#include "engine/sparse_attention.h"
#include "engine/staged_attention.h"
#include "engine/transformer.h"
#include "icecache/engine.h"
#include "kv/page_pool.h"
#include "model/loader.h"

namespace icecache {

class Generation;

// The median of the second half of `steps` (seconds per decode step): the steady-state step.
double SteadyStepSeconds(std::vector<double> steps);

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
  Result<std::unique_ptr<Session>> NewSession(const KvConfig* kv) override;
  Result<ScoreResult> Score(const ScoreRequest& request) override;
  Result<std::vector<GenerateResult>> GenerateBatch(
      std::span<const GenerateRequest> requests) override;
  Result<std::vector<std::vector<float>>> Logits(std::span<const int32_t> tokens,
                                                 std::span<const int64_t> positions) override;

  // Runs `request` on `state` (its history is updated to what its KV holds after).
  Result<GenerateResult> RunOn(SequenceState& state, const GenerateRequest& request,
                               const GenerateCallbacks& callbacks);
  // Runs requests[i] on states[i]: prefills one after another, then decodes all in lockstep.
  // `callbacks` (may be null) apply to every request.
  Result<std::vector<GenerateResult>> RunBatch(std::span<SequenceState* const> states,
                                               std::span<const GenerateRequest> requests,
                                               const GenerateCallbacks* callbacks);
  Result<ScoreResult> ScoreOn(SequenceState& state, const ScoreRequest& request);
  // A fresh sequence under `kv` (the engine's policy when null). Fails if `kv` is invalid or
  // asks for a page size or dtype other than the pool's.
  Result<std::unique_ptr<SequenceState>> NewState(const KvConfig* kv);
  // Gives `state` a DeviceSelection when --kv-select asks for one (or allows it, on a GPU).
  Status StartDeviceSelection(SequenceState& state);
  // Whether a sequence of `config` selects in device memory (--kv-select and the policy); an
  // error when --kv-select device asks for what the device cannot do.
  Result<bool> SelectsOnDevice(const KvConfig& config) const;
  // Decode steps whose sequences' indexes updated side by side (RunIndexUpdates), for tests.
  int64_t parallel_index_updates() const { return parallel_index_updates_; }
  // Decode steps that ran the index updates of the step before beside their device work.
  int64_t beside_index_updates() const { return beside_index_updates_; }
  // A copy of `state` (pages and history) under policy `kv`.
  Result<std::unique_ptr<SequenceState>> ForkState(const SequenceState& state, const KvConfig& kv);

 private:
  EngineImpl() = default;
  Result<std::vector<int32_t>> PromptTokens(const GenerateRequest& request) const;
  // Drops the KV of `state` past the longest prefix it shares with `tokens`, keeping at least
  // one token of `tokens` to run. Returns the number of reused tokens.
  size_t ReusePrefix(SequenceState& state, std::span<const int32_t> tokens);
  // Feeds `tokens` into `state` in chunks (appending to its history); returns the logits of
  // the last token. On failure the state is as before.
  Result<std::vector<float>> Prefill(SequenceState& state, std::span<const int32_t> tokens,
                                     const GenerateCallbacks& callbacks);
  // One decode step: feeds `token`, returns the next logits.
  Result<Tensor> DecodeStep(SequenceState& state, int32_t token);
  // One decode step for several sequences (tokens[i] to states[i]); returns one logits row per
  // sequence. Sparse policies attend through their selections; charges each state's accounting.
  // With `sampled`, the rows are instead argmax-sampled on the device (one id per sequence into
  // *sampled; nothing else crosses to the host) and the returned tensor is empty.
  Result<Tensor> DecodeBatch(std::span<SequenceState* const> states,
                             std::span<const int32_t> tokens,
                             std::vector<int32_t>* sampled = nullptr);
  // Whether DecodeAhead serves `g` (the only request of a batch): greedy on a GPU's sampler, dense
  // attention over KV on the device, and ICECACHE_DECODE_AHEAD not 0.
  bool CanDecodeAhead(const Generation& g) const;
  // Greedy decode of one dense sequence with each step queued before the token of the step
  // before it is read on the host (decode_ahead.cc). Steps `g` until it finishes.
  Status DecodeAhead(Generation& g);
  // A decode step's accounting for `state`: fed `token`, took `seconds`, ran over `length` tokens.
  void ChargeStep(SequenceState& state, int32_t token, double seconds, int64_t length, bool sparse);
  // Tells the sequence's index about tokens [first, length) just appended.
  Status AfterForward(SequenceState& state, int64_t first, std::span<const int32_t> tokens);
  // The index update after a decode step: OnAppend(state->seq, first, {token}).
  struct IndexUpdate {
    SequenceState* state;
    int64_t first;
    int32_t token;
  };
  // The index updates of a decode step (tokens[i] was appended to states[i]): run now
  // (FlushPendingUpdates, every state of the step waiting), or with `beside_next`, left in
  // pending_ for the next step to run beside its device work.
  Status AfterDecodeStep(std::span<SequenceState* const> states, std::span<const int32_t> tokens,
                         bool beside_next);
  // Runs `updates`: side by side on the index workers when there are at least half as many of
  // them as workers and their page bounds fit the pool together
  // (SequenceIndex::AppendPagesBound), else one after another. took[k]: seconds of updates[k].
  Status RunIndexUpdates(std::span<const IndexUpdate> updates, std::vector<double>* took);
  // Whether a decode step of `states` runs the index updates of the step before beside its device
  // work (beside_updates.cc): inside RunBatch's decode loop, --index-update beside (or auto on a
  // GPU), every indexed sequence selecting on the device with an index that allows it
  // (SequenceIndex::UpdatesBesideDeviceReads), and no --kv-timing or --kv-recall.
  bool UpdatesBeside(std::span<SequenceState* const> states) const;
  // Charges updates[k]'s seconds took[k] to its sequence's index update and to its last step
  // (the step that ran it, or the one it followed); `beside`: as time beside the device's work.
  static void ChargeUpdates(std::span<const IndexUpdate> updates, const std::vector<double>& took,
                            bool beside);
  // Runs pending_ now (between steps: waits for the device first). Charges each update to its
  // sequence, and the time all of them took to each of them and to the `waiting` sequences.
  Status FlushPendingUpdates(std::span<SequenceState* const> waiting = {});
  class BesideUpdates;
  IndexContext IndexFor(const KvConfig& kv) const;

  EngineOptions options_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<SparseAttention> sparse_;
  // Dense attention when the KV is offloaded (null otherwise: the transformer's own).
  std::unique_ptr<StagedAttention> staged_;
  // Host threads the sequences' indexes maintain their lists with: one index at a time, or the
  // indexes of a decode step's sequences side by side (each one's own work then inline).
  std::unique_ptr<ThreadPool> index_workers_;
  int64_t parallel_index_updates_ = 0;
  std::vector<IndexUpdate> pending_;  // index updates left for the next decode step
  bool beside_scope_ = false;         // RunBatch's decode loop is running
  int64_t beside_index_updates_ = 0;
  double trace_ids_at_ = 0;  // when the last traced step's ids reached the host
  ModelInfo info_;
};

}  // namespace icecache
