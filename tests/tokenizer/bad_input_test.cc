// Malformed or unsupported tokenizer inputs give a Status that names the problem.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

using nlohmann::json;

// A minimal valid tokenizer.json: byte-level BPE over "a", "b", "ab".
json MinimalJson() {
  return json::parse(R"({
    "added_tokens": [{"id": 3, "content": "<eos>", "special": true, "normalized": false,
                      "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<eos>": 3},
              "merges": ["a b"]}})");
}

// Expects FromHfJson to fail with `code` and a message containing `needle`.
void ExpectJsonError(const std::string& text, StatusCode code, const std::string& needle) {
  auto r = Tokenizer::FromHfJson(text, "");
  ASSERT_FALSE(r.ok()) << "accepted: " << text.substr(0, 200);
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(BadInputTest, MinimalJsonLoads) {
  auto r = Tokenizer::FromHfJson(MinimalJson().dump(), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value()->Encode("abba<eos>", false, true), (std::vector<int32_t>{2, 1, 0, 3}));
  // As text, "<eos>" has no known characters and no unknown token: dropped, as in HF.
  EXPECT_EQ(r.value()->Encode("abba<eos>", false, false), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(r.value()->eos_id(), 3);
}

TEST(BadInputTest, MalformedJson) {
  ExpectJsonError("{\"model\": ", StatusCode::kCorrupt, "not valid JSON");
  ExpectJsonError("[1, 2]", StatusCode::kCorrupt, "JSON object");
  ExpectJsonError("{}", StatusCode::kCorrupt, "missing \"model\"");
}

TEST(BadInputTest, ModelProblems) {
  json j = MinimalJson();
  j["model"]["type"] = "Unigram";
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "'Unigram'");
  j = MinimalJson();
  j["model"].erase("vocab");
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "vocab");
  j = MinimalJson();
  j["model"]["vocab"]["a"] = "zero";
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "vocab[\"a\"]");
  j = MinimalJson();
  j["model"]["merges"] = json::array({"a c"});
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "'c' is not in the vocabulary");
  j = MinimalJson();
  j["model"]["merges"] = json::array({"abc"});
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "merges[0]");
  j = MinimalJson();
  j["model"]["unk_token"] = "<unk>";
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "'<unk>'");
  j = MinimalJson();
  j["model"]["continuing_subword_prefix"] = "##";
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "continuing_subword_prefix");
}

TEST(BadInputTest, UnknownComponentsAreNamed) {
  json j = MinimalJson();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "ByteLevel"}, {"type": "Whitespace"}]})");
  ExpectJsonError(j.dump(), StatusCode::kUnsupported,
                  "pretokenizers[1]: pre-tokenizer type 'Whitespace'");
  j = MinimalJson();
  j["normalizer"] = json::parse(R"({"type": "BertNormalizer"})");
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "normalizer type 'BertNormalizer'");
  j = MinimalJson();
  j["decoder"] = json::parse(R"({"type": "WordPiece"})");
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "decoder type 'WordPiece'");
  j = MinimalJson();
  j["post_processor"] = json::parse(R"({"type": "Mystery"})");
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "post-processor type 'Mystery'");
  j = MinimalJson();
  j["pre_tokenizer"] = json::parse(R"({"no_type": 1})");
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "pre_tokenizer: missing \"type\"");
}

TEST(BadInputTest, BadFieldsAreNamed) {
  json j = MinimalJson();
  j["pre_tokenizer"] = json::parse(
      R"({"type": "Split", "pattern": {"Regex": "(open"}, "behavior": "Isolated", "invert": false})");
  ExpectJsonError(j.dump(), StatusCode::kInvalidArgument, "(open");
  j = MinimalJson();
  j["pre_tokenizer"] = json::parse(
      R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": false})");
  ExpectJsonError(j.dump(), StatusCode::kUnsupported, "'Sideways'");
  j = MinimalJson();
  j["pre_tokenizer"]["add_prefix_space"] = "yes";
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "add_prefix_space");
  j = MinimalJson();
  j["added_tokens"][0].erase("content");
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "added_tokens[0]");
  j = MinimalJson();
  j["added_tokens"] = "none";
  ExpectJsonError(j.dump(), StatusCode::kCorrupt, "added_tokens");
}

