// Pre-tokenizers (Split behaviors and invert, Digits, Metaspace, ByteLevel) against the pieces
// Hugging Face's pre_tokenize_str gives, and the Oniguruma -> PCRE2 pattern translation.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/hf_json_components.h"
#include "tokenizer/regex.h"

namespace icecache {
namespace {

TEST(PreTokenizerTest, MatchesHfPreTokenizeStr) {
  const auto data = tok_test::LoadFixture("pre_tokenizers.json");
  const auto texts = data["texts"].get<std::vector<std::string>>();
  ASSERT_GT(data["cases"].size(), 40u);
  for (const auto& c : data["cases"]) {
    SCOPED_TRACE(c["pre_tokenizer"].dump());
    auto pre = tok::ParsePreTokenizer(c["pre_tokenizer"], "test");
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<tok::Piece> pieces;
      if (!texts[i].empty()) pieces.push_back({texts[i], true});
      pre.value()->Apply(pieces);
      std::vector<std::string> got;
      for (const auto& p : pieces) got.push_back(p.text);
      EXPECT_EQ(got, c["pieces"][i].get<std::vector<std::string>>()) << tok_test::Show(texts[i]);
    }
  }
}

TEST(PreTokenizerTest, OnigurumaEscapesBecomeExplicitClasses) {
  // \s is Unicode White_Space (no U+180E), also inside classes; \S is its complement.
  auto re = tok::Regex::Compile(R"(\s+|[^\s\w]+|\w+)");
  ASSERT_TRUE(re.ok());
  std::vector<tok::Regex::Match> m;
  const std::string text = "a\xE1\xA0\x8E b\xC2\x85!";  // a U+180E space b NEL !
  re.value()->FindAll(text, m);
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(text.substr(m[1].start, m[1].end - m[1].start), "\xE1\xA0\x8E");  // not a space
  EXPECT_EQ(text.substr(m[2].start, m[2].end - m[2].start), " ");
  EXPECT_EQ(text.substr(m[4].start, m[4].end - m[4].start), "\xC2\x85");  // NEL is a space
  // Escaped backslashes and quoted text are left alone.
  EXPECT_EQ(tok::TranslateOnigurumaPattern(R"(\\s\Q\s\E)"), R"(\\s\Q\s\E)");
  EXPECT_EQ(tok::TranslateOnigurumaPattern(R"([]\d])"), R"([]\d])");
}

TEST(PreTokenizerTest, BadRegexIsAnError) {
  auto re = tok::Regex::Compile("(unclosed");
  ASSERT_FALSE(re.ok());
  EXPECT_EQ(re.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(re.status().message().find("(unclosed"), std::string::npos);
}

TEST(PreTokenizerTest, LiteralPatternsAreQuoted) {
  auto re = tok::Regex::CompileLiteral(R"(a.b\E*)");
  ASSERT_TRUE(re.ok()) << re.status().ToString();
  std::vector<tok::Regex::Match> m;
  re.value()->FindAll(R"(axb a.b\E* a.b)", m);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].start, 4u);
}

}  // namespace
}  // namespace icecache
