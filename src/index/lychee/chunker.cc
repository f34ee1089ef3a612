#include "index/lychee/chunker.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace icecache::lychee {

ChunkLengths ChunkLengthsFor(int page_size) {
  ChunkLengths l;
  l.min_len = std::max(8, (page_size + 1) / 2);
  l.target_len = std::max(16, page_size);
  l.max_len = l.target_len + l.target_len / 2;
  return l;
}

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

BoundaryLevel EndLevelOfBytes(std::string_view b) {
  if (b.find('\n') != std::string_view::npos) return kStrongBoundary;
  // Trailing spaces or tabs do not change what the token ends.
  while (!b.empty() && (b.back() == ' ' || b.back() == '\t' || b.back() == '\r')) {
    b.remove_suffix(1);
  }
  if (b.empty()) return kNoBoundary;
  // Full-width sentence and clause marks (UTF-8).
  for (std::string_view s : {"\u3002", "\uff01", "\uff1f", "\uff1b"}) {
    if (EndsWith(b, s)) return kStrongBoundary;
  }
  for (std::string_view s : {"\uff0c", "\u3001", "\uff1a"}) {
    if (EndsWith(b, s)) return kClauseBoundary;
  }
  switch (b.back()) {
    case '.':
    case '!':
    case '?':
    case ';':
    case '{':
    case '}':
      return kStrongBoundary;
    case ',':
    case ':':
    case ')':
    case ']':
    case '>':
      return kClauseBoundary;
    default:
      return kNoBoundary;
  }
}

}  // namespace

BoundaryClassifier::BoundaryClassifier(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {
  if (tokenizer_ != nullptr) {
    const int32_t n = std::max<int32_t>(0, tokenizer_->vocab_size());
    cache_.resize(static_cast<size_t>(n));
    known_.assign(static_cast<size_t>(n), 0);
  }
}

BoundaryClassifier::Class BoundaryClassifier::Classify(int32_t id) const {
  Class c;
  if (tokenizer_->IsSpecial(id)) {
    c.end = kStrongBoundary;
    c.start = kStrongBoundary;
    return c;
  }
  // Decoded as a continuation, so a SentencePiece word start shows its leading space.
  const std::string bytes = tokenizer_->TokenBytes(id, /*prev=*/0);
  c.end = EndLevelOfBytes(bytes);
  if (!bytes.empty() && (bytes[0] == ' ' || bytes[0] == '\t' || bytes[0] == '\n')) {
    c.start = kWordBoundary;
  }
  return c;
}

const BoundaryClassifier::Class& BoundaryClassifier::Get(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= cache_.size()) return none_;
  if (!known_[id]) {
    cache_[id] = Classify(id);
    known_[id] = 1;
  }
  return cache_[id];
}

BoundaryLevel BoundaryClassifier::EndLevel(int32_t id) {
  return static_cast<BoundaryLevel>(Get(id).end);
}

BoundaryLevel BoundaryClassifier::StartLevel(int32_t id) {
  return static_cast<BoundaryLevel>(Get(id).start);
}

BoundaryLevel BoundaryClassifier::CutLevel(int32_t before, int32_t after) {
  return std::max(EndLevel(before), StartLevel(after));
}

int NextCut(std::span<const int32_t> ids, BoundaryClassifier& classifier,
            const ChunkLengths& lens) {
  const int n = static_cast<int>(std::min<size_t>(ids.size(), 1 << 20));
  // A cut after L tokens is scored 2 * level, plus one when L <= target_len; the best score
  // wins, the shortest chunk among equals. A strong cut within the target scores the most, so
  // it is final as soon as it is seen.
  const int best_possible = 2 * kStrongBoundary + 1;
  int best_len = 0, best_score = 0;
  for (int len = lens.min_len; len <= lens.max_len; ++len) {
    if (len >= n) return 0;  // the token after the cut is not known yet
    const int level = classifier.CutLevel(ids[len - 1], ids[len]);
    if (level == kNoBoundary) continue;
    const int score = 2 * level + (len <= lens.target_len ? 1 : 0);
    if (score > best_score) {
      best_score = score;
      best_len = len;
      if (score == best_possible) return best_len;
    }
  }
  return best_len > 0 ? best_len : lens.target_len;
}

}  // namespace icecache::lychee
