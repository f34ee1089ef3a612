// Cross-check with the engine's reference fixtures (tests/data/reference/, made from transformers
// by tools/reference/make_fixtures.py): the prompts' input_ids, chat prompts and stop ids.
#include <gtest/gtest.h>

#include <algorithm>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

using nlohmann::json;

class ReferenceFixturesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceFixturesTest, PromptsTokenizeAsInTransformers) {
  const std::string model = GetParam();
  const json ref =
      json::parse(tok_test::ReadFileOrDie(testing::DataPath("reference/" + model + ".json")));
  std::unique_ptr<Tokenizer> tok;
  std::string jinja, bos, eos;
  if (model == "smollm2") {
    const std::string path = testing::DefaultModelPath();
    if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found";
    auto gguf = GgufFile::Open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
    auto r = Tokenizer::FromGguf(*gguf.value());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    tok = std::move(r).value();
    jinja = gguf.value()->GetString("tokenizer.chat_template").value();
  } else {
    const std::string name = ref["tokenizer"];
    const std::string config_path = testing::DataPath("reference/" + name + "_config.json");
    auto r = Tokenizer::FromHfFiles(testing::DataPath("reference/" + name + ".json"), config_path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    tok = std::move(r).value();
    const json config = json::parse(tok_test::ReadFileOrDie(config_path));
    jinja = config["chat_template"];
  }
  bos = tok->bos_id() >= 0 ? std::string(tok->TokenText(tok->bos_id())) : "";
  eos = tok->eos_id() >= 0 ? std::string(tok->TokenText(tok->eos_id())) : "";
  auto tpl = ChatTemplate::FromJinja(jinja, bos, eos);
  ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();

  for (const auto& p : ref["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    const std::string text = p["text"];
    EXPECT_EQ(tok->Encode(text, p["add_special_tokens"].get<bool>(), true),
              p["input_ids"].get<std::vector<int32_t>>());
    if (p.contains("messages")) {
      std::vector<ChatMessage> messages;
      for (const auto& m : p["messages"]) messages.push_back({m["role"], m["content"]});
      auto prompt = tpl->Apply(messages, p["add_generation_prompt"].get<bool>());
      ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
      EXPECT_EQ(prompt.value(), text);
    }
  }
  auto stop = tok->StopTokenIds();
  auto expected = ref["stop_ids"].get<std::vector<int32_t>>();
  std::sort(stop.begin(), stop.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(stop, expected);
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceFixturesTest,
                         ::testing::Values("smollm2", "tiny_llama", "tiny_qwen2", "tiny_qwen3"));

}  // namespace
}  // namespace icecache
