// RULER-style question answering: many short documents about invented towns; the question asks
// about one of them, so the answer must be found among near-identical distractors.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "eval/prompt_fit.h"
#include "eval/ruler_internal.h"
#include "eval/words.h"

namespace icecache::eval::ruler {

namespace {

constexpr std::array<const char*, 24> kFirstNames = {
    "Alice", "Bruno",  "Clara", "Daniel", "Elena", "Felix",  "Greta", "Hugo",
    "Irene", "Jonas",  "Karin", "Leon",   "Marta", "Nils",   "Olga",  "Pablo",
    "Rosa",  "Stefan", "Tanya", "Victor", "Wanda", "Xavier", "Yara",  "Zeno"};
constexpr std::array<const char*, 24> kSurnames = {
    "Abbott",  "Brennan", "Castillo", "Dorsey",    "Eriksen", "Fischer", "Galloway", "Hartley",
    "Ingram",  "Jensen",  "Kowalski", "Lindqvist", "Moreau",  "Novak",   "Okafor",   "Petrov",
    "Quinlan", "Rossi",   "Sandoval", "Tanaka",    "Ulrich",  "Varga",   "Whitlock", "Young"};
constexpr std::array<const char*, 6> kSuffixes = {"ford", "ton", "vale", "mere", "wick", "holm"};

struct Town {
  std::string name, founder, festival, tree, market_day;
  int year, population;
};

constexpr std::array<const char*, 7> kDays = {"Mondays", "Tuesdays",  "Wednesdays", "Thursdays",
                                              "Fridays", "Saturdays", "Sundays"};
constexpr std::array<const char*, 6> kTrees = {"oak",   "linden", "chestnut",
                                               "plane", "birch",  "cherry"};

Town MakeTown(uint64_t seed) {
  Town t;
  std::string stem = MakeCodeWord(MixSeed(seed, 1));
  stem[0] = static_cast<char>(stem[0] - 'a' + 'A');
  t.name = stem + kSuffixes[MixSeed(seed, 2) % kSuffixes.size()];
  t.founder = std::string(kFirstNames[MixSeed(seed, 3) % kFirstNames.size()]) + " " +
              kSurnames[MixSeed(seed, 4) % kSurnames.size()];
  t.year = 1500 + static_cast<int>(MixSeed(seed, 5) % 400);
  t.festival = PickDistinctWords(1, MixSeed(seed, 6))[0];
  t.population = 500 + static_cast<int>(MixSeed(seed, 7) % 20000);
  t.tree = kTrees[MixSeed(seed, 8) % kTrees.size()];
  t.market_day = kDays[MixSeed(seed, 9) % kDays.size()];
  return t;
}

// A town's document: the facts asked about, then `extras` (0..3) short sentences of detail,
// which let the generator fill a length finely.
std::string Describe(const Town& t, int index, int extras) {
  std::string doc = fmt::format(
      "Document {}: {}\n{} is a small town that was founded in {} by {}. Every autumn the town "
      "holds a festival in honour of the {}, and visitors come from the whole region to see it.",
      index, t.name, t.name, t.year, t.founder, t.festival);
  if (extras > 0) doc += fmt::format(" About {} people live there.", t.population);
  if (extras > 1) doc += fmt::format(" Its main street is lined with {} trees.", t.tree);
  if (extras > 2) doc += " The market is held on " + t.market_day + ".";
  return doc + "\n\n";
}

}  // namespace

Result<Sample> MakeQa(const TextCodec& codec, int length, uint64_t seed) {
  Sample out;
  out.score_kind = ScoreKind::kContains;
  out.max_new_tokens = 32;
  const Town gold = MakeTown(MixSeed(seed, 40));
  std::string question;
  switch (MixSeed(seed, 41) % 3) {
    case 0:
      question = fmt::format("Who founded {}?", gold.name);
      out.answers = {gold.founder};
      break;
    case 1:
      question = fmt::format("In which year was {} founded?", gold.name);
      out.answers = {std::to_string(gold.year)};
      break;
    default:
      question = fmt::format("In honour of what does {} hold its autumn festival?", gold.name);
      out.answers = {gold.festival};
  }
  out.prompt.before =
      "Answer the question using the documents below. Give only the answer, no other words.\n\n";
  out.prompt.after = "\n\nQuestion: " + question;
  out.prompt.answer_prefix = "Answer:";
  // Distractor towns with distinct names; the gold document sits at a seed-chosen position.
  std::vector<Town> towns;
  std::set<std::string> names = {gold.name};
  uint64_t next_town = 0;
  // Sizes in detail sentences: a document's facts are worth about `per_doc` of them, so each
  // step of the size adds about one sentence of text (whole documents first, then one detail
  // sentence in each of the first documents).
  ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> bare, codec.Encode(Describe(gold, 1, 0)));
  ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> rich, codec.Encode(Describe(gold, 1, 3)));
  const double detail = std::max(1.0, (rich.size() - bare.size()) / 3.0);
  const int per_doc = std::max(1, static_cast<int>(std::lround(bare.size() / detail)));
  auto build = [&](int units) {
    const int docs = std::max(1, units / per_doc);
    while (static_cast<int>(towns.size()) < docs) {
      Town t = MakeTown(MixSeed(seed, 42, next_town++));
      if (names.insert(t.name).second) towns.push_back(t);
    }
    const int gold_at = static_cast<int>(MixSeed(seed, 43) % static_cast<uint64_t>(docs));
    const int extras = std::clamp(units - docs * per_doc, 0, 3 * docs);
    std::string doc;
    for (int i = 0, d = 0; i < docs; ++i) {
      // Round-robin: the first documents get the first detail sentence, then the second, ...
      const int e = extras / docs + (i < extras % docs ? 1 : 0);
      doc += Describe(i == gold_at ? gold : towns[d++], i + 1, e);
    }
    return doc;
  };
  const int budget = length - out.max_new_tokens;
  ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, out.prompt));
  ICECACHE_RETURN_IF_ERROR(CheckRoom("qa", length, budget - overhead));
  ICECACHE_ASSIGN_OR_RETURN(out.prompt.document,
                            FitDocument(codec, out.prompt, budget,
                                        static_cast<int>((budget - overhead) / detail), build));
  return out;
}

}  // namespace icecache::eval::ruler
