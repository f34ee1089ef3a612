#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A candidate merge of the symbol at `pos` with its right neighbour.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
// Priority queue order: lowest rank first, then leftmost.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

BpeModel::BpeModel(const Vocab& vocab, BpeOptions options) : vocab_(vocab), options_(options) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = vocab.Find(name);
  }
}

Result<std::unique_ptr<BpeModel>> BpeModel::FromMerges(
    const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    BpeOptions options) {
  std::unique_ptr<BpeModel> m(new BpeModel(vocab, options));
  m->merges_.reserve(merges.size() * 2);
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const int32_t left = vocab.Find(a), right = vocab.Find(b);
    const int32_t merged = vocab.Find(a + b);
    if (left < 0 || right < 0 || merged < 0) {
      const std::string& missing = left < 0 ? a : right < 0 ? b : a + b;
      return Corrupt(
          fmt::format("merge {} ('{} {}'): token '{}' is not in the vocabulary", i, a, b, missing));
    }
    // A repeated pair takes its later rank, as in Hugging Face.
    m->merges_[PairKey(left, right)] = {static_cast<int32_t>(i), merged};
  }
  return m;
}

std::unique_ptr<BpeModel> BpeModel::FromScores(const Vocab& vocab, const std::vector<float>& scores,
                                               std::vector<bool> mergeable,
                                               std::vector<bool> unused, BpeOptions options) {
  std::unique_ptr<BpeModel> m(new BpeModel(vocab, options));
  m->scored_ = true;
  // Equal scores share a rank so that the leftmost pair wins, as in SentencePiece.
  std::vector<float> distinct;
  for (float s : scores) distinct.push_back(std::isnan(s) ? -INFINITY : s);
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  m->score_rank_.resize(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const float s = std::isnan(scores[i]) ? -INFINITY : scores[i];
    m->score_rank_[i] = static_cast<int32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), s, std::greater<float>()) -
        distinct.begin());
  }
  mergeable.resize(vocab.size(), false);
  unused.resize(vocab.size(), false);
  m->mergeable_ = std::move(mergeable);
  m->unused_ = std::move(unused);
  return m;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (piece.size() >= kMaxCachedLength) {
    EncodeUncached(piece, out);
    return;
  }
  {
    ReaderLock lock(&cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  EncodeUncached(piece, out);
  WriterLock lock(&cache_mutex_);
  if (cache_.size() < kMaxCacheEntries) {
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void BpeModel::EmitBytes(std::string_view bytes, std::vector<int32_t>& out) const {
  for (char c : bytes) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<Symbol>& symbols) const {
  // Pending unknown run (ranked mode): id and byte range, fused when fuse_unk is set.
  int32_t unk_start = -1, unk_len = 0;
  auto flush_unk = [&] {
    if (unk_start >= 0) {
      symbols.push_back({options_.unk_id, static_cast<uint32_t>(unk_start),
                         static_cast<uint32_t>(unk_len), 0, 0});
      unk_start = -1;
    }
  };
  size_t i = 0;
  while (i < piece.size()) {
    const size_t n = CharLength(static_cast<unsigned char>(piece[i]));
    const std::string_view ch = piece.substr(i, n);
    const int32_t id = vocab_.Find(ch);
    if (id >= 0) {
      flush_unk();
      symbols.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(n), 0, 0});
    } else if (scored_) {
      // SentencePiece resolves unknown characters after merging.
      symbols.push_back({-1, static_cast<uint32_t>(i), static_cast<uint32_t>(n), 0, 0});
    } else {
      bool all_bytes = options_.byte_fallback;
      for (size_t k = 0; all_bytes && k < n; ++k) {
        all_bytes = byte_ids_[static_cast<unsigned char>(ch[k])] >= 0;
      }
      if (all_bytes) {
        // HF does not flush a pending unknown run here; it stays open until a known character.
        for (size_t k = 0; k < n; ++k) {
          symbols.push_back({byte_ids_[static_cast<unsigned char>(ch[k])],
                             static_cast<uint32_t>(i + k), 1, 0, 0});
        }
      } else if (options_.unk_id >= 0) {
        if (unk_start >= 0 && options_.fuse_unk) {
          unk_len += static_cast<int32_t>(n);
        } else {
          flush_unk();
          unk_start = static_cast<int32_t>(i);
          unk_len = static_cast<int32_t>(n);
        }
      }
    }
    i += n;
  }
  flush_unk();
  for (size_t k = 0; k < symbols.size(); ++k) {
    symbols[k].prev = static_cast<int32_t>(k) - 1;
    symbols[k].next = k + 1 < symbols.size() ? static_cast<int32_t>(k + 1) : -1;
  }
}

bool BpeModel::LookupPair(std::string_view piece, const Symbol& left, const Symbol& right,
                          PairInfo* info) const {
  if (!scored_) {
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end()) return false;
    *info = it->second;
    return true;
  }
  const int32_t id = vocab_.Find(piece.substr(left.start, left.len + right.len));
  if (id < 0 || static_cast<size_t>(id) >= mergeable_.size() || !mergeable_[id]) return false;
  *info = {score_rank_[id], id};
  return true;
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  InitialSymbols(piece, symbols);
  if (symbols.empty()) return;

  RevMerges rev;  // scores mode: how unused pieces were formed
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  PairInfo info;
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (LookupPair(piece, symbols[k], symbols[k + 1], &info)) {
      queue.push({info.rank, static_cast<int32_t>(k), info.new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip entries made stale by earlier merges: the pair must still produce the same token.
    if (!LookupPair(piece, left, right, &info) || info.new_id != top.new_id) continue;
    if (scored_ && unused_[top.new_id]) {
      rev[piece.substr(left.start, left.len + right.len)] = {piece.substr(left.start, left.len),
                                                             piece.substr(right.start, right.len)};
    }
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0 && LookupPair(piece, symbols[left.prev], left, &info)) {
      queue.push({info.rank, left.prev, info.new_id});
    }
    if (left.next >= 0 && LookupPair(piece, left, symbols[left.next], &info)) {
      queue.push({info.rank, top.pos, info.new_id});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len == 0) continue;
    if (!scored_) {
      out.push_back(s.id);
    } else {
      EmitSymbol(piece.substr(s.start, s.len), s.id, rev, out);
    }
  }
}

// Scores mode: unused pieces are split back into their parts; unknown characters become bytes
// or the unknown token.
void BpeModel::EmitSymbol(std::string_view text, int32_t id, const RevMerges& rev,
                          std::vector<int32_t>& out) const {
  if (id >= 0 && unused_[id]) {
    auto it = rev.find(text);
    if (it != rev.end()) {
      EmitSymbol(it->second.first, vocab_.Find(it->second.first), rev, out);
      EmitSymbol(it->second.second, vocab_.Find(it->second.second), rev, out);
      return;
    }
  }
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  bool all_bytes = options_.byte_fallback;
  for (size_t k = 0; all_bytes && k < text.size(); ++k) {
    all_bytes = byte_ids_[static_cast<unsigned char>(text[k])] >= 0;
  }
  if (all_bytes) {
    EmitBytes(text, out);
  } else if (options_.unk_id >= 0) {
    out.push_back(options_.unk_id);
  }
}

}  // namespace icecache::tok
