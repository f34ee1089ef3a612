// Every bad input the CLI can meet gives one clear error line and a non-zero exit, never a
// crash (issue: engine foundation, item 10).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "model/gguf/gguf_writer.h"
#include "model/safetensors/safetensors_file.h"
#include "testing/paths.h"
#include "testing/run_command.h"

namespace icecache {
namespace {

using testing::CliPath;
using testing::CommandResult;
using testing::RunCommand;

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Asserts a clean failure: non-zero exit (not a signal), exactly one line on stderr that
// starts with "error:" and contains `needle`.
void ExpectCleanError(const CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "killed by a signal; stderr: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("error:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
}

std::string Gen(const std::string& args) { return CliPath() + " generate " + args; }

TEST(CliBadInputTest, MissingModelFile) {
  ExpectCleanError(RunCommand(Gen("-m /nonexistent/model.gguf -p hi")), "/nonexistent/model.gguf");
}

TEST(CliBadInputTest, NotAGgufFile) {
  const std::string dir = testing::MakeTempDir("badinput");
  WriteBytes(dir + "/x.gguf", std::vector<uint8_t>(1000, 'z'));
  ExpectCleanError(RunCommand(Gen("-m " + dir + "/x.gguf -p hi")), "not a GGUF file");
}

TEST(CliBadInputTest, GgufWithUnsupportedVersion) {
  const std::string dir = testing::MakeTempDir("badinput");
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 99, 0, 0, 0};
  b.resize(64, 0);
  WriteBytes(dir + "/v99.gguf", b);
  ExpectCleanError(RunCommand(Gen("-m " + dir + "/v99.gguf -p hi")), "version");
}

TEST(CliBadInputTest, TruncatedGguf) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  const std::string dir = testing::MakeTempDir("badinput");
  for (size_t cut : {size_t{20}, size_t{5000}, size_t{3000000}, size_t{50000000}}) {
    std::ifstream in(model, std::ios::binary);
    std::vector<uint8_t> b(cut);
    in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(cut));
    WriteBytes(dir + "/t.gguf", b);
    ExpectCleanError(RunCommand(Gen("-m " + dir + "/t.gguf -p hi")), "t.gguf");
  }
}

TEST(CliBadInputTest, TensorDataOutOfBounds) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  std::vector<float> data(64 * 64, 0.5f);
  const int64_t shape[] = {64, 64};
  w.AddTensor("token_embd.weight", DType::kF32, shape, data.data());
  std::vector<uint8_t> b = w.Serialize();
  b.resize(b.size() - 1000);  // cut into the tensor data
  const std::string dir = testing::MakeTempDir("badinput");
  WriteBytes(dir + "/oob.gguf", b);
  ExpectCleanError(RunCommand(Gen("-m " + dir + "/oob.gguf -p hi")), "token_embd.weight");
}

TEST(CliBadInputTest, UnsupportedArchitecture) {
  GgufWriter w;
  w.AddString("general.architecture", "gpt2");
  const std::string dir = testing::MakeTempDir("badinput");
  ASSERT_TRUE(w.WriteFile(dir + "/gpt2.gguf").ok());
  ExpectCleanError(RunCommand(Gen("-m " + dir + "/gpt2.gguf -p hi")), "'gpt2'");
}

TEST(CliBadInputTest, UnsupportedTensorType) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  std::vector<float> data(32, 1.0f);
  const int64_t shape[] = {32};
  w.AddTensor("zzzz_marker.weight", DType::kF32, shape, data.data());
  std::vector<uint8_t> b = w.Serialize();
  // Patch the tensor's type (u32 after name, n_dims and one dim) to ggml's Q5_0 (6).
  const std::string name = "zzzz_marker.weight";
  auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  ASSERT_NE(it, b.end());
  const size_t type_at = static_cast<size_t>(it - b.begin()) + name.size() + 4 + 8;
  b[type_at] = 6;
  const std::string dir = testing::MakeTempDir("badinput");
  WriteBytes(dir + "/q50.gguf", b);
  ExpectCleanError(RunCommand(Gen("-m " + dir + "/q50.gguf -p hi")), "Q5_0");
}

