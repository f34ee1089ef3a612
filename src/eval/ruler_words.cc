// RULER-style aggregation tasks: the most common words of a long list, the most frequent coded
// words of a long text.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eval/prompt_fit.h"
#include "eval/ruler_internal.h"
#include "eval/words.h"

namespace icecache::eval::ruler {

namespace {

// Deterministic Fisher-Yates shuffle.
template <typename T>
void Shuffle(std::vector<T>& v, uint64_t seed) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = MixSeed(seed, i) % i;
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

Result<Sample> MakeCommonWords(const TextCodec& codec, int length, uint64_t seed) {
  constexpr int kCommon = 10;
  const int vocab = static_cast<int>(CommonWords().size());
  const std::vector<std::string> words = PickDistinctWords(vocab, MixSeed(seed, 20));
  Sample out;
  out.answers.assign(words.begin(), words.begin() + kCommon);
  out.prompt.before =
      "Below is a numbered list of words. Some words appear in it much more often than others; "
      "keep track of them.\n\n";
  out.prompt.after =
      fmt::format("\n\nQuestion: What are the {} most common words in the list above?", kCommon);
  out.prompt.answer_prefix =
      fmt::format("The {} words that appear most often in the list are:", kCommon);
  out.score_kind = ScoreKind::kContainsAll;
  out.max_new_tokens = 120;
  // `entries` list items: the common words appear ten times as often as each of the others
  // (30 against 3 while the vocabulary lasts, as in RULER; more of both beyond).
  auto build = [&](int entries) {
    int rare_freq = 3;
    while (kCommon * 10 * rare_freq + rare_freq * (vocab - kCommon) < entries) ++rare_freq;
    int common_freq = 10 * rare_freq;
    if (entries < kCommon * common_freq) {  // short lists: fewer repeats
      common_freq = std::max(2, entries / (2 * kCommon));
      rare_freq = 1;
    }
    const int rare = std::clamp((entries - kCommon * common_freq) / rare_freq, 0, vocab - kCommon);
    std::vector<int> items;
    for (int w = 0; w < kCommon; ++w) items.insert(items.end(), common_freq, w);
    for (int w = 0; w < rare; ++w) items.insert(items.end(), rare_freq, kCommon + w);
    Shuffle(items, MixSeed(seed, 21, static_cast<uint64_t>(entries)));
    std::string doc;
    for (size_t i = 0; i < items.size(); ++i) {
      doc += fmt::format("{}. {}\n", i + 1, words[items[i]]);
    }
    return doc;
  };
  const int budget = length - out.max_new_tokens;
  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, out.prompt));
  ICECACHE_RETURN_IF_ERROR(CheckRoom("cwe", length, budget - overhead));
  ICECACHE_ASSIGN_OR_RETURN(out.prompt.document,
                            FitDocument(codec, out.prompt, budget, (budget - overhead) / 4, build));
  return out;
}

Result<Sample> MakeFrequentWords(const TextCodec& codec, int length, uint64_t seed) {
  constexpr int kTop = 3;
  constexpr double kAlpha = 2.0;  // Zipf exponent
  Sample out;
  out.prompt.before =
      "Read the following coded text and keep count of how often each coded word appears.\n\n";
  out.prompt.after = fmt::format(
      "\n\nQuestion: What are the {} most frequently appearing coded words in the text above?",
      kTop);
  out.prompt.answer_prefix =
      fmt::format("The {} most frequently appearing coded words in the text are:", kTop);
  out.score_kind = ScoreKind::kContainsAll;
  out.max_new_tokens = 50;
  std::vector<std::string> code_words;
  auto code_word = [&](int rank) {
    while (static_cast<int>(code_words.size()) <= rank) {
      std::string w = MakeCodeWord(MixSeed(seed, 30, code_words.size(), 1));
      for (int k = 2; std::find(code_words.begin(), code_words.end(), w) != code_words.end(); ++k) {
        w = MakeCodeWord(MixSeed(seed, 30, code_words.size(), static_cast<uint64_t>(k)));
      }
      code_words.push_back(w);
    }
    return code_words[rank];
  };
  for (int r = 0; r < kTop; ++r) out.answers.push_back(code_word(r));
  // `total` words; rank r (1-based) appears about total / r^alpha / H times.
  auto build = [&](int total) {
    const int vocab = std::max(kTop + 2, total / 20);
    double h = 0;
    for (int r = 1; r <= vocab; ++r) h += std::pow(r, -kAlpha);
    std::vector<int> items;
    for (int r = 1; r <= vocab; ++r) {
      const int n = std::max(1, static_cast<int>(std::lround(total * std::pow(r, -kAlpha) / h)));
      items.insert(items.end(), n, r - 1);
    }
    Shuffle(items, MixSeed(seed, 31, static_cast<uint64_t>(total)));
    std::string doc;
    for (size_t i = 0; i < items.size(); ++i) {
      doc += code_word(items[i]);
      doc += (i + 1) % 12 == 0 ? " ....\n" : " ";
    }
    return doc;
  };
  const int budget = length - out.max_new_tokens;
  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, out.prompt));
  ICECACHE_RETURN_IF_ERROR(CheckRoom("fwe", length, budget - overhead));
  ICECACHE_ASSIGN_OR_RETURN(out.prompt.document,
                            FitDocument(codec, out.prompt, budget, (budget - overhead) / 3, build));
  return out;
}

}  // namespace icecache::eval::ruler
