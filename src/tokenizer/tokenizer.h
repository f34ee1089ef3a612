// Tokenizers: byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM2 pre-tokenizers) and
// SentencePiece-style BPE (Llama-2, Mistral: U+2581 space marker, byte fallback), loaded from
// GGUF metadata or a Hugging Face tokenizer.json. Output must equal Hugging Face `tokenizers`.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "icecache/status.h"

namespace icecache {

class GgufFile;

enum class TokenizerKind { kByteLevelBpe, kSentencePieceBpe };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // From GGUF keys tokenizer.ggml.* (model "gpt2" or "llama"; pre-tokenizer from
  // tokenizer.ggml.pre). Unknown model or pre-tokenizer names are an error naming them.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // From tokenizer.json (and tokenizer_config.json when present, for bos/eos/add_bos).
  // `config_path` may be empty.
  static Result<std::unique_ptr<Tokenizer>> FromHfFiles(const std::string& tokenizer_json_path,
                                                        const std::string& config_path);
  static Result<std::unique_ptr<Tokenizer>> FromHfJson(std::string_view tokenizer_json,
                                                       std::string_view config_json);

  // Token ids of `text`. When `parse_special` is true, the text of special/added tokens
  // (e.g. "<|im_start|>") maps to their ids; otherwise special tokens are tokenized as plain
  // text (non-special added tokens are still matched, as in HF with encode_special_tokens).
  // When `add_bos` is true and the model adds a BOS token, it is prepended (and an EOS appended
  // when the model's post-processor / add_eos_token says so). Invalid UTF-8 in `text` is read
  // as U+FFFD.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                                      bool parse_special) const = 0;
  // The text of `ids` (special tokens included as their text unless skip_special).
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // The raw bytes one token contributes when decoded after `prev` (-1 if first: then the
  // leading space a SentencePiece normalizer added is dropped, as Decode does); may be an
  // incomplete UTF-8 sequence (use StreamDecoder for text output). Unknown ids give "".
  virtual std::string TokenBytes(int32_t id, int32_t prev) const = 0;

  virtual TokenizerKind kind() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::string_view TokenText(int32_t id) const = 0;  // the vocabulary string
  virtual bool IsSpecial(int32_t id) const = 0;              // control / special added token
  // -1 if the model has none.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual bool adds_bos() const = 0;
  // Tokens that end generation: eos plus end-of-turn tokens such as <|im_end|>, <|eot_id|>.
  virtual std::vector<int32_t> StopTokenIds() const = 0;
  // Id of an exact token string (special or not), or -1.
  virtual int32_t FindToken(std::string_view text) const = 0;
};

// Turns a stream of token ids into UTF-8 text pieces, holding back incomplete sequences.
class StreamDecoder {
 public:
  // `prev`: the token before the stream (e.g. the prompt's last), or -1 when the stream is the
  // start of the text. With -1 the first token of a SentencePiece model loses the leading space
  // its normalizer added, as Hugging Face's decode of the generated ids alone does.
  explicit StreamDecoder(const Tokenizer& tok, int32_t prev = -1) : tok_(tok), prev_(prev) {}
  // Text ready to print after appending `id` (possibly empty).
  std::string Push(int32_t id);
  // Whatever is still held back (invalid bytes become U+FFFD).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  int32_t prev_ = -1;
  std::string pending_;
};

}  // namespace icecache