TEST(CliBadInputTest, HfFolderWithoutTokenizer) {
  const std::string dir = testing::MakeTempDir("badinput");
  std::ofstream(dir + "/config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10})";
  SafetensorsWriter sw;
  std::vector<float> emb(80, 0.1f);
  const int64_t shape[] = {10, 8};
  sw.AddTensor("model.embed_tokens.weight", DType::kF32, shape, emb.data());
  ASSERT_TRUE(sw.WriteFile(dir + "/model.safetensors").ok());
  ExpectCleanError(RunCommand(Gen("-m " + dir + " -p hi")), "tokenizer");
}

TEST(CliBadInputTest, HfFolderWithUnsupportedArchitecture) {
  const std::string dir = testing::MakeTempDir("badinput");
  std::ofstream(dir + "/config.json") << R"({"architectures": ["GPTNeoXForCausalLM"]})";
  ExpectCleanError(RunCommand(Gen("-m " + dir + " -p hi")), "GPTNeoXForCausalLM");
}

TEST(CliBadInputTest, CorruptSafetensorsHeader) {
  const std::string dir = testing::MakeTempDir("badinput");
  std::ofstream(dir + "/config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 10})";
  std::ofstream(dir + "/tokenizer.json") << "{}";
  std::vector<uint8_t> b(64, 0);
  b[0] = 0xff;  // header length far past the end
  b[5] = 0x7f;
  WriteBytes(dir + "/model.safetensors", b);
  const CommandResult r = RunCommand(Gen("-m " + dir + " -p hi"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128);
  EXPECT_EQ(r.err.rfind("error:", 0), 0u) << r.err;
}

TEST(CliBadInputTest, PromptLongerThanContext) {
  if (testing::DefaultModelPath().empty()) GTEST_SKIP() << "default model not downloaded";
  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += "word ";
  ExpectCleanError(RunCommand(Gen("-m default -c 64 -n 4 -p '" + prompt + "'")),
                   "context limit of 64");
}

TEST(CliBadInputTest, InvalidFlags) {
  ExpectCleanError(RunCommand(Gen("-p hi --temp -1")), "--temp");
  ExpectCleanError(RunCommand(Gen("-p hi --top-p 2")), "--top-p");
  ExpectCleanError(RunCommand(Gen("-p hi --no-such-flag")), "no-such-flag");
  ExpectCleanError(RunCommand(Gen("-p hi -n abc")), "abc");
  ExpectCleanError(RunCommand(Gen("-p hi --device tpu")), "tpu");
  ExpectCleanError(RunCommand(Gen("")), "prompt");
  ExpectCleanError(RunCommand(CliPath() + " frobnicate"), "frobnicate");
  ExpectCleanError(RunCommand(Gen("-p hi --prompt-file /nonexistent.txt")), "excludes");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-rank sideways")), "--kv-rank");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-policy lychee --kv-rank soft")), "lychee ranks");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-policy icecache --kv-search-radius 1.5")),
                   "--kv-search-radius");
  ExpectCleanError(RunCommand(CliPath() + " bench --synthetic tiny --contexts 64 --decode 1 "
                                          "--kv-policy icecache --kv-exact --kv-rank centroid"),
                   "--kv-exact");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-policy icecache --kv-rank spread")),
                   "--kv-rank spread is lychee's");
  ExpectCleanError(RunCommand(CliPath() + " bench --synthetic tiny --contexts 64 --decode 1 "
                                          "--kv-policy lychee --kv-exact --kv-rank spread"),
                   "excludes --kv-rank spread");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-oracle-score heat")), "--kv-oracle-score");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-search-score heat")), "--kv-search-score");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-search-leaves -3")), "--kv-search-leaves");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-policy icecache --kv-exact --kv-search-score mass")),
                   "excludes --kv-exact");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-route gpu")), "--kv-route");
  ExpectCleanError(
      RunCommand(CliPath() + " bench --synthetic tiny --contexts 64 --decode 1 "
                             "--kv-policy icecache --kv-select host --kv-route device"),
      "--kv-route device");
}

TEST(CliBadInputTest, NumbersOutOfRangeSayWhatIsExpected) {
  ExpectCleanError(RunCommand(Gen("-p hi --kv-budget 0")), "'0' is not a positive whole number");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-budget 2.5")), "'2.5' is not a positive whole");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-sink -1")), "'-1' is not a whole number >= 0");
  ExpectCleanError(RunCommand(Gen("-p hi --kv-working-set -4")), "'-4' is not a whole number >= 0");
  ExpectCleanError(
      RunCommand(CliPath() + " bench --synthetic tiny --contexts 64 --decode 1 --kv-policy quest "
                             "--kv-select device --kv-working-set 10000000"),
      "--kv-working-set");
  ExpectCleanError(RunCommand(Gen("-p hi -n 1e3")), "'1e3' is not a whole number >= 0");
  ExpectCleanError(RunCommand(Gen("-p hi --device cuda --device-mem-limit -1G")),
                   "'-1G' is not a size");
}

// Exit status: 2 for bad usage (flags, values, commands), 1 for a failure while running.
TEST(CliBadInputTest, UsageErrorsExitTwoAndRunErrorsOne) {
  for (const std::string& args :
       {Gen("-p hi --no-such-flag"), Gen("-p hi -n abc"), Gen("-p hi --temp -1"),
        Gen("-p hi --kv-budget 0"), Gen("-p hi --kv-rank sideways"), Gen(""),
        CliPath() + " frobnicate", CliPath() + " bench --contexts 64 --no-such-flag"}) {
    EXPECT_EQ(RunCommand(args).exit_code, 2) << args;
  }
  EXPECT_EQ(RunCommand(Gen("-m /nonexistent/model.gguf -p hi")).exit_code, 1);
  EXPECT_EQ(RunCommand(Gen("--help")).exit_code, 0);
  EXPECT_EQ(RunCommand(CliPath() + " --version").exit_code, 0);
}

TEST(CliBadInputTest, MissingPromptFile) {
  ExpectCleanError(RunCommand(Gen("--prompt-file /nonexistent/prompt.txt")), "prompt.txt");
}

}  // namespace
}  // namespace icecache
