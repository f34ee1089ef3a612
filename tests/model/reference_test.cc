// The engine against Hugging Face transformers (fixtures in tests/data/reference, made by
// tools/reference/make_fixtures.py): token ids, next-token logits at several positions (incl. a
// 2K+ token prompt across prefill chunks) and 32-token greedy continuations, for SmolLM2-135M
// (the default GGUF) and tiny random models of llama, qwen2 and qwen3 loaded both from a Hugging
// Face folder and from a GGUF file written the way llama.cpp's converter writes them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "icecache/engine.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

using Json = nlohmann::json;

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<size_t>(in.tellg());
  std::vector<float> v(size / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(size));
  return v;
}

struct CompareOptions {
  bool check_tokenization = true;
  bool check_greedy = true;
};

// Checks every prompt of fixture `fx` on `engine`.
void CheckAgainstFixture(Engine& engine, const Json& fx, const CompareOptions& opt) {
  const double tol = std::stod(fx["tolerance"].is_string() ? fx["tolerance"].get<std::string>()
                                                           : fx["tolerance"].dump());
  for (const Json& p : fx["prompts"]) {
    const std::string name = p["name"];
    SCOPED_TRACE("prompt " + name);
    const std::vector<int32_t> ids = p["input_ids"].get<std::vector<int32_t>>();
    if (opt.check_tokenization) {
      const std::string text = p["text"];
      if (p.contains("messages")) {
        std::vector<ChatMessage> msgs;
        for (const Json& m : p["messages"]) msgs.push_back({m["role"], m["content"]});
        auto formatted = engine.FormatChat(msgs, p.value("add_generation_prompt", true));
        ASSERT_TRUE(formatted.ok()) << formatted.status().message();
        EXPECT_EQ(*formatted, text);
      }
      auto tokens = engine.Tokenize(text, p["add_special_tokens"].get<bool>(), true);
      ASSERT_TRUE(tokens.ok());
      EXPECT_EQ(*tokens, ids);
    }
    std::vector<int64_t> positions;
    for (const Json& pos : p["positions"]) positions.push_back(pos["position"]);
    auto logits = engine.Logits(ids, positions);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    ASSERT_EQ(logits->size(), positions.size());
    for (size_t i = 0; i < positions.size(); ++i) {
      const std::vector<float> ref =
          ReadF32(testing::DataPath("reference/" + p["positions"][i]["file"].get<std::string>()));
      const std::vector<float>& got = (*logits)[i];
      ASSERT_EQ(got.size(), ref.size());
      double max_ref = 0, max_diff = 0;
      size_t arg_ref = 0, arg_got = 0;
      for (size_t v = 0; v < ref.size(); ++v) {
        max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[v])));
        max_diff = std::max(max_diff, std::abs(static_cast<double>(ref[v]) - got[v]));
        if (ref[v] > ref[arg_ref]) arg_ref = v;
        if (got[v] > got[arg_got]) arg_got = v;
      }
      EXPECT_LE(max_diff, tol * max_ref) << "position " << positions[i] << ": max |diff| "
                                         << max_diff << ", max |logit| " << max_ref;
      EXPECT_EQ(arg_got, arg_ref) << "position " << positions[i];
    }
    if (opt.check_greedy) {
      const std::vector<int32_t> want = p["greedy"]["ids"].get<std::vector<int32_t>>();
      GenerateRequest req;
      req.prompt_tokens = ids;
      req.max_tokens = static_cast<int>(want.size());
      req.ignore_eos = true;
      auto out = engine.Generate(req);
      ASSERT_TRUE(out.ok()) << out.status().message();
      EXPECT_EQ(out->tokens, want);
    }
  }
}

TEST(ReferenceTest, SmolLM2MatchesTransformers) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  auto engine = Engine::Create({.model = model});
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  CheckAgainstFixture(**engine, testing::ReadDataJson("reference/smollm2.json"), {});
}

TEST(ReferenceTest, SmolLM2PrefillChunkSizeDoesNotMatter) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  EngineOptions options{.model = model, .prefill_chunk = 97};
  options.kv.page_size = 5;
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  CheckAgainstFixture(**engine, testing::ReadDataJson("reference/smollm2.json"),
                      {.check_tokenization = false, .check_greedy = false});
}

class TinyReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  testing::TinyModelSpec Spec() {
    for (const auto& s : testing::AllTinySpecs()) {
      if (s.name == GetParam()) return s;
    }
    ADD_FAILURE() << "no spec " << GetParam();
    return {};
  }
  Json Fixture() { return testing::ReadDataJson("reference/" + GetParam() + ".json"); }
};

TEST_P(TinyReferenceTest, FixtureSpecMatchesCpp) {
  const Json fx = Fixture();
  auto spec = testing::ParseTinyModelSpec(fx["spec"].dump());
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_TRUE(*spec == Spec());
}

TEST_P(TinyReferenceTest, HfFolderMatchesTransformers) {
  const testing::TinyModelSpec spec = Spec();
  const std::string dir = testing::MakeTempDir(spec.name);
  ASSERT_TRUE(testing::WriteTinyHfModel(spec, dir, testing::TinyTokenizerPath(spec)).ok());
  auto engine = Engine::Create({.model = dir});
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  CheckAgainstFixture(**engine, Fixture(), {});
}

TEST_P(TinyReferenceTest, GgufF32MatchesTransformers) {
  const testing::TinyModelSpec spec = Spec();
  const std::string path = testing::MakeTempDir(spec.name) + "/model.gguf";
  ASSERT_TRUE(
      testing::WriteTinyGgufModel(spec, path, testing::TinyTokenizerPath(spec), DType::kF32).ok());
  auto engine = Engine::Create({.model = path});
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  CheckAgainstFixture(**engine, Fixture(), {});
}

INSTANTIATE_TEST_SUITE_P(AllArchs, TinyReferenceTest,
                         ::testing::Values("tiny_llama", "tiny_qwen2", "tiny_qwen3"));

}  // namespace
}  // namespace icecache
