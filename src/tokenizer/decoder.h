// Decoders: token strings -> text, as a chain of steps over a list of strings (Hugging Face
// `decoders`: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace icecache::tok {

struct DecodeMode {
  // Bytes are passed through as they are (no U+FFFD repair): for streaming one token at a time.
  bool raw = false;
  // The first string is not the start of the output (a streamed token after others): steps that
  // treat the start specially (Strip, Metaspace) leave it alone.
  bool continuation = false;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const = 0;
};

std::unique_ptr<Decoder> MakeByteLevelDecoder();
std::unique_ptr<Decoder> MakeReplaceDecoder(std::shared_ptr<const Regex> pattern,
                                            std::string content);
std::unique_ptr<Decoder> MakeByteFallbackDecoder();
std::unique_ptr<Decoder> MakeFuseDecoder();
// Removes up to `start` leading and `stop` trailing copies of the character `content`.
std::unique_ptr<Decoder> MakeStripDecoder(std::string content, int start, int stop);
std::unique_ptr<Decoder> MakeMetaspaceDecoder(std::string replacement, PrependScheme scheme);
std::unique_ptr<Decoder> MakeSequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps);

}  // namespace icecache::tok
