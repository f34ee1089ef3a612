// StreamDecoder: streamed pieces add up to Decode, incomplete UTF-8 is held back, and invalid
// bytes become U+FFFD.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace icecache {
namespace {

// A tokenizer.json fixture, or "spm_bpe.gguf" for the in-memory SentencePiece GGUF.
std::unique_ptr<Tokenizer> Load(const std::string& name) {
  if (name == "spm_bpe.gguf") {
    auto gguf = tok_test::SpmGguf();
    if (gguf == nullptr) return nullptr;
    auto r = Tokenizer::FromGguf(*gguf->file);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  auto r = Tokenizer::FromHfFiles(testing::DataPath("tokenizer/" + name), "");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids,
                   std::vector<std::string>* pieces = nullptr) {
  StreamDecoder dec(tok);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = dec.Push(id);
    EXPECT_TRUE(tok::IsValidUtf8(piece));
    if (pieces) pieces->push_back(piece);
    out += piece;
  }
  return out + dec.Flush();
}

TEST(StreamDecoderTest, StreamEqualsDecodeOnCorpus) {
  for (const char* name : {"bytelevel_flags.tokenizer.json", "spm_legacy.tokenizer.json",
                           "spm_metaspace.tokenizer.json", "spm_bpe.gguf"}) {
    SCOPED_TRACE(name);
    auto tok = Load(name);
    ASSERT_NE(tok, nullptr);
    for (const std::string& text : tok_test::Corpus()) {
      const auto ids = tok->Encode(text, false, true);
      EXPECT_EQ(Stream(*tok, ids), tok->Decode(ids)) << tok_test::Show(text);
    }
  }
}

TEST(StreamDecoderTest, SmolLm2StreamEqualsDecode) {
  const std::string path = testing::DefaultModelPath();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found";
  auto gguf = GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok());
  auto tok = Tokenizer::FromGguf(*gguf.value());
  ASSERT_TRUE(tok.ok());
  for (const std::string& text : tok_test::Corpus()) {
    const auto ids = tok.value()->Encode(text, false, true);
    EXPECT_EQ(Stream(*tok.value(), ids), text) << tok_test::Show(text);
  }
}

TEST(StreamDecoderTest, HoldsBackIncompleteCharacters) {
  auto tok = Load("spm_bpe.gguf");
  ASSERT_NE(tok, nullptr);
  // "▁" then the three byte tokens of U+4F60.
  const auto ids = tok->Encode("a 你", false, false);
  std::vector<std::string> pieces;
  EXPECT_EQ(Stream(*tok, ids, &pieces), "a 你");
  ASSERT_GE(pieces.size(), 3u);
  EXPECT_EQ(pieces[pieces.size() - 1], "你");
  EXPECT_EQ(pieces[pieces.size() - 2], "");
  EXPECT_EQ(pieces[pieces.size() - 3], "");
}

TEST(StreamDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  auto tok = Load("spm_bpe.gguf");
  ASSERT_NE(tok, nullptr);
  const int32_t lead = tok->FindToken("<0xE4>");
  const int32_t cont = tok->FindToken("<0xBD>");
  const int32_t x = tok->FindToken("x");
  ASSERT_GE(lead, 0);
  ASSERT_GE(cont, 0);
  ASSERT_GE(x, 0);
  StreamDecoder dec(*tok);
  EXPECT_EQ(dec.Push(cont), "\xEF\xBF\xBD");  // a lone continuation byte
  EXPECT_EQ(dec.Push(lead), "");              // could still become valid
  EXPECT_EQ(dec.Push(x), "\xEF\xBF\xBDx");    // it did not
  EXPECT_EQ(dec.Push(lead), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");  // cut off at the end
  EXPECT_EQ(dec.Flush(), "");
}

TEST(StreamDecoderTest, TokenBytesAfterFirstKeepsLeadingSpace) {
  auto tok = Load("spm_bpe.gguf");
  ASSERT_NE(tok, nullptr);
  const auto ids = tok->Encode("hello world", false, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(tok->TokenBytes(ids[0], -1).front(), 'h');  // the prefix space is stripped first
  EXPECT_EQ(tok->TokenBytes(ids.back(), ids[0]).front(), ' ');
  // A stream that continues after a prompt keeps the space.
  StreamDecoder after_prompt(*tok, ids[0]);
  EXPECT_EQ(after_prompt.Push(ids[0]).front(), ' ');
  StreamDecoder fresh(*tok);
  EXPECT_EQ(fresh.Push(ids[0]).front(), 'h');
}

}  // namespace
}  // namespace icecache
