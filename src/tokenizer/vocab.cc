#include "tokenizer/vocab.h"

namespace icecache::tok {

void Vocab::Add(int32_t id, std::string text) {
  if (id < 0) return;
  if (static_cast<size_t>(id) >= texts_.size()) {
    texts_.resize(id + 1);
    present_.resize(id + 1, false);
  }
  map_.insert_or_assign(text, id);
  texts_[id] = std::move(text);
  present_[id] = true;
}

}  // namespace icecache::tok
