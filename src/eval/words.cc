#include "eval/words.h"

#include <algorithm>
#include <array>

#include "core/check.h"
#include "core/split_mix.h"

namespace icecache::eval {

namespace {

// Everyday words, grouped loosely by theme (split on spaces at first use). Each group is one
// literal split over lines (adjacent literals join), hence no commas inside a group.
// NOLINTBEGIN(bugprone-suspicious-missing-comma)
constexpr std::string_view kWordGroups[] = {
    // nature
    "river mountain forest meadow valley island desert ocean lake canyon glacier volcano "
    "prairie swamp beach cliff hill cave stream waterfall pebble boulder sand clay moss fern "
    "oak maple willow pine cedar birch tulip daisy rose lily orchid cactus ivy thistle",
    // animals
    "badger beaver falcon sparrow pigeon owl eagle heron pelican penguin otter rabbit "
    "squirrel fox wolf bear moose deer horse donkey camel zebra giraffe lion tiger leopard "
    "panther monkey gorilla elephant rhino hippo dolphin whale shark salmon trout lobster "
    "crab octopus turtle lizard frog toad snail spider beetle butterfly moth bee wasp ant "
    "goose duck swan chicken turkey goat sheep cow",
    // food
    "apple banana cherry grape lemon lime mango melon peach pear plum orange apricot coconut "
    "walnut almond peanut carrot potato tomato onion garlic pepper cabbage lettuce spinach "
    "pumpkin bean pea rice wheat barley oat bread butter cheese yogurt honey sugar salt soup "
    "salad noodle pasta pizza cookie cake pie muffin pancake waffle sandwich coffee tea juice "
    "milk chocolate vanilla",
    // household
    "table chair sofa bed pillow blanket curtain carpet lamp candle mirror clock window door "
    "roof wall floor ceiling stairs kitchen garden garage basket bucket bottle cup plate bowl "
    "spoon fork knife kettle teapot oven fridge sink towel soap brush comb scissors needle "
    "thread button zipper pocket jacket sweater shirt scarf glove boot sandal hat umbrella "
    "wallet key lock ladder",
    // tools and things
    "hammer wrench shovel rake saw drill nail screw rope chain wheel engine motor battery "
    "cable wire magnet compass telescope camera radio piano guitar violin drum flute trumpet "
    "harp bell whistle kite balloon puzzle marble dice card ticket stamp coin envelope letter "
    "pencil pen crayon paper notebook book map globe",
    // places and transport
    "city village harbor bridge tower castle palace temple church museum library school "
    "college hospital market bakery factory farm barn stable station airport train bus truck "
    "bicycle boat ship canoe yacht rocket tractor wagon carriage subway tunnel highway street "
    "avenue square park zoo stadium theater cinema hotel office",
    // weather and sky
    "rain snow hail storm thunder lightning cloud fog wind breeze rainbow sunshine moon star "
    "planet comet galaxy horizon sunset sunrise winter spring summer autumn morning evening "
    "midnight season",
    // materials and colours
    "gold silver copper bronze iron steel tin glass marble granite silk cotton wool leather "
    "velvet linen crimson scarlet amber ivory violet indigo turquoise emerald ruby sapphire "
    "pearl diamond jade",
    // people and roles
    "farmer baker teacher doctor nurse pilot sailor soldier painter singer dancer writer poet "
    "actor judge lawyer banker chef waiter clerk miner hunter fisher tailor carpenter plumber "
    "gardener driver merchant captain king queen prince knight wizard giant dragon",
    // abstract
    "idea dream memory secret riddle story legend promise journey victory courage freedom "
    "harmony balance energy silence shadow echo wonder mystery fortune treasure signal "
    "pattern rhythm melody puzzle question answer reason method theory science history "
    "language number",
    // adjectives
    "quiet loud bright dark gentle brave clever curious eager happy calm fierce proud humble "
    "honest lucky swift slow ancient modern tiny huge narrow wide heavy light warm cold "
    "frozen golden hollow smooth rough sharp soft sweet bitter salty spicy fresh",
};
// NOLINTEND(bugprone-suspicious-missing-comma)

// The list above may name a word twice by accident; serve each word once.
const std::vector<std::string_view>& UniqueWords() {
  static const std::vector<std::string_view> words = [] {
    std::vector<std::string_view> out;
    for (std::string_view group : kWordGroups) {
      while (!group.empty()) {
        const size_t end = std::min(group.find(' '), group.size());
        const std::string_view w = group.substr(0, end);
        if (!w.empty() && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
        group.remove_prefix(std::min(end + 1, group.size()));
      }
    }
    return out;
  }();
  return words;
}

}  // namespace

std::span<const std::string_view> CommonWords() { return UniqueWords(); }

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  constexpr auto mix = SplitMix64;
  uint64_t h = mix(seed);
  h = mix(h ^ a);
  h = mix(h ^ (b * 0x2545f4914f6cdd1dULL));
  return mix(h ^ (c * 0x9e6c63d0676a9a99ULL));
}

std::vector<std::string> PickDistinctWords(int n, uint64_t seed) {
  const auto& words = UniqueWords();
  ICECACHE_CHECK(n >= 0 && static_cast<size_t>(n) <= words.size());
  std::vector<size_t> idx(words.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  // Partial Fisher-Yates with our own mixing (std distributions differ between libraries).
  for (int i = 0; i < n; ++i) {
    const size_t j = i + MixSeed(seed, static_cast<uint64_t>(i)) % (idx.size() - i);
    std::swap(idx[i], idx[j]);
  }
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.emplace_back(words[idx[i]]);
  return out;
}

std::string MakeCodeWord(uint64_t seed) {
  constexpr std::string_view kConsonants = "bcdfghjklmnprstvwz";
  constexpr std::string_view kVowels = "aeiou";
  const int letters = 5 + static_cast<int>(MixSeed(seed, 1) % 3);
  std::string w;
  for (int i = 0; i < letters; ++i) {
    const uint64_t r = MixSeed(seed, 2, static_cast<uint64_t>(i));
    w += (i % 2 == 0) ? kConsonants[r % kConsonants.size()] : kVowels[r % kVowels.size()];
  }
  return w;
}

std::string MakeVariableName(uint64_t seed, int letters) {
  std::string name;
  for (int i = 0; i < letters; ++i) {
    name += static_cast<char>('A' + MixSeed(seed, 3, static_cast<uint64_t>(i)) % 26);
  }
  return name;
}

std::string MakeDigits(uint64_t seed, int digits) {
  std::string s;
  for (int i = 0; i < digits; ++i) {
    const uint64_t r = MixSeed(seed, 4, static_cast<uint64_t>(i));
    s += static_cast<char>(i == 0 ? '1' + r % 9 : '0' + r % 10);
  }
  return s;
}

std::string MakeUuid(uint64_t seed) {
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string s;
  int i = 0;
  for (int group : {8, 4, 4, 4, 12}) {
    if (!s.empty()) s += '-';
    for (int k = 0; k < group; ++k, ++i) {
      s += kHex[MixSeed(seed, 5, static_cast<uint64_t>(i)) % 16];
    }
  }
  return s;
}

}  // namespace icecache::eval
