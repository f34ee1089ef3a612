#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <utf8proc.h>

#include "core/check.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

// A run of the text, and whether the pattern matched it. Segments cover the text in order.
struct Segment {
  size_t start, end;
  bool is_match;
};

// Segments of `text` around regex matches (HF Pattern::find_matches).
void RegexSegments(const Regex& re, std::string_view text, std::vector<Segment>& out) {
  thread_local std::vector<Regex::Match> matches;
  matches.clear();
  re.FindAll(text, matches);
  size_t prev = 0;
  for (const auto& m : matches) {
    if (prev != m.start) out.push_back({prev, m.start, false});
    out.push_back({m.start, m.end, true});
    prev = m.end;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
}

bool IsNumericChar(uint32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

// Segments where each character matching `pred` is a match of its own.
template <typename Pred>
void CharSegments(std::string_view text, Pred pred, std::vector<Segment>& out) {
  size_t last = 0, i = 0;
  while (i < text.size()) {
    const size_t n = CharLength(static_cast<unsigned char>(text[i]));
    if (pred(text, i, n)) {
      if (last < i) out.push_back({last, i, false});
      out.push_back({i, i + n, true});
      last = i + n;
    }
    i += n;
  }
  if (i > last) out.push_back({last, i, false});
}

// Turns segments into the ranges kept as pieces (HF NormalizedString::split).
void ApplyBehavior(std::vector<Segment>& segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  out.reserve(segs.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& s : segs) s.is_match = false;
      return;
    case SplitBehavior::kRemoved:
      return;  // matches are dropped by the caller
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match == prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.start, s.end, false});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match && !prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.start, s.end, false});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !prev_match && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back({it->start, it->end, false});
        }
        prev_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  segs = std::move(out);
}

// Replaces each piece by the kept segments that `segment_fn` yields for it.
template <typename SegmentFn>
void SplitPieces(std::vector<Piece>& pieces, SplitBehavior behavior, bool invert,
                 SegmentFn segment_fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  std::vector<Segment> segs;
  for (auto& p : pieces) {
    segs.clear();
    segment_fn(std::string_view(p.text), segs);
    if (invert) {
      for (auto& s : segs) s.is_match = !s.is_match;
    }
    ApplyBehavior(segs, behavior);
    for (const auto& s : segs) {
      if (s.is_match || s.end == s.start) continue;  // removed, or empty
      out.push_back({p.text.substr(s.start, s.end - s.start), p.at_start && s.start == 0});
    }
  }
  pieces = std::move(out);
}

const Regex& Gpt2Regex() {
  static const std::shared_ptr<const Regex> re = [] {
    auto r = Regex::Compile(kGpt2Pattern);
    ICECACHE_CHECK(r.ok());
    return std::move(r).value();
  }();
  return *re;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<const Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void Apply(std::vector<Piece>& pieces) const override {
    SplitPieces(pieces, behavior_, invert_,
                [this](std::string_view text, auto& segs) { RegexSegments(*re_, text, segs); });
  }

 private:
  std::shared_ptr<const Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void Apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
      }
    }
    if (use_regex_) {
      SplitPieces(pieces, SplitBehavior::kIsolated, false, [](std::string_view text, auto& segs) {
        RegexSegments(Gpt2Regex(), text, segs);
      });
    }
    std::string mapped;
    for (auto& p : pieces) {
      mapped.clear();
      AppendByteLevel(p.text, mapped);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void Apply(std::vector<Piece>& pieces) const override {
    const auto behavior = individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    SplitPieces(pieces, behavior, false, [](std::string_view text, auto& segs) {
      CharSegments(
          text,
          [](std::string_view t, size_t i, size_t n) {
            const auto c = static_cast<unsigned char>(t[i]);
            if (c < 0x80) return c >= '0' && c <= '9';
            return IsNumericChar(DecodeAt(t, i, n));
          },
          segs);
    });
  }

 private:
  bool individual_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void Apply(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      p.text = ReplaceAll(p.text, " ", replacement_);
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        p.text.insert(0, replacement_);
      }
    }
    if (!split_) return;
    const std::string& rep = replacement_;
    SplitPieces(
        pieces, SplitBehavior::kMergedWithNext, false, [&rep](std::string_view text, auto& segs) {
          CharSegments(
              text,
              [&rep](std::string_view t, size_t i, size_t n) { return t.substr(i, n) == rep; },
              segs);
        });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void Apply(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps_) s->Apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::shared_ptr<const Regex> regex,
                                                    SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits) {
  return std::make_unique<DigitsPreTokenizer>(individual_digits);
}
std::unique_ptr<PreTokenizer> MakeMetaspacePreTokenizer(std::string replacement,
                                                        PrependScheme scheme, bool split) {
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps) {
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

}  // namespace icecache::tok
