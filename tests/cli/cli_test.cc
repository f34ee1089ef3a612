// The icecache binary end to end on the default model: generate (text, --json, --stop,
// progress), chat over stdin, inspect, bench and demo.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/paths.h"
#include "testing/run_command.h"

namespace icecache {
namespace {

using Json = nlohmann::json;
using testing::CliPath;
using testing::RunCommand;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::DefaultModelPath().empty()) {
      GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
    }
  }
  static Json Fixture() { return testing::ReadDataJson("reference/smollm2.json"); }
  // Writes `text` to a temp file and returns its path.
  static std::string TempFile(const std::string& text) {
    const std::string path = testing::MakeTempDir("cli") + "/prompt.txt";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(CliTest, GeneratePrintsTransformersGreedyContinuation) {
  const Json p = Fixture()["prompts"][0];
  const std::string prompt_file = TempFile(p["text"]);
  auto r = RunCommand(CliPath() + " generate -m default --prompt-file " + prompt_file +
                      " --temp 0 -n 32 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, p["greedy"]["text"].get<std::string>() + "\n");
}

TEST_F(CliTest, GenerateJsonHasStats) {
  auto r = RunCommand(CliPath() + " generate -m default -p 'Once upon a time' -n 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  const Json& s = j["stats"];
  EXPECT_GT(s["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(s["generated_tokens"].get<int>(), 0);
  EXPECT_GT(s["prefill_tokens_per_second"].get<double>(), 0);
  EXPECT_GT(s["kv_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(s["kv_bytes_per_token"].get<int64_t>(), 30 * 3 * 64 * 2 * 4);
  EXPECT_GT(s["peak_rss_bytes"].get<int64_t>(), 1 << 20);
  EXPECT_EQ(j["model"]["arch"], "llama");
  EXPECT_EQ(j["tokens"].size(), s["generated_tokens"].get<size_t>());
}

TEST_F(CliTest, StopStringEndsGenerationBeforeIt) {
  const Json p = Fixture()["prompts"][0];
  const std::string prompt_file = TempFile(p["text"]);
  auto r = RunCommand(CliPath() + " generate -m default --prompt-file " + prompt_file +
                      " -n 32 --stop Celsius --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["text"], " 2,100 degrees ");
  EXPECT_EQ(j["stats"]["finish_reason"], "stop");
}

TEST_F(CliTest, ProgressBarOnLongPrefill) {
  std::string text;
  for (int i = 0; i < 150; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  auto r = RunCommand(CliPath() + " generate -m default --prompt-file " + TempFile(text) +
                      " -n 1 --progress always");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("prefill ["), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  auto quiet = RunCommand(CliPath() + " generate -m default -p hi -n 1 --progress always");
  EXPECT_EQ(quiet.err.find("prefill ["), std::string::npos) << "short prefill must stay quiet";
}

TEST_F(CliTest, ChatOverStdinKeepsConversation) {
  auto r = RunCommand("printf 'My name is Ada.\\nWhat is my name?\\n/exit\\n' | " + CliPath() +
                      " chat -m default -n 24 --stats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Two replies, each followed by a newline, and the second turn reused the first's KV.
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_NE(r.out.find("Ada"), std::string::npos) << r.out;
  const size_t second = r.err.find("[prefill", r.err.find("[prefill") + 1);
  ASSERT_NE(second, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(0 cached)", second), std::string::npos) << r.err;
}

TEST_F(CliTest, InspectShowsArchitectureAndTensors) {
  auto r = RunCommand(CliPath() + " inspect default");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture  llama"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV per token  45.0 KiB at f32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.0.attn_q.weight"), std::string::npos);

  auto j = RunCommand(CliPath() + " inspect -m default --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const Json info = Json::parse(j.out);
  EXPECT_EQ(info["layers"], 30);
  EXPECT_EQ(info["heads"], 9);
  EXPECT_EQ(info["kv_heads"], 3);
  EXPECT_EQ(info["tensors"].size(), 272u);
  EXPECT_EQ(info["kv_bytes_per_token_f32"], 46080);
  EXPECT_EQ(info["metadata"]["general.architecture"], "llama");
}

TEST_F(CliTest, BenchPrintsTable) {
  auto r = RunCommand(CliPath() + " bench -m default --contexts 128,256 --decode 4 --repeats 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("|     128 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|     256 |"), std::string::npos) << r.out;
}

TEST_F(CliTest, DemoAnswersFromItsOwnDocument) {
  auto r = RunCommand(CliPath() + " demo --tokens 600 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_GT(j["stats"]["prompt_tokens"].get<int>(), 500);
  EXPECT_FALSE(j["answer"].get<std::string>().empty());
  EXPECT_TRUE(j.contains("correct"));
}

}  // namespace
}  // namespace icecache
