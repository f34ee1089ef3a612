#include "eval/text_codec.h"

namespace icecache::eval {

namespace {

class EngineCodec : public TextCodec {
 public:
  explicit EngineCodec(const Engine& engine) : engine_(engine) {}

  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    return engine_.Tokenize(text, /*add_bos=*/false, /*parse_special=*/false);
  }

  std::string Decode(std::span<const int32_t> tokens) const override {
    return engine_.Detokenize(tokens);
  }

  Result<std::vector<int32_t>> EncodeDocument(std::string_view text) const override {
    return engine_.Tokenize(text, /*add_bos=*/true, /*parse_special=*/false);
  }

  Result<std::vector<int32_t>> EncodePrompt(const std::string& user,
                                            const std::string& answer_prefix) const override {
    if (engine_.info().has_chat_template) {
      ICECACHE_ASSIGN_OR_RETURN(
          std::string text, engine_.FormatChat({{"user", user}}, /*add_generation_prompt=*/true));
      // The template writes any BOS text itself; its special tokens must parse as such.
      return engine_.Tokenize(text + answer_prefix, /*add_bos=*/false, /*parse_special=*/true);
    }
    std::string text = user + "\nAnswer:";
    if (!answer_prefix.empty()) text += " " + answer_prefix;
    return engine_.Tokenize(text, /*add_bos=*/true, /*parse_special=*/false);
  }

 private:
  const Engine& engine_;
};

}  // namespace

std::unique_ptr<TextCodec> MakeEngineCodec(const Engine& engine) {
  return std::make_unique<EngineCodec>(engine);
}

}  // namespace icecache::eval
