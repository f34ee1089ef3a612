// Shared helpers of the tokenizer tests: the committed fixtures of tests/data/tokenizer/ (made by
// tools/reference/make_tokenizer_fixtures.py from Hugging Face tokenizers and sentencepiece).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "testing/paths.h"
#include "tokenizer/tokenizer.h"

namespace icecache::tok_test {

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json LoadFixture(const std::string& name) {
  return nlohmann::json::parse(ReadFileOrDie(testing::DataPath("tokenizer/" + name)));
}

inline std::vector<std::string> Corpus() {
  return LoadFixture("corpus.json")["texts"].get<std::vector<std::string>>();
}

// A GGUF parsed from bytes held alongside it.
struct InMemoryGguf {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

// The SentencePiece fixture model as a GGUF: spm_gguf_metadata.json (tokenizer.ggml.* keys as a
// converter writes them) serialized with GgufWriter.
inline std::unique_ptr<InMemoryGguf> SpmGguf() {
  const nlohmann::json meta = LoadFixture("spm_gguf_metadata.json");
  GgufWriter w;
  for (const auto& [key, v] : meta.items()) {
    if (v.is_string()) {
      w.AddString(key, v.get<std::string>());
    } else if (v.is_boolean()) {
      w.AddBool(key, v.get<bool>());
    } else if (v.is_number_integer()) {
      w.AddU32(key, v.get<uint32_t>());
    } else if (v.is_array() && !v.empty() && v[0].is_string()) {
      w.Add(key, GgufValue::StringArray(v.get<std::vector<std::string>>()));
    } else if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
      w.Add(key, GgufValue::IntArray(GgufType::kInt32, v.get<std::vector<int64_t>>()));
    } else if (v.is_array()) {
      w.Add(key, GgufValue::FloatArray(GgufType::kFloat32, v.get<std::vector<double>>()));
    }
  }
  auto g = std::make_unique<InMemoryGguf>();
  g->bytes = w.Serialize();
  auto r = GgufFile::Parse(g->bytes, "spm_bpe.gguf");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  g->file = std::move(r).value();
  return g;
}

// Escaped form of a text for failure messages.
inline std::string Show(const std::string& s) { return nlohmann::json(s).dump(); }

// Compares Encode (parse_special on and off) and Decode with the expectations of `exp`
// ("ids", "ids_plain", "decoded", "decoded_skip", optionally "ids_with_bos").
inline void ExpectMatchesReference(const Tokenizer& tok, const std::vector<std::string>& texts,
                                   const nlohmann::json& exp) {
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": " + Show(texts[i]));
    const auto ids = exp["ids"][i].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.Encode(texts[i], false, true), ids);
    EXPECT_EQ(tok.Encode(texts[i], false, false), exp["ids_plain"][i].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.Decode(ids, false), exp["decoded"][i].get<std::string>());
    EXPECT_EQ(tok.Decode(ids, true), exp["decoded_skip"][i].get<std::string>());
    if (exp.contains("ids_with_bos")) {
      EXPECT_EQ(tok.Encode(texts[i], true, true),
                exp["ids_with_bos"][i].get<std::vector<int32_t>>());
    }
  }
}

}  // namespace icecache::tok_test