TEST(BadInputTest, MissingFilesAreNotFound) {
  auto r = Tokenizer::FromHfFiles("/nonexistent/tokenizer.json", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
  auto c = Tokenizer::FromHfJson(MinimalJson().dump(), "{bad config");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tokenizer_config.json"), std::string::npos);
}

// GGUF metadata for a byte-level vocabulary of "a", "b", "ab".
GgufWriter Gpt2Writer() {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "default");
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab"}));
  w.Add("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
  return w;
}

// Parses `w` and expects FromGguf to fail with a message containing `needle`.
void ExpectGgufError(const GgufWriter& w, const std::string& needle) {
  const std::vector<uint8_t> bytes = w.Serialize();
  auto gguf = GgufFile::Parse(bytes, "test.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto r = Tokenizer::FromGguf(*gguf.value());
  ASSERT_FALSE(r.ok()) << "accepted; expected an error about " << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(BadInputTest, GgufMinimalLoads) {
  const std::vector<uint8_t> bytes = Gpt2Writer().Serialize();
  auto gguf = GgufFile::Parse(bytes, "test.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  auto r = Tokenizer::FromGguf(*gguf.value());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value()->Encode("abab", false, true), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(r.value()->bos_id(), -1);
}

TEST(BadInputTest, GgufMissingKeysAreNamed) {
  {
    GgufWriter w;
    w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
    ExpectGgufError(w, "tokenizer.ggml.model");
  }
  {
    GgufWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    ExpectGgufError(w, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
    ExpectGgufError(w, "tokenizer.ggml.merges");
  }
  {
    GgufWriter w;
    w.AddString("tokenizer.ggml.model", "llama");
    w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
    ExpectGgufError(w, "tokenizer.ggml.scores");
  }
}

TEST(BadInputTest, GgufBadValuesAreNamed) {
  {
    GgufWriter w = Gpt2Writer();
    w.AddString("tokenizer.ggml.model", "bert");
    ExpectGgufError(w, "'bert'");
  }
  {
    GgufWriter w = Gpt2Writer();
    w.AddString("tokenizer.ggml.pre", "mystery-pre");
    ExpectGgufError(w, "'mystery-pre'");
  }
  {
    GgufWriter w = Gpt2Writer();
    w.Add("tokenizer.ggml.token_type", GgufValue::IntArray(GgufType::kInt32, {1, 1}));
    ExpectGgufError(w, "tokenizer.ggml.token_type");
  }
  {
    GgufWriter w = Gpt2Writer();
    w.AddU32("tokenizer.ggml.eos_token_id", 7);
    ExpectGgufError(w, "tokenizer.ggml.eos_token_id");
  }
  {
    GgufWriter w = Gpt2Writer();
    w.Add("tokenizer.ggml.merges", GgufValue::StringArray({"a c"}));
    ExpectGgufError(w, "'c'");
  }
  {
    GgufWriter w = Gpt2Writer();
    w.Add("tokenizer.ggml.tokens", GgufValue::Int(GgufType::kUint32, 3));
    ExpectGgufError(w, "tokenizer.ggml.tokens");
  }
}

TEST(BadInputTest, InvalidUtf8IsRepairedNotFatal) {
  auto r =
      Tokenizer::FromHfFiles(testing::DataPath("tokenizer/bytelevel_flags.tokenizer.json"), "");
  ASSERT_TRUE(r.ok());
  const Tokenizer& tok = *r.value();
  // Invalid bytes are read as U+FFFD, one per maximal invalid subpart.
  EXPECT_EQ(tok.Encode("a\xFF"
                       "b\xE4\xBD",
                       false, true),
            tok.Encode("a\xEF\xBF\xBD"
                       "b\xEF\xBF\xBD",
                       false, true));
  // Unknown ids are skipped by Decode and give no bytes.
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{-5, 100000}), "");
  EXPECT_EQ(tok.TokenBytes(100000, -1), "");
  EXPECT_EQ(tok.TokenText(-1), "");
}

}  // namespace
}  // namespace icecache
