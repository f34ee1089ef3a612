// Chat templates against what transformers' apply_chat_template renders (fixture made by
// tools/reference/make_tokenizer_fixtures.py: SmolLM2's template from the GGUF, Llama-3,
// Llama-2, Mistral v0.1 and the no-tools part of Qwen2.5's).
#include <gtest/gtest.h>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "tokenizer/chat_template.h"

namespace icecache {
namespace {

std::vector<ChatMessage> Messages(const nlohmann::json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv) out.push_back({m["role"], m["content"]});
  return out;
}

TEST(ChatTemplateTest, MatchesTransformers) {
  const auto data = tok_test::LoadFixture("chat_templates.json");
  const auto& convs = data["conversations"];
  const std::map<std::string, ChatFormat> formats = {
      {"smollm2", ChatFormat::kChatMl}, {"qwen2.5", ChatFormat::kChatMl},
      {"llama3", ChatFormat::kLlama3},  {"llama3.1", ChatFormat::kLlama31},
      {"llama2", ChatFormat::kLlama2},  {"mistral", ChatFormat::kMistral}};
  ASSERT_EQ(data["templates"].size(), formats.size());
  for (const auto& t : data["templates"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    auto tpl = ChatTemplate::FromJinja(t["template"].get<std::string>(), t["bos"], t["eos"]);
    ASSERT_TRUE(tpl.ok()) << tpl.status().ToString();
    EXPECT_EQ(tpl->format(), formats.at(name));
    for (size_t c = 0; c < convs.size(); ++c) {
      for (int gen = 0; gen < 2; ++gen) {
        SCOPED_TRACE("conversation " + std::to_string(c) + " add_generation_prompt " +
                     std::to_string(gen));
        const auto& expected = t["rendered"][2 * c + gen];
        auto got = tpl->Apply(Messages(convs[c]), gen == 1);
        if (expected.contains("error")) {
          ASSERT_FALSE(got.ok()) << "transformers: " << expected["error"];
          EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
        } else {
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_EQ(got.value(), expected["prompt"].get<std::string>());
        }
      }
    }
  }
}

TEST(ChatTemplateTest, DefaultSystemPrompts) {
  const auto data = tok_test::LoadFixture("chat_templates.json");
  for (const auto& t : data["templates"]) {
    auto tpl = ChatTemplate::FromJinja(t["template"].get<std::string>(), t["bos"], t["eos"]);
    ASSERT_TRUE(tpl.ok());
    if (t["name"] == "smollm2") {
      EXPECT_EQ(tpl->default_system(),
                "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    } else if (t["name"] == "qwen2.5") {
      EXPECT_EQ(tpl->default_system(),
                "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    } else {
      EXPECT_EQ(tpl->default_system(), "") << t["name"];
    }
  }
}

TEST(ChatTemplateTest, SmolLm2TemplateFromGguf) {
  const std::string path = testing::DefaultModelPath();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found";
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  auto jinja = gguf.value()->GetString("tokenizer.chat_template");
  ASSERT_TRUE(jinja.ok());
  auto tpl = ChatTemplate::FromJinja(jinja.value(), "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(tpl.ok());
  auto prompt = tpl->Apply({{"user", "Hi"}}, true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt.value(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Errors) {
  auto unknown = ChatTemplate::FromJinja("{{ messages }}", "", "");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("not recognised"), std::string::npos);
  // A Llama 3.1 form whose knowledge date cannot be read is refused, not guessed.
  auto llama31 = ChatTemplate::FromJinja(
      "<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: ", "", "");
  ASSERT_FALSE(llama31.ok());
  EXPECT_EQ(llama31.status().code(), StatusCode::kUnsupported);
  const auto chatml = ChatTemplate::Make(ChatFormat::kChatMl, "", "");
  auto bad_role = chatml.Apply({{"user", "a"}, {"tool", "b"}}, false);
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("'tool'"), std::string::npos);
  EXPECT_FALSE(chatml.Apply({}, true).ok());
}

}  // namespace
}  // namespace icecache
