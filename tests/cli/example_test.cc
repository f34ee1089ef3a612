// examples/ask_document (the C++ API example): one prefill serves every policy, each sparse
// policy attends within its budget and full KV attends the whole context; bad arguments fail
// cleanly.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "testing/paths.h"
#include "testing/run_command.h"

namespace icecache {
namespace {

using testing::RunCommand;

std::string Example() { return ICECACHE_EXAMPLE_ASK_PATH; }

TEST(AskDocumentExampleTest, ForksOnePrefillIntoEachPolicy) {
  if (testing::DefaultModelPath().empty()) GTEST_SKIP() << "default model not downloaded";
  // About 2K tokens of real text: the start of the README.
  std::ifstream readme(std::string(ICECACHE_SOURCE_DIR) + "/README.md");
  std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 8000u);
  const std::string doc = testing::MakeTempDir("example") + "/doc.txt";
  std::ofstream(doc) << text.substr(0, 8000);

  const auto r = RunCommand(Example() + " " + doc +
                            " 'What does the second command run?' --policies full,icecache,quest "
                            "--budget 128 --max-tokens 6 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex block(
      R"(\[(\w+)[^\]]*\]\n  answer: [^\n]*\n  prompt tokens taken from the prefill: (\d+) of (\d+)\n)"
      R"(  decode: [0-9.]+ tok/s; attended ([0-9.]+) of ([0-9.]+) tokens)");
  std::vector<std::string> seen;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), block);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const std::string policy = m[1];
    seen.push_back(policy);
    EXPECT_EQ(std::stol(m[2]) + 1, std::stol(m[3])) << policy << ": the fork prefilled again";
    const double attended = std::stod(m[4]), context = std::stod(m[5]);
    EXPECT_GT(context, 1000) << policy;
    if (policy == "full") {
      EXPECT_EQ(attended, context);
    } else {
      EXPECT_LE(attended, 128) << policy;
      EXPECT_GT(attended, 64) << policy;
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"full", "icecache", "quest"})) << r.out;
}

TEST(AskDocumentExampleTest, BadArgumentsFailCleanly) {
  const auto none = RunCommand(Example());
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err.rfind("error: ", 0), 0u) << none.err;
  const auto policy = RunCommand(Example() + " /nonexistent.txt q --policies full,sideways");
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.err.find("sideways"), std::string::npos) << policy.err;
  const auto budget = RunCommand(Example() + " /nonexistent.txt q --budget 0");
  EXPECT_EQ(budget.exit_code, 2);
  const auto file = RunCommand(Example() + " /nonexistent.txt q");
  EXPECT_EQ(file.exit_code, 1);
  EXPECT_NE(file.err.find("/nonexistent.txt"), std::string::npos) << file.err;
}

TEST(AskDocumentExampleTest, ADocumentLongerThanTheContextExitsTwo) {
  if (testing::DefaultModelPath().empty()) GTEST_SKIP() << "default model not downloaded";
  const std::string doc = testing::MakeTempDir("example") + "/long.txt";
  {
    std::ofstream out(doc);
    for (int i = 0; i < 9000; ++i) out << "word ";
  }
  const auto r = RunCommand(Example() + " " + doc + " q --threads 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("does not fit the context limit"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace icecache
