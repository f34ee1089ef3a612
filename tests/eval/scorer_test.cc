// Answer extraction and scoring on known right and wrong replies, including formats built to
// fool a naive matcher.
#include <gtest/gtest.h>

#include "eval/answer_extract.h"
#include "eval/scorer.h"

namespace icecache::eval {
namespace {

Sample Make(ScoreKind kind, std::vector<std::string> answers,
            std::vector<std::string> choices = {}) {
  Sample s;
  s.score_kind = kind;
  s.answers = std::move(answers);
  s.choices = std::move(choices);
  return s;
}

double Score(const Sample& s, std::string_view reply) { return ScoreReply(s, reply).score; }

TEST(NormalizeTest, LowercasesDropsPunctuationAndArticles) {
  EXPECT_EQ(NormalizeText("The  Role of Art, in Society!"), "role of art in society");
  EXPECT_EQ(NormalizeText("It isn't A test."), "it isnt test");
  EXPECT_EQ(NormalizeText("It isn\u2019t"), "it isnt");
  EXPECT_EQ(NormalizeText(""), "");
}

TEST(MentionsPhraseTest, WholeWordsOnly) {
  EXPECT_TRUE(MentionsPhrase("The code is 48213.", "48213"));
  EXPECT_FALSE(MentionsPhrase("The code is 482134.", "48213"));
  EXPECT_FALSE(MentionsPhrase("The code is 148213.", "48213"));
  EXPECT_TRUE(MentionsPhrase("Answer: the Amber Falcon", "amber falcon"));
  EXPECT_FALSE(MentionsPhrase("amber and falcon", "amber falcon"));
  EXPECT_FALSE(MentionsPhrase("anything", ""));
  EXPECT_FALSE(MentionsPhrase("", "48213"));
}

TEST(MentionsPhraseTest, NegatedMentionDoesNotCount) {
  EXPECT_FALSE(MentionsPhrase("The combination is not 48213.", "48213"));
  EXPECT_FALSE(MentionsPhrase("It isn't 48213", "48213"));
  EXPECT_TRUE(MentionsPhrase("It is not 11111; it is 48213.", "48213"));
}

TEST(ContainsScorerTest, RightWrongAndEmpty) {
  const Sample s = Make(ScoreKind::kContains, {"72293"});
  EXPECT_EQ(Score(s, "The combination of the lighthouse safe is 72293."), 1);
  EXPECT_EQ(Score(s, "The combination is 72239."), 0);
  EXPECT_EQ(Score(s, "722930"), 0);
  EXPECT_EQ(Score(s, ""), 0);
  EXPECT_EQ(Score(s, "It is definitely not 72293"), 0);
}

TEST(ContainsAllScorerTest, FractionOfAnswers) {
  const Sample s = Make(ScoreKind::kContainsAll, {"1111111", "2222222", "3333333", "4444444"});
  EXPECT_DOUBLE_EQ(Score(s, "1111111, 2222222, 3333333 and 4444444"), 1.0);
  EXPECT_DOUBLE_EQ(Score(s, "2222222 and 4444444"), 0.5);
  EXPECT_DOUBLE_EQ(Score(s, "11111112222222"), 0.0);
  EXPECT_DOUBLE_EQ(Score(s, ""), 0.0);
}

TEST(OptionExtractTest, CommonFormats) {
  EXPECT_EQ(ExtractOption("B", 4), 1);
  EXPECT_EQ(ExtractOption("(B)", 4), 1);
  EXPECT_EQ(ExtractOption("B)", 4), 1);
  EXPECT_EQ(ExtractOption("B.", 4), 1);
  EXPECT_EQ(ExtractOption("  (C) Because it is faster.", 4), 2);
  EXPECT_EQ(ExtractOption("The answer is (D).", 4), 3);
  EXPECT_EQ(ExtractOption("Answer: A", 4), 0);
  EXPECT_EQ(ExtractOption("The correct option is B because the text says so.", 4), 1);
  EXPECT_EQ(ExtractOption("**B**", 4), 1);
  EXPECT_EQ(ExtractOption("the answer is (b)", 4), 1);
}

TEST(OptionExtractTest, WrongFormatsGiveNoAnswer) {
  EXPECT_EQ(ExtractOption("The answer is not B", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("Not B.", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("(A) or (B)", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("A good question; I cannot tell.", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("Bob went home.", 4), std::nullopt);
  // A letter outside the options.
  EXPECT_EQ(ExtractOption("(E)", 4), std::nullopt);
  // Listing every option is not choosing one.
  EXPECT_EQ(ExtractOption("A) red\nB) blue\nC) green\nD) black", 4), std::nullopt);
  EXPECT_EQ(ExtractOption("A, B, C or D", 4), std::nullopt);
}

TEST(OptionExtractTest, StatedAnswerWinsOverMentionsElsewhere) {
  EXPECT_EQ(ExtractOption("The answer is (B). Option (A) is wrong because...", 4), 1);
  EXPECT_EQ(ExtractOption("(B)\n\nExplanation: (A) is wrong.", 4), 1);
  EXPECT_EQ(ExtractOption("I think the answer is B, not C.", 4), 1);
}

TEST(OptionExtractTest, OptionTextWhenNoLetter) {
  const std::vector<std::string> opts = {"Korvin", "Korvin, Tr'en", "Tr'en", "Earth, Tr'en"};
  EXPECT_EQ(ExtractOption("The entities are Korvin, Tr'en.", 4, opts), 1);
  EXPECT_EQ(ExtractOption("Earth, Tr'en", 4, opts), 3);
  EXPECT_EQ(ExtractOption("Nothing relevant.", 4, opts), std::nullopt);
}

TEST(ParseOptionsTest, QualityAndTpoStyles) {
  const auto q = ParseOptions("Why?\n\n (A) First one. \n (B) Second.\n (C) Third\n (D) Fourth ");
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0], "First one.");
  EXPECT_EQ(q[3], "Fourth");
  const auto t = ParseOptions("what is it\nA. a cat\nB. a dog\nC. a bird\nD. a fish");
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[1], "a dog");
  EXPECT_TRUE(ParseOptions("no options here").empty());
}

TEST(OptionScorerTest, ExpectedAsLetterOrFullOption) {
  const std::vector<std::string> opts = {"red", "blue", "green", "black"};
  const Sample full = Make(ScoreKind::kOption, {"(B) blue"}, opts);
  EXPECT_EQ(Score(full, "(B)"), 1);
  EXPECT_EQ(Score(full, "B) blue"), 1);
  EXPECT_EQ(Score(full, "The answer is not B"), 0);
  EXPECT_EQ(Score(full, "(C)"), 0);
  EXPECT_EQ(Score(full, "It is blue."), 1);
  EXPECT_EQ(Score(full, ""), 0);
  const Sample letter = Make(ScoreKind::kOption, {"D"}, opts);
  EXPECT_EQ(Score(letter, "D. black"), 1);
  EXPECT_EQ(Score(letter, "A, B, C or D"), 0);
  EXPECT_EQ(ScoreReply(letter, "(D)").extracted, "D");
}

TEST(NumberExtractTest, Formats) {
  EXPECT_EQ(ParseNumber("1,234"), 1234);
  EXPECT_EQ(ParseNumber("$1,234.50"), 1234.5);
  EXPECT_EQ(ParseNumber("-3"), -3);
  EXPECT_EQ(ParseNumber("50%"), 50);
  EXPECT_EQ(ParseNumber("12 apples"), std::nullopt);
  EXPECT_EQ(ParseNumber(""), std::nullopt);
  EXPECT_EQ(ExtractNumber("16 - 3 - 4 = 9 eggs, 9 * 2 = 18. The answer is 18."), 18);
  EXPECT_EQ(ExtractNumber("The answer is 1,234 dollars, from 1,000 + 234."), 1234);
  EXPECT_EQ(ExtractNumber("#### 72"), 72);
  EXPECT_EQ(ExtractNumber("She makes $18 every day."), 18);
  EXPECT_EQ(ExtractNumber("1,2,3"), 3);
  EXPECT_EQ(ExtractNumber("no numbers"), std::nullopt);
  EXPECT_EQ(ExtractNumber("It is not 18, it is 20"), 20);
  EXPECT_EQ(ExtractNumber("The answer is not 18"), std::nullopt);
}

TEST(NumberScorerTest, RightAndWrong) {
  const Sample s = Make(ScoreKind::kNumber, {"18"});
  EXPECT_EQ(Score(s, "The answer is 18"), 1);
  EXPECT_EQ(Score(s, "So she makes $18.00."), 1);
  EXPECT_EQ(Score(s, "The answer is 180"), 0);
  EXPECT_EQ(Score(s, "The answer is 1.8"), 0);
  EXPECT_EQ(Score(s, "18 eggs minus 2 leaves 16. The answer is 16."), 0);
  EXPECT_EQ(Score(s, "The answer is not 18"), 0);
  EXPECT_EQ(Score(s, ""), 0);
  const Sample big = Make(ScoreKind::kNumber, {"1,234"});
  EXPECT_EQ(Score(big, "1234"), 1);
  EXPECT_EQ(Score(big, "The total is 1,234."), 1);
}

TEST(ExactScorerTest, StatedAnswerMustEqual) {
  const Sample s = Make(ScoreKind::kExact, {"Paris"});
  EXPECT_EQ(Score(s, "Paris"), 1);
  EXPECT_EQ(Score(s, "paris."), 1);
  EXPECT_EQ(Score(s, "The answer is Paris."), 1);
  EXPECT_EQ(Score(s, "Paris is not the answer; it is Lyon."), 0);
  EXPECT_EQ(Score(s, "Parisian"), 0);
  EXPECT_EQ(Score(s, ""), 0);
}

TEST(TopicScorerTest, NamingEveryTopicIsWrong) {
  const Sample s = Make(ScoreKind::kTopic, {"The role of art in society"},
                        {"The future of space tourism", "The impact of social media"});
  EXPECT_EQ(Score(s, "The first topic was the role of art in society."), 1);
  EXPECT_EQ(Score(s, "Role of art in society"), 1);
  EXPECT_EQ(Score(s, "The future of space tourism"), 0);
  EXPECT_EQ(Score(s, "We discussed the role of art in society and the future of space tourism."),
            0);
  EXPECT_EQ(Score(s, "art"), 0);
  EXPECT_EQ(Score(s, ""), 0);
}

TEST(F1ScorerTest, KnownValues) {
  EXPECT_DOUBLE_EQ(WordF1("the cat sat", "cat sat"), 1.0);
  EXPECT_DOUBLE_EQ(WordF1("cat", "cat sat"), 2 * 1.0 * 0.5 / 1.5);
  EXPECT_DOUBLE_EQ(WordF1("dog", "cat sat"), 0.0);
  EXPECT_DOUBLE_EQ(WordF1("", "cat"), 0.0);
  const Sample s = Make(ScoreKind::kF1, {"a summary of the report", "other"});
  EXPECT_DOUBLE_EQ(Score(s, "summary of report"), 1.0);
}

TEST(ScoreKindTest, NamesRoundTrip) {
  for (ScoreKind k : {ScoreKind::kContains, ScoreKind::kContainsAll, ScoreKind::kOption,
                      ScoreKind::kExact, ScoreKind::kNumber, ScoreKind::kTopic, ScoreKind::kF1}) {
    ScoreKind back;
    ASSERT_TRUE(ParseScoreKind(ScoreKindName(k), &back));
    EXPECT_EQ(back, k);
  }
  ScoreKind k;
  EXPECT_FALSE(ParseScoreKind("rouge", &k));
}

}  // namespace
}  // namespace icecache::eval
