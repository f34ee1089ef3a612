// Plain English words for generated tasks (needle keys, word-extraction lists). Fixed lists so
// that a seed always gives the same task on every machine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace icecache::eval {

// A few hundred distinct, common, lowercase English nouns and adjectives.
std::span<const std::string_view> CommonWords();

// `n` distinct words from CommonWords() in an order fixed by `seed`. REQUIRES n <= size.
std::vector<std::string> PickDistinctWords(int n, uint64_t seed);

// A made-up lowercase word of 5 to 7 letters (consonant-vowel patterns, so it tokenizes like a
// rare word rather than like noise).
std::string MakeCodeWord(uint64_t seed);

// An upper-case variable name of `letters` letters.
std::string MakeVariableName(uint64_t seed, int letters);

// A random decimal number with exactly `digits` digits (no leading zero).
std::string MakeDigits(uint64_t seed, int digits);

// A random UUID-shaped string (8-4-4-4-12 lowercase hex digits).
std::string MakeUuid(uint64_t seed);

// Mixes a base seed with up to three indices into an independent seed (splitmix64).
uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

}  // namespace icecache::eval
