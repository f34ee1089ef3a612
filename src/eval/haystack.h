// The long text that needles hide in: a folder of text files (e.g. essays), generated filler
// prose, or short repeated "noise" sentences. Measured in the model's tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/text_codec.h"
#include "icecache/status.h"

namespace icecache::eval {

class Haystack {
 public:
  // The *.txt files of `dir`, sorted by name, joined by blank lines. Fails when there are none.
  static Result<std::unique_ptr<Haystack>> FromDirectory(const std::string& dir);
  // Generated filler prose (MakeFillerText) for `seed`.
  static std::unique_ptr<Haystack> Filler(uint64_t seed);
  // Short repeated sentences with nothing in them that looks like an answer.
  static std::unique_ptr<Haystack> Noise();

  // About `tokens` tokens from the start of the haystack (repeated when it is shorter), ending
  // at a sentence or line end when one is near. Deterministic.
  Result<std::string> Take(const TextCodec& codec, int64_t tokens);

  const std::string& name() const { return name_; }

 private:
  enum class Kind { kText, kFiller, kNoise };
  Haystack(Kind kind, std::string name, std::string base, uint64_t seed);
  Status Grow(const TextCodec& codec, int64_t tokens);

  Kind kind_;
  std::string name_;
  std::string base_;  // kText and kNoise: the text that repeats
  uint64_t seed_;
  int filler_words_ = 0;
  std::vector<int32_t> tokens_;  // tokens of the current text, enough for the largest request
};

// Inserts each sentence at the sentence boundary at or after its depth (0..1, by characters)
// of `text`, separated by spaces. Depth 0 puts a sentence first, 1 puts it last. Insertions are
// placed in order of depth; equal depths keep their order.
std::string InsertAtDepths(const std::string& text,
                           std::vector<std::pair<double, std::string>> sentences);

}  // namespace icecache::eval
