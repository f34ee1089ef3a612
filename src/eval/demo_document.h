// A long document written by the program itself (no external data): deterministic filler
// prose about an invented archipelago, with one "needle" fact hidden at a chosen depth. Used by
// `icecache demo`, `icecache bench` and the needle tasks of `icecache eval`.
#pragma once

#include <cstdint>
#include <string>

namespace icecache::eval {

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

}  // namespace icecache::eval

// The CLI commands that predate the eval module use these names unqualified.
namespace icecache::cli {
using eval::HideNeedle;
using eval::MakeFillerText;
using eval::MakeNeedle;
using eval::Needle;
}  // namespace icecache::cli
