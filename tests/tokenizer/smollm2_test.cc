// The SmolLM2 vocabulary from the default model GGUF under four byte-level pre-tokenizers
// (SmolLM2's own, GPT-2, Llama-3, Qwen2), checked against Hugging Face tokenizers, both through
// FromGguf and through a tokenizer.json built from the fixture skeleton plus the GGUF vocabulary.
#include <gtest/gtest.h>

#include <memory>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "tokenizer/gguf_loader.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

using nlohmann::json;

class SmolLm2Test : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::DefaultModelPath();
    if (path.empty()) return;
    auto r = GgufFile::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    gguf_ = std::move(r).value().release();
  }
  static void TearDownTestSuite() {
    delete gguf_;
    gguf_ = nullptr;
  }
  void SetUp() override {
    if (gguf_ == nullptr) {
      GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found (set ICECACHE_MODEL_DIR or put it "
                      "in .cache/models)";
    }
  }

  // The fixture's tokenizer.json skeleton with the GGUF vocabulary and merges filled in.
  static std::string FilledTokenizerJson(const json& skeleton) {
    json j = skeleton;
    const auto& tokens = *gguf_->Find("tokenizer.ggml.tokens")->AsStringArray();
    json vocab = json::object();
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    j["model"]["vocab"] = std::move(vocab);
    j["model"]["merges"] = *gguf_->Find("tokenizer.ggml.merges")->AsStringArray();
    return j.dump();
  }

  static GgufFile* gguf_;
};
GgufFile* SmolLm2Test::gguf_ = nullptr;

TEST_P(SmolLm2Test, GgufMatchesHf) {
  const json data = tok_test::LoadFixture("smollm2_" + GetParam() + ".json");
  // "smollm" is the file's own tokenizer.ggml.pre: load it the ordinary way.
  auto r = GetParam() == "smollm" ? Tokenizer::FromGguf(*gguf_)
                                  : tok::TokenizerFromGguf(*gguf_, GetParam());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  tok_test::ExpectMatchesReference(*r.value(), tok_test::Corpus(), data);
}

TEST_P(SmolLm2Test, TokenizerJsonMatchesHf) {
  const json data = tok_test::LoadFixture("smollm2_" + GetParam() + ".json");
  auto r = Tokenizer::FromHfJson(FilledTokenizerJson(data["tokenizer_json"]), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value()->kind(), TokenizerKind::kByteLevelBpe);
  tok_test::ExpectMatchesReference(*r.value(), tok_test::Corpus(), data);
}

TEST_P(SmolLm2Test, DecodeRoundTrips) {
  auto r = tok::TokenizerFromGguf(*gguf_, GetParam());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& tok = *r.value();
  for (const std::string& text : tok_test::Corpus()) {
    if (GetParam() == "qwen2") continue;  // NFC changes NFD input
    EXPECT_EQ(tok.Decode(tok.Encode(text, false, true)), text) << tok_test::Show(text);
    EXPECT_EQ(tok.Decode(tok.Encode(text, false, false)), text) << tok_test::Show(text);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, SmolLm2Test,
                         ::testing::Values("smollm", "gpt2", "llama3", "qwen2"));

TEST(SmolLm2MetadataTest, SpecialTokens) {
  const std::string path = testing::DefaultModelPath();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found";
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto r = Tokenizer::FromGguf(*gguf.value());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& tok = *r.value();
  EXPECT_EQ(tok.kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.adds_bos());
  EXPECT_EQ(tok.FindToken("<|im_start|>"), 1);
  EXPECT_EQ(tok.FindToken("<|im_end|>"), 2);
  EXPECT_EQ(tok.FindToken("no such token"), -1);
  EXPECT_EQ(tok.TokenText(0), "<|endoftext|>");
  EXPECT_TRUE(tok.IsSpecial(2));
  EXPECT_FALSE(tok.IsSpecial(100));
  // eos (<|im_end|>) first, then <|endoftext|>.
  EXPECT_EQ(tok.StopTokenIds(), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(tok.Encode("hi", true, true), tok.Encode("hi", false, true));  // no BOS for SmolLM2
}

}  // namespace
}  // namespace icecache
