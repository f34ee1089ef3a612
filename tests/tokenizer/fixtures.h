// Shared helpers of the tokenizer tests: the committed fixtures of tests/data/tokenizer/ (made by
// tools/reference/make_tokenizer_fixtures.py from Hugging Face tokenizers and sentencepiece).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/paths.h"
#include "tokenizer/tokenizer.h"

namespace icecache::tok_test {

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json LoadFixture(const std::string& name) {
  return nlohmann::json::parse(ReadFileOrDie(testing::DataPath("tokenizer/" + name)));
}

inline std::vector<std::string> Corpus() {
  return LoadFixture("corpus.json")["texts"].get<std::vector<std::string>>();
}

// Escaped form of a text for failure messages.
inline std::string Show(const std::string& s) { return nlohmann::json(s).dump(); }

// Compares Encode (parse_special on and off) and Decode with the expectations of `exp`
// ("ids", "ids_plain", "decoded", "decoded_skip", optionally "ids_with_bos").
inline void ExpectMatchesReference(const Tokenizer& tok, const std::vector<std::string>& texts,
                                   const nlohmann::json& exp) {
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": " + Show(texts[i]));
    const auto ids = exp["ids"][i].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.Encode(texts[i], false, true), ids);
    EXPECT_EQ(tok.Encode(texts[i], false, false), exp["ids_plain"][i].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.Decode(ids, false), exp["decoded"][i].get<std::string>());
    EXPECT_EQ(tok.Decode(ids, true), exp["decoded_skip"][i].get<std::string>());
    if (exp.contains("ids_with_bos")) {
      EXPECT_EQ(tok.Encode(texts[i], true, true),
                exp["ids_with_bos"][i].get<std::vector<int32_t>>());
    }
  }
}

}  // namespace icecache::tok_test
