// Reading an answer out of a model's reply in a way that a wrong format cannot fool: a negated
// mention ("not B") is no answer, a reply that names several options names none, "18" is not
// found inside "180", "1,234" equals 1234.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace icecache::eval {

// Lowercase ASCII, apostrophes dropped ("isn't" -> "isnt"), other punctuation to spaces, the
// articles a/an/the removed, whitespace collapsed. Non-ASCII bytes are kept as word characters.
std::string NormalizeText(std::string_view text);
// NormalizeText split into words.
std::vector<std::string> NormalizedWords(std::string_view text);

// True when the words of `phrase` appear contiguously in `text` (both normalized) at least once
// without a negation ("not", "never", "isnt", ...) among the two words before. An empty phrase
// is never found.
bool MentionsPhrase(std::string_view text, std::string_view phrase);

// The option (0 = A) a multiple-choice reply commits to, among `num_options` options whose
// texts are `options` (may be empty: letters only). In order of trust: a stated answer ("the
// answer is (B)"), a letter marked in the reply's first sentence ("(B) ...", "B)", "B."), a
// letter marked anywhere ("(B)"), then the text of exactly one option. A tier that names two
// different options gives no answer (hedging is not answering).
std::optional<int> ExtractOption(std::string_view reply, int num_options,
                                 const std::vector<std::string>& options = {});

// Options of a question written as lines "(A) text", "A. text" or "A) text", in order; empty
// if the question has no such lines.
std::vector<std::string> ParseOptions(std::string_view question);

// The letter an expected multiple-choice answer names: "B", "(B)", "(B) text", "B. text".
std::optional<int> ParseExpectedOption(std::string_view answer);

// A whole string read as a number: "18", "-3.5", "1,234", "$1,234.00", "50%". No other text.
std::optional<double> ParseNumber(std::string_view text);

// The number a reply states: the first number after "answer is", "answer:" or "####" if any,
// else the last number in the reply. Numbers right after "not" are ignored.
std::optional<double> ExtractNumber(std::string_view reply);

// The part of a reply that states its answer: what follows "answer is" / "answer:" up to the
// end of that line, else the reply's first non-empty line.
std::string StatedAnswer(std::string_view reply);

}  // namespace icecache::eval
