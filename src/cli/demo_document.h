// A long document written by the program itself (no external data): deterministic filler
// prose about an invented archipelago, with one "needle" fact hidden at a chosen depth.
#pragma once

#include <cstdint>
#include <string>

namespace icecache::cli {

struct Needle {
  std::string sentence;  // the fact, as it appears in the document
  std::string question;  // asks for the fact
  std::string answer;    // the expected answer text
};

// About `words` words of filler prose; equal seeds give equal text.
std::string MakeFillerText(int words, uint64_t seed);
// A needle whose answer depends on `seed`.
Needle MakeNeedle(uint64_t seed);
// Inserts `needle.sentence` into `filler` at a paragraph boundary near `depth` (0..1).
std::string HideNeedle(const std::string& filler, const Needle& needle, double depth);

}  // namespace icecache::cli
