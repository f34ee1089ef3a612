#include "tokenizer/decoder.h"

#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      // A token with a character outside the byte alphabet (an added token) is taken as is.
      if (!ByteLevelToBytes(t, bytes)) bytes.append(t);
    }
    tokens.assign(1, mode.raw ? std::move(bytes) : ToValidUtf8(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::shared_ptr<const Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void Apply(std::vector<std::string>& tokens, const DecodeMode&) const override {
    std::vector<Regex::Match> matches;
    for (auto& t : tokens) {
      matches.clear();
      re_->FindAll(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& m : matches) {
        out.append(t, prev, m.start - prev);
        out.append(content_);
        prev = m.end;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::shared_ptr<const Regex> re_;
  std::string content_;
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (mode.raw || IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        // Hugging Face: one U+FFFD per byte token when the run is not valid UTF-8.
        for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back(kReplacementChar);
      }
      bytes.clear();
    };
    for (auto& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        const int hi = HexValue(t[3]), lo = HexValue(t[4]);
        if (hi >= 0 && lo >= 0) value = hi * 16 + lo;
      }
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void Apply(std::vector<std::string>& tokens, const DecodeMode&) const override {
    std::string all;
    for (const auto& t : tokens) all.append(t);
    tokens.clear();
    tokens.push_back(std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const override {
    if (mode.continuation) return;
    for (auto& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      for (int i = 0; i < stop_ && end >= begin + content_.size() &&
                      t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // In the first token, the replacement character is dropped instead of becoming a space.
      const bool drop = i == 0 && !mode.continuation && scheme_ != PrependScheme::kNever;
      std::string out;
      const std::string& t = tokens[i];
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::vector<std::string>& tokens, const DecodeMode& mode) const override {
    for (const auto& s : steps_) s->Apply(tokens, mode);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> MakeByteLevelDecoder() { return std::make_unique<ByteLevelDecoder>(); }
std::unique_ptr<Decoder> MakeReplaceDecoder(std::shared_ptr<const Regex> pattern,
                                            std::string content) {
  return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
}
std::unique_ptr<Decoder> MakeByteFallbackDecoder() {
  return std::make_unique<ByteFallbackDecoder>();
}
std::unique_ptr<Decoder> MakeFuseDecoder() { return std::make_unique<FuseDecoder>(); }
std::unique_ptr<Decoder> MakeStripDecoder(std::string content, int start, int stop) {
  return std::make_unique<StripDecoder>(std::move(content), start, stop);
}
std::unique_ptr<Decoder> MakeMetaspaceDecoder(std::string replacement, PrependScheme scheme) {
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), scheme);
}
std::unique_ptr<Decoder> MakeSequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) {
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

}  // namespace icecache::tok
