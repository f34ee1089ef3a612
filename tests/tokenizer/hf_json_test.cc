// tokenizer.json files checked against Hugging Face tokenizers: a small byte-level BPE with
// added-token flags, and SentencePiece BPE models converted by transformers.
#include <gtest/gtest.h>

#include <thread>

#include "fixtures.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

using tok_test::Corpus;
using tok_test::LoadFixture;

std::unique_ptr<Tokenizer> LoadJsonTokenizer(const std::string& name) {
  auto r = Tokenizer::FromHfFiles(testing::DataPath("tokenizer/" + name), "");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(HfJsonTest, ByteLevelWithAddedTokenFlagsMatchesHf) {
  auto tok = LoadJsonTokenizer("bytelevel_flags.tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), tok->FindToken("<bos>"));
  EXPECT_EQ(tok->vocab_size(), 605);
  EXPECT_TRUE(tok->IsSpecial(tok->FindToken("<mask>")));
  EXPECT_FALSE(tok->IsSpecial(tok->FindToken("[WORD]")));
  tok_test::ExpectMatchesReference(*tok, Corpus(), LoadFixture("bytelevel_flags.expected.json"));
}

TEST(HfJsonTest, SentencePieceLegacyFormMatchesHfAndSentencePiece) {
  auto tok = LoadJsonTokenizer("spm_legacy.tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePieceBpe);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->adds_bos());
  const auto texts = Corpus();
  const auto exp = LoadFixture("spm.expected.json");
  tok_test::ExpectMatchesReference(*tok, texts, exp["legacy"]);
  // With special tokens read as text, the legacy form is exactly SentencePiece.
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok->Encode(texts[i], false, false), exp["sp_ids"][i].get<std::vector<int32_t>>())
        << tok_test::Show(texts[i]);
  }
}

TEST(HfJsonTest, SentencePieceMetaspaceFormMatchesHf) {
  auto tok = LoadJsonTokenizer("spm_metaspace.tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePieceBpe);
  tok_test::ExpectMatchesReference(*tok, Corpus(), LoadFixture("spm.expected.json")["metaspace"]);
}

TEST(HfJsonTest, ConfigSetsBosEosAndAddBos) {
  const std::string json =
      tok_test::ReadFileOrDie(testing::DataPath("tokenizer/spm_legacy.tokenizer.json"));
  auto r = Tokenizer::FromHfJson(
      json, R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": false})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& tok = *r.value();
  EXPECT_FALSE(tok.adds_bos());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.Encode("hello", true, true), tok.Encode("hello", false, true));
  auto with_eos = Tokenizer::FromHfJson(json, R"({"add_eos_token": true, "eos_token": "</s>"})");
  ASSERT_TRUE(with_eos.ok());
  const auto ids = with_eos.value()->Encode("hello", true, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(HfJsonTest, DecodeRoundTripsPlainText) {
  auto tok = LoadJsonTokenizer("bytelevel_flags.tokenizer.json");
  ASSERT_NE(tok, nullptr);
  // Byte-level BPE without normalization changes is lossless; NFKC and the "-" removal are not,
  // so use text they leave alone.
  for (std::string text : {"Hello world", "tabs\tand\nnewlines  ", "日本語 テキスト 🎉"}) {
    // add_prefix_space puts a space in front.
    EXPECT_EQ(tok->Decode(tok->Encode(text, false, false)), " " + text);
  }
}

TEST(HfJsonTest, ConcurrentEncodeMatchesReference) {
  auto tok = LoadJsonTokenizer("bytelevel_flags.tokenizer.json");
  ASSERT_NE(tok, nullptr);
  const auto texts = Corpus();
  const auto exp = LoadFixture("bytelevel_flags.expected.json");
  // Encode shares the word cache between threads.
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = t; i < texts.size() + t; ++i) {
          const size_t k = i % texts.size();
          if (tok->Encode(texts[k], false, true) != exp["ids"][k].get<std::vector<int32_t>>()) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace icecache
