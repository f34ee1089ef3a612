// Scores a model's reply against a sample's expected answers (0..1; see ScoreKind).
#pragma once

#include <string>
#include <string_view>

#include "eval/sample.h"

namespace icecache::eval {

struct ReplyScore {
  double score = 0;       // 1 right, 0 wrong; a fraction for kContainsAll and kF1
  std::string extracted;  // what was read from the reply ("B", "18"); empty if nothing
};

ReplyScore ScoreReply(const Sample& sample, std::string_view reply);

// Unigram F1 of normalized words (SQuAD style).
double WordF1(std::string_view reply, std::string_view answer);

}  // namespace icecache::eval
