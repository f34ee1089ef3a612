// Task files: both JSONL formats, the scorer each file gets, and errors that name the line.
#include <gtest/gtest.h>

#include <fstream>

#include "eval/task_file.h"
#include "testing/paths.h"

namespace icecache::eval {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = icecache::testing::MakeTempDir("task_file") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TaskFileTest, LevalFormat) {
  const std::string path = Write(
      "quality.jsonl",
      R"({"input": "A long story.", "instructions": ["Q1?\n (A) x\n (B) y", "Q2?\n (A) u\n (B) v"], "outputs": ["(B) y", "(A) u"], "evaluation": "exam"})"
      "\n\n"
      R"({"input": "Another story.", "instructions": ["Q3?\n (A) p\n (B) q"], "outputs": ["(A) p"]})"
      "\n");
  auto f = LoadTaskFile(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->stem, "quality");
  ASSERT_EQ(f->documents.size(), 2u);
  EXPECT_EQ(f->documents[0].questions.size(), 2u);
  EXPECT_EQ(f->documents[1].line, 3);
  EXPECT_EQ(ChooseScoreKind(*f), ScoreKind::kOption);
  auto samples = MakeTaskSamples(*f, ScoreKind::kOption, 0, 0);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].id, "line1q1");
  EXPECT_EQ(samples[2].id, "line3");
  EXPECT_EQ(samples[0].choices.size(), 2u);
  EXPECT_EQ(samples[0].answers[0], "(B) y");
  EXPECT_NE(samples[0].prompt.after.find("Q1?"), std::string::npos);
  EXPECT_EQ(samples[0].prompt.document, "A long story.");
  EXPECT_EQ(MakeTaskSamples(*f, ScoreKind::kOption, 0, 2).size(), 2u);
}

TEST(TaskFileTest, PlainFormatAndScorerChoice) {
  auto numbers = LoadTaskFile(
      Write("mine.jsonl", R"({"context": "c", "question": "How many?", "answers": ["1,234"]})"
                          "\n"
                          R"({"context": "c", "question": "And now?", "answers": "7", "id": "x9"})"
                          "\n"));
  ASSERT_TRUE(numbers.ok()) << numbers.status().message();
  EXPECT_EQ(ChooseScoreKind(*numbers), ScoreKind::kNumber);
  EXPECT_EQ(numbers->documents[1].id, "x9");
  auto letters = LoadTaskFile(
      Write("letters.jsonl", R"({"context": "c", "question": "q", "answers": ["B"]})"));
  ASSERT_TRUE(letters.ok());
  EXPECT_EQ(ChooseScoreKind(*letters), ScoreKind::kOption);
  auto text = LoadTaskFile(
      Write("text.jsonl", R"({"context": "c", "question": "q", "answers": ["Paris", "paris"]})"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(ChooseScoreKind(*text), ScoreKind::kContains);
  auto topics = LoadTaskFile(Write(
      "topic_retrieval_longchat.jsonl",
      R"({"input": "chat", "instructions": ["first?", "second?"], "outputs": ["Art", "Space"]})"));
  ASSERT_TRUE(topics.ok());
  EXPECT_EQ(ChooseScoreKind(*topics), ScoreKind::kTopic);
  auto s = MakeTaskSamples(*topics, ScoreKind::kTopic, 0, 0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].choices, std::vector<std::string>{"Space"});
}

struct BadCase {
  const char* text;
  const char* expect;  // substring of the error
};

TEST(TaskFileTest, BadLinesNameTheLine) {
  const std::string good = R"({"context": "c", "question": "q", "answers": ["a"]})";
  const BadCase cases[] = {
      {"{\"context\": \"c\", \"question\": \"q\"", "malformed JSON"},
      {R"({"context": "c", "answers": ["a"]})", "missing field 'question'"},
      {R"({"question": "q", "answers": ["a"]})", "missing field 'context'"},
      {R"({"context": "c", "question": "q"})", "missing field 'answers'"},
      {R"({"context": "c", "question": "q", "answers": [""]})", "no expected answer"},
      {R"({"context": "c", "question": "q", "answers": {"x": 1}})", "field 'answers'"},
      {R"({"input": "d", "instructions": ["a", "b"], "outputs": ["x"]})", "has 2 items"},
      {R"({"input": "d", "outputs": ["x"]})", "missing field 'instructions'"},
      {R"({"text": "hello"})", "expected an L-Eval line"},
      {R"([1, 2])", "expected a JSON object"},
  };
  for (const BadCase& c : cases) {
    const std::string path = Write("bad.jsonl", good + "\n" + good + "\n" + c.text + "\n" + good);
    auto f = LoadTaskFile(path);
    ASSERT_FALSE(f.ok()) << c.text;
    EXPECT_NE(f.status().message().find(path + ":3:"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos) << f.status().message();
  }
}

TEST(TaskFileTest, MissingOrEmptyFile) {
  EXPECT_EQ(LoadTaskFile("/nonexistent/x.jsonl").status().code(), StatusCode::kNotFound);
  auto empty = LoadTaskFile(Write("empty.jsonl", "\n\n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no samples"), std::string::npos);
}

TEST(TaskFileTest, RealLevalFilesLoad) {
  const std::string dir = icecache::testing::SourceDir() + "/../shared/data/leval/";
  const std::pair<const char*, ScoreKind> files[] = {
      {"quality.jsonl", ScoreKind::kOption},
      {"tpo.jsonl", ScoreKind::kOption},
      {"topic_retrieval_longchat.jsonl", ScoreKind::kTopic},
      {"gsm100.jsonl", ScoreKind::kNumber},
      {"gov_report_summ.jsonl", ScoreKind::kF1}};
  for (const auto& [name, kind] : files) {
    auto f = LoadTaskFile(dir + name);
    if (!f.ok() && f.status().code() == StatusCode::kNotFound) GTEST_SKIP() << "no " << dir;
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(ChooseScoreKind(*f), kind) << name;
    // Every expected option letter parses; every quality question lists its options.
    if (kind == ScoreKind::kOption) {
      for (const Sample& s : MakeTaskSamples(*f, kind, 0, 0)) {
        EXPECT_GE(s.choices.size(), 2u) << name << " " << s.id;
      }
    }
  }
}

}  // namespace
}  // namespace icecache::eval
