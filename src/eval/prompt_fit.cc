#include "eval/prompt_fit.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string>

namespace icecache::eval {

namespace {

Result<std::vector<int32_t>> Encode(const TextCodec& codec, const PromptParts& parts,
                                    const std::string& document) {
  return codec.EncodePrompt(parts.before + document + parts.after, parts.answer_prefix);
}

}  // namespace

Result<int> PromptOverhead(const TextCodec& codec, const PromptParts& parts) {
  ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, Encode(codec, parts, ""));
  return static_cast<int>(tokens.size());
}

Result<FittedPrompt> FitPrompt(const TextCodec& codec, const PromptParts& parts, int max_tokens) {
  FittedPrompt out;
  ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> doc, codec.Encode(parts.document));
  out.document_tokens = static_cast<int64_t>(doc.size());
  ICECACHE_ASSIGN_OR_RETURN(out.tokens, Encode(codec, parts, parts.document));
  if (static_cast<int64_t>(out.tokens.size()) <= max_tokens) return out;

  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, parts));
  if (overhead >= max_tokens) {
    return OutOfRange("the prompt without its document is " + std::to_string(overhead) +
                      " tokens, which leaves no room for the document within " +
                      std::to_string(max_tokens) + " tokens");
  }
  const std::span<const int32_t> all(doc);
  // Re-tokenizing the joined halves can differ from the sum of their parts by a few tokens,
  // so cut, measure and cut again until it fits.
  int64_t cut = static_cast<int64_t>(out.tokens.size()) - max_tokens;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int64_t keep = static_cast<int64_t>(doc.size()) - cut;
    if (keep <= 0) break;
    const int64_t head = keep / 2;
    const std::string joined = codec.Decode(all.first(static_cast<size_t>(head))) +
                               codec.Decode(all.last(static_cast<size_t>(keep - head)));
    ICECACHE_ASSIGN_OR_RETURN(out.tokens, Encode(codec, parts, joined));
    const int64_t over = static_cast<int64_t>(out.tokens.size()) - max_tokens;
    if (over <= 0) {
      out.cut_tokens = cut;
      return out;
    }
    cut += over + attempt;  // grow faster if the boundary keeps adding tokens
  }
  return Internal("could not cut the document to fit " + std::to_string(max_tokens) + " tokens");
}

Result<std::string> FitDocument(const TextCodec& codec, const PromptParts& parts, int budget,
                                int guess,
                                const std::function<Result<std::string>(int size)>& build) {
  ICECACHE_ASSIGN_OR_RETURN(const int overhead, PromptOverhead(codec, parts));
  const double room = budget - overhead;
  // Sizes known to fit (lo) and known not to (hi); secant steps, kept strictly between them.
  int lo = 0, hi = std::numeric_limits<int>::max();
  std::string best;
  int size = std::max(1, guess);
  for (int attempt = 0; attempt < 24 && hi - lo > 1; ++attempt) {
    PromptParts p = parts;
    ICECACHE_ASSIGN_OR_RETURN(p.document, build(size));
    ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                              codec.EncodePrompt(p.before + p.document + p.after, p.answer_prefix));
    const double n = static_cast<double>(tokens.size());
    if (n <= budget) {
      lo = size;
      best = std::move(p.document);
      if (n >= 0.99 * budget) break;
    } else {
      hi = size;
    }
    // The document's share of the prompt grows with its size; aim it at the room left.
    const double doc = std::max(1.0, n - overhead);
    int next = static_cast<int>(size * (room / doc));
    if (next <= lo || next >= hi) {
      next = hi == std::numeric_limits<int>::max() ? 2 * lo : lo + (hi - lo) / 2;
    }
    if (next <= lo || next >= hi) break;
    size = next;
  }
  if (lo == 0) return InvalidArgument("the length leaves no room for the document");
  return best;
}

}  // namespace icecache::eval
