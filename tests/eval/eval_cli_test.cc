// `icecache eval` through the real binary on the default model, with tiny lengths: files
// written, resume after an interruption gives the same table, bad input gives one error line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/paths.h"
#include "testing/run_command.h"

namespace icecache {
namespace {

using testing::CliPath;
using testing::CommandResult;
using testing::RunCommand;

int Lines(const std::string& path) {
  const std::string t = testing::ReadFileText(path);
  return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
}

std::string SharedData(const std::string& rel) {
  return testing::SourceDir() + "/../shared/data/" + rel;
}

// Non-zero exit without a signal, and the last stderr line is the error naming `needle`.
void ExpectError(const CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << r.err;
  EXPECT_EQ(r.err.rfind("error:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

class EvalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::DefaultModelPath().empty()) {
      GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
    }
  }
  static std::string Needle(const std::string& out, const std::string& extra = "") {
    return CliPath() + " eval needle -m default -t 2 --lengths 256,320 --limit 2 --out " + out +
           " " + extra;
  }
};

TEST_F(EvalCliTest, NeedleWritesResultsTableAndPlots) {
  const std::string out = testing::MakeTempDir("eval-needle");
  auto r = RunCommand(Needle(out, "--policies full,icecache --budgets 64"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 2 lengths x 2 depths x (full, icecache/64).
  EXPECT_EQ(Lines(out + "/needle.jsonl"), 8) << testing::ReadFileText(out + "/needle.jsonl");
  const std::string md = testing::ReadFileText(out + "/needle.md");
  EXPECT_EQ(r.out, md);
  EXPECT_NE(md.find("| policy | budget | 256 | 320 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| full | - |"), std::string::npos) << md;
  // Every configuration has a row with a score in each length column.
  const size_t row = md.find("| icecache | 64 | ");
  ASSERT_NE(row, std::string::npos) << md;
  const std::string cells = md.substr(row, md.find('\n', row) - row);
  EXPECT_EQ(cells.find(" - |", 14), std::string::npos) << cells;
  EXPECT_EQ(r.err.find("not available"), std::string::npos) << r.err;
  EXPECT_NE(testing::ReadFileText(out + "/needle.jsonl").find("\"policy\":\"icecache\""),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/needle_heatmap_full.svg"));
  EXPECT_TRUE(std::filesystem::exists(out + "/needle_budget.svg"));
  EXPECT_NE(testing::ReadFileText(out + "/needle.jsonl").find("\"policy\":\"full\""),
            std::string::npos);
}

// A policy written NAME:RANK keeps that label in the tables; its plot's file name has no colon.
TEST_F(EvalCliTest, PolicyWithARankKeepsItsLabel) {
  const std::string out = testing::MakeTempDir("eval-rank");
  auto r = RunCommand(Needle(out, "--policies full,lychee:centroid --budgets 64"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string md = testing::ReadFileText(out + "/needle.md");
  EXPECT_NE(md.find("| lychee:centroid | 64 | "), std::string::npos) << md;
  EXPECT_NE(testing::ReadFileText(out + "/needle.jsonl").find("\"policy\":\"lychee:centroid\""),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(out + "/needle_heatmap_lychee-centroid_64.svg"));
}

TEST_F(EvalCliTest, InterruptedRunResumesToTheSameTable) {
  const std::string once = testing::MakeTempDir("eval-once");
  auto a = RunCommand(Needle(once));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(Lines(once + "/needle.jsonl"), 4);

  // Stopped after one run, then continued.
  const std::string stopped = testing::MakeTempDir("eval-stop");
  auto b = RunCommand(Needle(stopped, "--max-runs 1"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(Lines(stopped + "/needle.jsonl"), 1);
  EXPECT_NE(b.err.find("stopped after 1 new runs"), std::string::npos) << b.err;
  auto b2 = RunCommand(Needle(stopped));
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  EXPECT_NE(b2.err.find("3 runs to do"), std::string::npos) << b2.err;
  EXPECT_EQ(Lines(stopped + "/needle.jsonl"), 4);
  EXPECT_EQ(testing::ReadFileText(stopped + "/needle.md"),
            testing::ReadFileText(once + "/needle.md"));

  // Killed in the middle of writing a line: the partial line is dropped and redone.
  const std::string killed = testing::MakeTempDir("eval-killed");
  const std::string full = testing::ReadFileText(once + "/needle.jsonl");
  const size_t second_line = full.find('\n') + 1;
  std::ofstream(killed + "/needle.jsonl", std::ios::binary) << full.substr(0, second_line + 40);
  auto c = RunCommand(Needle(killed));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("cut short"), std::string::npos) << c.err;
  EXPECT_EQ(Lines(killed + "/needle.jsonl"), 4);
  EXPECT_EQ(testing::ReadFileText(killed + "/needle.md"),
            testing::ReadFileText(once + "/needle.md"));
  // Greedy decoding is deterministic: the redone runs give the same records (timings aside).
  EXPECT_EQ(c.out, a.out);
}

TEST_F(EvalCliTest, RulerLevalAndFidelityRun) {
  const std::string out = testing::MakeTempDir("eval-more");
  auto ruler = RunCommand(CliPath() +
                          " eval ruler -m default --subtasks niah_single,vt "
                          "--lengths 512 --limit 1 --out " +
                          out);
  ASSERT_EQ(ruler.exit_code, 0) << ruler.err;
  EXPECT_EQ(Lines(out + "/ruler.jsonl"), 2);
  EXPECT_NE(ruler.out.find("## niah_single (scorer: contains_all)"), std::string::npos)
      << ruler.out;
  EXPECT_NE(ruler.out.find("## All subtasks (mean of 2 subtask means)"), std::string::npos);

  auto fid = RunCommand(CliPath() +
                        " eval fidelity -m default --lengths 256 --steps 16 "
                        "--gen-tokens 8 --limit 1 --out " +
                        out);
  ASSERT_EQ(fid.exit_code, 0) << fid.err;
  // Full KV against its own reference: the harness check.
  EXPECT_NE(fid.out.find("| full | - | 256 | 0.0000 | 0.0000 | 1.000 |"), std::string::npos)
      << fid.out;
  EXPECT_NE(fid.out.find("8.0 of 8"), std::string::npos) << fid.out;
  EXPECT_TRUE(std::filesystem::exists(out + "/fidelity_kl_budget.svg"));

  const std::string quality = SharedData("leval/quality.jsonl");
  if (!std::filesystem::exists(quality)) GTEST_SKIP() << "no " << quality;
  auto leval = RunCommand(CliPath() + " eval leval -m default --task " + quality +
                          " --lengths 512 --limit 1 --out " + out);
  ASSERT_EQ(leval.exit_code, 0) << leval.err;
  EXPECT_NE(leval.out.find("## quality (scorer: option)"), std::string::npos) << leval.out;
  EXPECT_NE(leval.out.find("512: 1 of 1 samples cut"), std::string::npos) << leval.out;
}

// With --kv-recall the fidelity runs also measure attention-mass recall over the teacher-forced
// steps: exactly 1 for full KV, below 1 for a budget far under the context.
TEST_F(EvalCliTest, FidelityMeasuresRecallWhenAsked) {
  const std::string out = testing::MakeTempDir("eval-recall");
  auto fid = RunCommand(CliPath() +
                        " eval fidelity -m default --lengths 512 --steps 16 --gen-tokens 0 "
                        "--limit 1 --policies full,streaming --budgets 64 --kv-recall --out " +
                        out);
  ASSERT_EQ(fid.exit_code, 0) << fid.err;
  EXPECT_NE(fid.out.find("| recall mean | recall p10 |"), std::string::npos) << fid.out;
  const size_t full = fid.out.find("| full | - | 512 |");
  ASSERT_NE(full, std::string::npos) << fid.out;
  const std::string full_row = fid.out.substr(full, fid.out.find('\n', full) - full);
  EXPECT_NE(full_row.find("| 1.0000 | 1.000 |"), std::string::npos) << full_row;
  std::ifstream jsonl(out + "/fidelity.jsonl");
  std::string line, streaming;
  while (std::getline(jsonl, line)) {
    if (line.find("\"policy\":\"streaming\"") != std::string::npos) streaming = line;
  }
  const size_t at = streaming.find("\"recall_mean\":");
  ASSERT_NE(at, std::string::npos) << streaming;
  const double recall = std::stod(streaming.substr(at + 14));
  EXPECT_GT(recall, 0.0);
  EXPECT_LT(recall, 1.0);
}

TEST(EvalCliBadInputTest, BadTaskFileNamesTheLine) {
  const std::string dir = testing::MakeTempDir("eval-bad");
  const std::string path = dir + "/mine.jsonl";
  std::ofstream(path) << R"({"context": "c", "question": "q", "answers": ["a"]})"
                      << "\n"
                      << R"({"context": "c", "question": "q", "answers": ["a"]})"
                      << "\n"
                      << R"({"context": "c", "question": )"
                      << "\n";
  ExpectError(RunCommand(CliPath() + " eval jsonl --task " + path + " --out " + dir),
              path + ":3: malformed JSON");
  std::ofstream(path) << R"({"context": "c", "answers": ["a"]})"
                      << "\n";
  ExpectError(RunCommand(CliPath() + " eval jsonl --task " + path + " --out " + dir),
              path + ":1: missing field 'question'");
  ExpectError(RunCommand(CliPath() + " eval leval --out " + dir), "needs --task FILE");
}

TEST(EvalCliBadInputTest, BadOptions) {
  const std::string dir = testing::MakeTempDir("eval-opts");
  ExpectError(RunCommand(CliPath() + " eval needle --lengths 2Q --out " + dir), "--lengths");
  ExpectError(RunCommand(CliPath() + " eval needle --budgets 0 --out " + dir), "--budgets");
  ExpectError(RunCommand(CliPath() + " eval needle --depths 0,1.5 --out " + dir), "--depths");
  ExpectError(RunCommand(CliPath() + " eval ruler --subtasks nope --out " + dir), "nope");
  ExpectError(RunCommand(CliPath() + " eval fidelity --steps 8 --gen-tokens 9 --out " + dir),
              "--gen-tokens");
  ExpectError(RunCommand(CliPath() + " eval needle --haystack /nonexistent --out " + dir),
              "/nonexistent");
  auto r = RunCommand(CliPath() + " eval bogus");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128);
}

TEST_F(EvalCliTest, BadPolicyAndTooShortLength) {
  const std::string dir = testing::MakeTempDir("eval-policy");
  ExpectError(RunCommand(CliPath() +
                         " eval needle -m default --lengths 256 --policies nonsense "
                         "--out " +
                         dir),
              "nonsense");
  ExpectError(RunCommand(CliPath() + " eval needle -m default --lengths 128 --out " + dir),
              "too short");
}

}  // namespace
}  // namespace icecache
