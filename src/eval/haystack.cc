#include "eval/haystack.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/demo_document.h"

namespace icecache::eval {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNoise =
    "The road runs along the hill. The clock on the wall ticks. Clouds pass over the fields "
    "and the wind moves the grass. The day goes on as days do.\n\n";

bool IsSentenceEnd(const std::string& s, size_t i) {
  const char c = s[i];
  if (c == '\n') return true;
  return (c == '.' || c == '!' || c == '?') &&
         (i + 1 == s.size() || s[i + 1] == ' ' || s[i + 1] == '\n' || s[i + 1] == '"');
}

}  // namespace

Haystack::Haystack(Kind kind, std::string name, std::string base, uint64_t seed)
    : kind_(kind), name_(std::move(name)), base_(std::move(base)), seed_(seed) {}

Result<std::unique_ptr<Haystack>> Haystack::FromDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("--haystack " + dir + ": not a directory");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".txt") files.push_back(entry);
  }
  if (ec) return IoError("--haystack " + dir + ": " + ec.message());
  if (files.empty()) return NotFound("--haystack " + dir + ": no .txt files");
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return IoError(f.string() + ": cannot read");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string body = ss.str();
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
    if (body.empty()) continue;
    if (!text.empty()) text += "\n\n";
    text += body;
  }
  if (text.empty()) return NotFound("--haystack " + dir + ": the .txt files are empty");
  text += "\n\n";
  return std::unique_ptr<Haystack>(
      new Haystack(Kind::kText, fs::path(dir).filename().string(), std::move(text), 0));
}

std::unique_ptr<Haystack> Haystack::Filler(uint64_t seed) {
  return std::unique_ptr<Haystack>(new Haystack(Kind::kFiller, "filler", "", seed));
}

std::unique_ptr<Haystack> Haystack::Noise() {
  return std::unique_ptr<Haystack>(new Haystack(Kind::kNoise, "noise", kNoise, 0));
}

Status Haystack::Grow(const TextCodec& codec, int64_t tokens) {
  // Aim 10% past the request so that the sentence-end cut still leaves enough.
  const int64_t want = tokens + tokens / 10 + 16;
  while (static_cast<int64_t>(tokens_.size()) < want) {
    std::string text;
    if (kind_ == Kind::kFiller) {
      // About 1.3 tokens per word of this prose.
      filler_words_ = std::max<int>(2 * filler_words_, static_cast<int>(want / 1.2) + 64);
      text = MakeFillerText(filler_words_, seed_);
    } else {
      ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> once, codec.Encode(base_));
      if (once.empty()) return Internal("empty haystack");
      const int64_t copies = want / static_cast<int64_t>(once.size()) + 1;
      for (int64_t i = 0; i < copies; ++i) text += base_;
    }
    ICECACHE_ASSIGN_OR_RETURN(tokens_, codec.Encode(text));
  }
  return Status::Ok();
}

Result<std::string> Haystack::Take(const TextCodec& codec, int64_t tokens) {
  if (tokens <= 0) return std::string();
  ICECACHE_RETURN_IF_ERROR(Grow(codec, tokens));
  std::string text = codec.Decode(std::span<const int32_t>(tokens_).first(tokens));
  // Cut back to a sentence end within the last tenth, so no needle lands inside a sentence.
  const size_t floor = text.size() - text.size() / 10;
  for (size_t i = text.size(); i-- > floor;) {
    if (IsSentenceEnd(text, i)) {
      text.resize(i + 1);
      break;
    }
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string InsertAtDepths(const std::string& text,
                           std::vector<std::pair<double, std::string>> sentences) {
  std::stable_sort(sentences.begin(), sentences.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  size_t copied = 0;
  for (const auto& [depth, sentence] : sentences) {
    size_t at = static_cast<size_t>(std::clamp(depth, 0.0, 1.0) * static_cast<double>(text.size()));
    at = std::max(at, copied);
    if (depth <= 0) {
      at = copied;
    } else {
      // The first sentence boundary at or after `at`: right after an end mark, or after the
      // space that follows one.
      auto boundary = [&](size_t i) {
        return i > 0 && (IsSentenceEnd(text, i - 1) ||
                         (i > 1 && text[i - 1] == ' ' && IsSentenceEnd(text, i - 2)));
      };
      while (at < text.size() && !boundary(at)) ++at;
    }
    out.append(text, copied, at - copied);
    copied = at;
    const bool need_space_before = !out.empty() && out.back() != ' ' && out.back() != '\n';
    if (need_space_before) out += ' ';
    out += sentence;
    const bool need_space_after =
        copied < text.size() && text[copied] != ' ' && text[copied] != '\n';
    if (need_space_after) out += ' ';
  }
  out.append(text, copied, std::string::npos);
  return out;
}

}  // namespace icecache::eval
