// Boundary-aware chunking: a token stream is cut into chunks of variable length that end where a
// unit of text ends (a newline, the end of a sentence or statement, a clause, a word), read from
// each token's decoded bytes. Lengths stay within [min_len, max_len] (the hard maximum); among
// the possible cuts the strongest boundary wins, cuts up to target_len beat longer ones of the
// same strength, and ties go to the shorter chunk. With no boundary at all the cut is at
// target_len. The decision depends on token ids only, so every (layer, KV head) gets the same
// chunks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace icecache {
class Tokenizer;
}

namespace icecache::lychee {

struct ChunkLengths {
  int min_len = 8;
  int target_len = 16;
  int max_len = 24;  // hard maximum
};

// About 8-16 tokens for pages of up to 16 tokens. Every chunk has at least half a page, so the
// pages holding chunks are on average at least half full (a chunk of L tokens takes
// ceil(L / page_size) pages, which is <= 2 L / page_size when L >= page_size / 2).
ChunkLengths ChunkLengthsFor(int page_size);

// Strength of the boundary after a token.
enum BoundaryLevel : int8_t {
  kNoBoundary = 0,
  kWordBoundary = 1,    // the next token starts a new word
  kClauseBoundary = 2,  // , : ) ] and the like
  kStrongBoundary = 3,  // newline, end of sentence or statement, block delimiter, special token
};

// Classifies tokens by their decoded bytes (cached per id). Without a tokenizer every token is
// kNoBoundary (fixed-length chunks of target_len).
class BoundaryClassifier {
 public:
  explicit BoundaryClassifier(const Tokenizer* tokenizer);

  // The boundary a token makes by how it ends.
  BoundaryLevel EndLevel(int32_t id);
  // The boundary a token makes before itself (starts a word, or is a special token).
  BoundaryLevel StartLevel(int32_t id);
  // Boundary strength of a cut between `before` and `after`.
  BoundaryLevel CutLevel(int32_t before, int32_t after);

 private:
  struct Class {
    int8_t end = 0;
    int8_t start = 0;
  };
  Class Classify(int32_t id) const;
  const Class& Get(int32_t id);

  const Tokenizer* tokenizer_;
  std::vector<Class> cache_;
  std::vector<uint8_t> known_;
  Class none_;
};

// The length of the chunk that starts at ids[0], or 0 when the tokens available cannot decide it
// yet (more are needed). `ids` holds the tokens from the chunk start onward.
int NextCut(std::span<const int32_t> ids, BoundaryClassifier& classifier, const ChunkLengths& lens);

}  // namespace icecache::lychee
