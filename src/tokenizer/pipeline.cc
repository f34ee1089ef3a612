#include "tokenizer/pipeline.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

// Names of tokens that end a turn in the chat formats we support.
constexpr std::string_view kEndOfTurnTokens[] = {"<|im_end|>",    "<|eot_id|>", "<|end_of_text|>",
                                                 "<|endoftext|>", "</s>",       "<|eom_id|>"};

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(PipelineSpec spec) : s_(std::move(spec)) {
    ICECACHE_CHECK(s_.vocab != nullptr && s_.model != nullptr);
    s_.added.Build(s_.normalizer.get());
    vocab_size_ = s_.vocab->size();
    for (const auto& t : s_.added.tokens()) vocab_size_ = std::max(vocab_size_, t.id + 1);
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids = s_.prefix_ids;
    const std::string valid = IsValidUtf8(text) ? std::string(text) : ToValidUtf8(text);
    std::vector<AddedVocab::Split> outer, inner;
    s_.added.FindSplits(valid, /*normalized=*/false, parse_special, outer);
    std::string normalized;
    std::vector<Piece> pieces;
    for (const auto& o : outer) {
      if (o.id >= 0) {
        ids.push_back(o.id);
        continue;
      }
      if (o.end == o.start) continue;
      normalized.assign(valid, o.start, o.end - o.start);
      if (s_.normalizer) s_.normalizer->Normalize(normalized);
      inner.clear();
      s_.added.FindSplits(normalized, /*normalized=*/true, parse_special, inner);
      for (const auto& in : inner) {
        if (in.id >= 0) {
          ids.push_back(in.id);
          continue;
        }
        if (in.end == in.start) continue;
        pieces.clear();
        pieces.push_back(
            {normalized.substr(in.start, in.end - in.start), o.start == 0 && in.start == 0});
        if (s_.pre_tokenizer) s_.pre_tokenizer->Apply(pieces);
        for (const auto& p : pieces) s_.model->Encode(p.text, ids);
      }
    }
    if (add_bos) ids.insert(ids.end(), s_.suffix_ids.begin(), s_.suffix_ids.end());
    return ids;
  }

  std::string Decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      std::string_view text;
      if (!Lookup(id, &text)) continue;
      if (skip_special) {
        const AddedToken* t = s_.added.FindByContent(text);
        if (t != nullptr && t->special) continue;
      }
      tokens.emplace_back(text);
    }
    return Run(tokens, DecodeMode{});
  }

  std::string TokenBytes(int32_t id, int32_t prev) const override {
    std::string_view text;
    if (!Lookup(id, &text)) return "";
    std::vector<std::string> tokens{std::string(text)};
    std::string out = Run(tokens, DecodeMode{.raw = true, .continuation = prev >= 0});
    if (s_.decoder == nullptr && prev >= 0) out.insert(0, 1, ' ');
    return out;
  }

  TokenizerKind kind() const override { return s_.kind; }
  int32_t vocab_size() const override { return vocab_size_; }
  std::string_view TokenText(int32_t id) const override {
    std::string_view text;
    return Lookup(id, &text) ? text : std::string_view();
  }
  bool IsSpecial(int32_t id) const override {
    const AddedToken* t = s_.added.FindById(id);
    return t != nullptr && t->special;
  }
  int32_t bos_id() const override { return s_.bos_id; }
  int32_t eos_id() const override { return s_.eos_id; }
  bool adds_bos() const override { return !s_.prefix_ids.empty(); }
  std::vector<int32_t> StopTokenIds() const override {
    std::vector<int32_t> ids;
    if (s_.eos_id >= 0) ids.push_back(s_.eos_id);
    for (std::string_view name : kEndOfTurnTokens) {
      const int32_t id = FindToken(name);
      if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
  }
  int32_t FindToken(std::string_view text) const override {
    if (const AddedToken* t = s_.added.FindByContent(text)) return t->id;
    return s_.vocab->Find(text);
  }

 private:
  // The string of `id` as Hugging Face's id_to_token gives it: an added token first.
  bool Lookup(int32_t id, std::string_view* text) const {
    if (const AddedToken* t = s_.added.FindById(id)) {
      *text = s_.added.DecodeText(*t);
      return true;
    }
    if (!s_.vocab->Contains(id)) return false;
    *text = s_.vocab->Text(id);
    return true;
  }

  std::string Run(std::vector<std::string>& tokens, const DecodeMode& mode) const {
    std::string out;
    if (s_.decoder == nullptr) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) out.push_back(' ');
        out.append(tokens[i]);
      }
      return out;
    }
    s_.decoder->Apply(tokens, mode);
    for (const auto& t : tokens) out.append(t);
    return out;
  }

  PipelineSpec s_;
  int32_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> MakePipelineTokenizer(PipelineSpec spec) {
  return std::make_unique<PipelineTokenizer>(std::move(spec));
}

}  // namespace icecache::tok
