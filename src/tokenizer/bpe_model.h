// BPE over one pre-tokenized piece. Two ways to choose merges:
//  - ranked merges (Hugging Face BPE, GGUF "gpt2"): the pair (left, right) merges if it is in the
//    merges list, lowest rank first;
//  - scores (SentencePiece BPE, GGUF "llama"): a pair merges if its concatenation is a mergeable
//    vocabulary piece, highest score first.
// Ties go to the leftmost pair. Characters missing from the vocabulary become <0xXX> byte tokens
// (byte_fallback) or the unknown token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "icecache/status.h"
#include "tokenizer/vocab.h"

namespace icecache::tok {

struct BpeOptions {
  bool byte_fallback = false;
  int32_t unk_id = -1;  // -1: characters that cannot be encoded are dropped (as HF does)
  bool fuse_unk = false;
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama-3)
};

class BpeModel {
 public:
  // `vocab` must outlive the model. Merges name tokens by text; an unknown text is an error.
  static Result<std::unique_ptr<BpeModel>> FromMerges(
      const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options);
  // `scores[id]` orders merges; only ids with `mergeable[id]` can be produced by a merge, and
  // ids with `unused[id]` are split back into the pieces that formed them (SentencePiece).
  static std::unique_ptr<BpeModel> FromScores(const Vocab& vocab, const std::vector<float>& scores,
                                              std::vector<bool> mergeable, std::vector<bool> unused,
                                              BpeOptions options);

  // Appends the ids of `piece` (valid UTF-8).
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Symbol {
    int32_t id;  // -1: a character not in the vocabulary (scores mode only)
    uint32_t start;
    uint32_t len;
    int32_t prev;
    int32_t next;
  };
  struct PairInfo {
    int32_t rank;
    int32_t new_id;
  };

  explicit BpeModel(const Vocab& vocab, BpeOptions options);
  void EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const;
  void InitialSymbols(std::string_view piece, std::vector<Symbol>& symbols) const;
  bool LookupPair(std::string_view piece, const Symbol& left, const Symbol& right,
                  PairInfo* info) const;
  using RevMerges =
      std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>>;
  void EmitSymbol(std::string_view text, int32_t id, const RevMerges& rev,
                  std::vector<int32_t>& out) const;
  void EmitBytes(std::string_view bytes, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  BpeOptions options_;
  bool scored_ = false;
  std::unordered_map<uint64_t, PairInfo> merges_;  // (left << 32 | right) -> rank, result
  std::vector<int32_t> score_rank_;                // scores mode: rank of each id (lower first)
  std::vector<bool> mergeable_;
  std::vector<bool> unused_;
  int32_t byte_ids_[256];  // id of "<0xXX>", or -1

  // Word -> ids cache (pieces shorter than kMaxCachedLength).
  static constexpr size_t kMaxCachedLength = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 17;
  mutable SharedMutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_
      ICECACHE_GUARDED_BY(cache_mutex_);
};

}  // namespace icecache::tok
