// The token table shared by the BPE model and the tokenizer: id <-> string.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace icecache::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Vocab {
 public:
  // Adds `text` as token `id` (ids may come in any order; holes are allowed). When two ids share
  // a text, the later one wins the text -> id lookup (as in llama.cpp and a Python dict).
  void Add(int32_t id, std::string text);

  int32_t Find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? -1 : it->second;
  }
  bool Contains(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < present_.size() && present_[id];
  }
  // The text of `id`; empty for unknown ids.
  std::string_view Text(int32_t id) const {
    return Contains(id) ? std::string_view(texts_[id]) : std::string_view();
  }
  // One past the largest id.
  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  size_t count() const { return map_.size(); }

 private:
  std::vector<std::string> texts_;
  std::vector<bool> present_;
  TokenMap map_;
};

}  // namespace icecache::tok
