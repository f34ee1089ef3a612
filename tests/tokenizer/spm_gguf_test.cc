// A SentencePiece BPE model (byte fallback) as a tokenizer-only GGUF ("llama" model: scores and
// token types, built in memory from spm_gguf_metadata.json), checked against sentencepiece itself
// and against Hugging Face's Llama-2 form.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

std::unique_ptr<Tokenizer> LoadSpmGguf() {
  auto gguf = tok_test::SpmGguf();
  if (gguf == nullptr) return nullptr;
  auto r = Tokenizer::FromGguf(*gguf->file);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(SpmGgufTest, MatchesSentencePiece) {
  auto tok = LoadSpmGguf();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePieceBpe);
  EXPECT_EQ(tok->vocab_size(), 2000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->adds_bos());
  const auto texts = tok_test::Corpus();
  const auto exp = tok_test::LoadFixture("spm.expected.json");
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(tok_test::Show(texts[i]));
    EXPECT_EQ(tok->Encode(texts[i], false, false), exp["sp_ids"][i].get<std::vector<int32_t>>());
    EXPECT_EQ(tok->Encode(texts[i], true, false),
              exp["sp_ids_with_bos"][i].get<std::vector<int32_t>>());
  }
}

TEST(SpmGgufTest, SpecialTokensAndDecodeMatchHfLlama2Form) {
  auto tok = LoadSpmGguf();
  ASSERT_NE(tok, nullptr);
  tok_test::ExpectMatchesReference(*tok, tok_test::Corpus(),
                                   tok_test::LoadFixture("spm.expected.json")["legacy"]);
}

TEST(SpmGgufTest, ByteFallbackAndDecode) {
  auto tok = LoadSpmGguf();
  ASSERT_NE(tok, nullptr);
  // CJK characters are not in this small vocabulary: each becomes three <0xXX> byte tokens.
  const auto ids = tok->Encode("你", false, false);
  ASSERT_EQ(ids.size(), 4u);  // "▁" then three bytes
  EXPECT_EQ(tok->TokenText(ids[1]), "<0xE4>");
  EXPECT_EQ(tok->Decode(ids), "你");
  // The space the normalizer added is stripped once; inner spaces survive.
  EXPECT_EQ(tok->Decode(tok->Encode("  two  spaces ", false, false)), "  two  spaces ");
  // A lone continuation byte token decodes to U+FFFD (one per byte, as Hugging Face does).
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{ids[2]}), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace icecache
