#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace icecache {

std::string StreamDecoder::Push(int32_t id) {
  pending_.append(tok_.TokenBytes(id, prev_));
  prev_ = id;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t bad = 0;
    bool truncated = false;
    const size_t n = tok::ValidSequenceLength(pending_, i, &bad, &truncated);
    if (n > 0) {
      out.append(pending_, i, n);
      i += n;
    } else if (truncated) {
      break;  // the next token may complete it
    } else {
      out.append(tok::kReplacementChar);
      i += bad;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = tok::ToValidUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace icecache
