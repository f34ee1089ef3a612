// RULER-style needle variants: one or more "secret number" facts in a noise or essay haystack.
#include <fmt/format.h>

#include "eval/prompt_fit.h"
#include "eval/ruler_internal.h"
#include "eval/words.h"

namespace icecache::eval::ruler {

namespace {

// "the river, the lamp and the owl"
std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += i + 1 == keys.size() ? (keys.size() > 2 ? ", and " : " and ") : ", ";
    out += "the " + keys[i];
  }
  return out;
}

}  // namespace

Result<Sample> MakeNiah(const TextCodec& codec, const NiahSpec& spec, Haystack& haystack,
                        int length, uint64_t seed) {
  const std::vector<std::string> keys = PickDistinctWords(spec.keys, MixSeed(seed, 1));
  const std::string type = spec.uuid ? "code" : "number";
  auto value = [&](int k, int v) {
    const uint64_t s = MixSeed(seed, 2, static_cast<uint64_t>(k), static_cast<uint64_t>(v));
    return spec.uuid ? MakeUuid(s) : MakeDigits(s, 7);
  };
  Sample out;
  std::vector<std::pair<double, std::string>> needles;
  int placed = 0;
  for (int k = 0; k < spec.keys; ++k) {
    const int values = k == 0 ? spec.values : 1;
    for (int v = 0; v < values; ++v) {
      const std::string val = value(k, v);
      const std::string sentence =
          spec.values > 1
              ? fmt::format("One of the secret {}s for the {} is {}.", type, keys[k], val)
              : fmt::format("The secret {} for the {} is {}.", type, keys[k], val);
      const double depth =
          static_cast<double>(MixSeed(seed, 3, static_cast<uint64_t>(placed++)) % 10001) / 1e4;
      needles.emplace_back(depth, sentence);
      if (k < spec.queries) out.answers.push_back(val);
    }
  }
  const std::vector<std::string> asked(keys.begin(), keys.begin() + spec.queries);
  std::string question, prefix;
  if (spec.queries == 1 && spec.values == 1) {
    question =
        fmt::format("What is the secret {} for the {} mentioned in the text above?", type, keys[0]);
    prefix = fmt::format("The secret {} for the {} mentioned in the text is", type, keys[0]);
  } else {
    question = fmt::format("What are all the secret {}s for {} mentioned in the text above?", type,
                           JoinKeys(asked));
    prefix = fmt::format("The secret {}s for {} mentioned in the text are:", type, JoinKeys(asked));
  }
  out.prompt.before = fmt::format(
      "Some secret {}s are hidden in the following long text. Memorize them: you will be asked "
      "about them afterwards.\n\n",
      type);
  out.prompt.after = "\n\n" + question;
  out.prompt.answer_prefix = prefix;
  out.score_kind = ScoreKind::kContainsAll;
  out.max_new_tokens = out.answers.size() > 1 ? 96 : (spec.uuid ? 48 : 32);

  const int budget = length - out.max_new_tokens;
  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, out.prompt));
  int64_t room = budget - overhead;
  for (const auto& n : needles) {
    ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> t, codec.Encode(n.second));
    room -= static_cast<int64_t>(t.size()) + 3;
  }
  ICECACHE_RETURN_IF_ERROR(CheckRoom(spec.name, length, room));
  ICECACHE_ASSIGN_OR_RETURN(out.prompt.document,
                            FitDocument(codec, out.prompt, budget, static_cast<int>(room),
                                        [&](int tokens) -> Result<std::string> {
                                          ICECACHE_ASSIGN_OR_RETURN(std::string text,
                                                                    haystack.Take(codec, tokens));
                                          return InsertAtDepths(text, needles);
                                        }));
  return out;
}

Result<Sample> MakeVariableTracking(const TextCodec& codec, Haystack& noise, int length,
                                    uint64_t seed) {
  constexpr int kHops = 4;
  const std::string value = MakeDigits(MixSeed(seed, 10), 5);
  std::vector<std::string> names;
  while (static_cast<int>(names.size()) <= kHops) {
    std::string n = MakeVariableName(MixSeed(seed, 11, names.size() * 31 + 7), 5);
    if (std::find(names.begin(), names.end(), n) == names.end())
      names.push_back(n);
    else
      seed = MixSeed(seed, 12);
  }
  // The chain in text order: VAR A = value, then VAR B = VAR A, ... at increasing depths.
  std::vector<std::pair<double, std::string>> statements;
  for (int i = 0; i <= kHops; ++i) {
    const std::string rhs = i == 0 ? value : "VAR " + names[i - 1];
    const double lo = static_cast<double>(i) / (kHops + 1);
    const double depth =
        lo + static_cast<double>(MixSeed(seed, 13, static_cast<uint64_t>(i)) % 1000) / 1000.0 /
                 (kHops + 1);
    statements.emplace_back(depth, fmt::format("VAR {} = {}.", names[i], rhs));
  }
  Sample out;
  out.answers = names;
  out.prompt.before =
      "Memorize and track the chain of variable assignments hidden in the following text.\n\n";
  out.prompt.after = fmt::format(
      "\n\nQuestion: Find all variables that are assigned the value {} in the text above, "
      "directly or through other variables.",
      value);
  out.prompt.answer_prefix = fmt::format(
      "Following the chain of assignments, the variables assigned the value {} are:", value);
  out.score_kind = ScoreKind::kContainsAll;
  out.max_new_tokens = 48;
  const int budget = length - out.max_new_tokens;
  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, out.prompt));
  int64_t room = budget - overhead;
  for (const auto& st : statements) {
    ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> t, codec.Encode(st.second));
    room -= static_cast<int64_t>(t.size()) + 3;
  }
  ICECACHE_RETURN_IF_ERROR(CheckRoom("vt", length, room));
  ICECACHE_ASSIGN_OR_RETURN(out.prompt.document,
                            FitDocument(codec, out.prompt, budget, static_cast<int>(room),
                                        [&](int tokens) -> Result<std::string> {
                                          ICECACHE_ASSIGN_OR_RETURN(std::string text,
                                                                    noise.Take(codec, tokens));
                                          return InsertAtDepths(text, statements);
                                        }));
  return out;
}

}  // namespace icecache::eval::ruler
