#include "eval/demo_document.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <random>
#include <string_view>

namespace icecache::eval {

namespace {

constexpr std::array<std::string_view, 12> kPlaces = {
    "Harrow Island", "the port of Velm",  "Cape Orrin",  "the Saltmarsh",
    "Duneford",      "the northern reef", "Lantern Bay", "the old quarry",
    "Mossgate",      "the cedar ridge",   "Brightwater", "the eastern shoals"};
constexpr std::array<std::string_view, 12> kPeople = {
    "the ferry captain",     "a retired surveyor",      "the harbour clerk",
    "two fishermen",         "the island's only baker", "a visiting botanist",
    "the lighthouse keeper", "the schoolteacher",       "a shipwright",
    "the weather watcher",   "an old net mender",       "the mayor's assistant"};
constexpr std::array<std::string_view, 12> kActions = {
    "counted the boats that came in before noon",
    "wrote down the height of the tide twice a day",
    "argued about the price of rope",
    "repaired a fence that the winter storms had broken",
    "collected seeds from the wild fennel along the path",
    "kept a ledger of every cargo unloaded at the pier",
    "painted the shutters of the customs house",
    "walked the coast road to check the drainage ditches",
    "measured the rainfall in a copper gauge",
    "taught the children to read the tide tables",
    "traded dried fish for lamp oil",
    "listened to the foghorn and noted when it sounded"};
constexpr std::array<std::string_view, 10> kDetails = {
    "The wind came from the west most of the week, and the gulls stayed close to the cliffs.",
    "Nobody could remember a quieter season, although the market was as busy as ever.",
    "The records from that year are kept in a blue box in the town hall.",
    "Most evenings ended with soup, bread and a long discussion about the weather.",
    "A thin mist covered the water every morning until the sun burned it away.",
    "The road was muddy after the rain, so the carts moved slowly.",
    "Some said the fish were moving further out to sea; others disagreed.",
    "The bell of the chapel rang at six, as it had for a hundred years.",
    "Lamps were lit early because the days were getting shorter.",
    "Letters from the mainland arrived only once a fortnight."};
constexpr std::array<std::string_view, 8> kSecrets = {
    "amber falcon",  "silver lantern", "quiet harbour", "copper kettle",
    "northern star", "velvet anchor",  "painted heron", "winter orchard"};

}  // namespace

std::string MakeFillerText(int words, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](const auto& arr) { return arr[rng() % arr.size()]; };
  std::string out;
  int count = 0;
  int sentences_in_paragraph = 0;
  while (count < words) {
    std::string s;
    switch (rng() % 3) {
      case 0:
        s = "In " + std::string(pick(kPlaces)) + ", " + std::string(pick(kPeople)) + " " +
            std::string(pick(kActions)) + ".";
        break;
      case 1:
        s = std::string(pick(kDetails));
        break;
      default: {
        const int year = 1850 + static_cast<int>(rng() % 120);
        s = "During the spring of " + std::to_string(year) + ", " + std::string(pick(kPeople)) +
            " from " + std::string(pick(kPlaces)) + " " + std::string(pick(kActions)) + ".";
      }
    }
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    out += s;
    count += static_cast<int>(std::count(s.begin(), s.end(), ' ')) + 1;
    if (++sentences_in_paragraph >= 5 + static_cast<int>(rng() % 4)) {
      out += "\n\n";
      sentences_in_paragraph = 0;
    } else {
      out += " ";
    }
  }
  return out;
}

Needle MakeNeedle(uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const std::string secret(kSecrets[rng() % kSecrets.size()]);
  const int number = 10000 + static_cast<int>(rng() % 90000);  // unlike the years in the filler
  Needle n;
  n.answer = std::to_string(number);
  n.sentence = "Important: the combination of the lighthouse safe is " + n.answer +
               ", and the password for the archive is \"" + secret + "\".";
  n.question = "What is the combination of the lighthouse safe? Answer with the number.";
  return n;
}

std::string HideNeedle(const std::string& filler, const Needle& needle, double depth) {
  depth = std::clamp(depth, 0.0, 1.0);
  size_t at = static_cast<size_t>(depth * static_cast<double>(filler.size()));
  // Move to the next paragraph boundary (or the end).
  const size_t boundary = filler.find("\n\n", at);
  at = boundary == std::string::npos ? filler.size() : boundary + 2;
  if (depth == 0.0) at = 0;
  return filler.substr(0, at) + needle.sentence + "\n\n" + filler.substr(at);
}

}  // namespace icecache::eval
