// The tiny random-weight models written by tests/testing/tiny_model.cc against the reference
// fixtures of tools/reference/make_fixtures.py: the C++ weights are bit-identical to the Python
// ones, the Hugging Face folder matches what transformers loaded, and the GGUF round-trips.
#include "testing/tiny_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/quant.h"
#include "model/gguf/gguf_file.h"
#include "model/safetensors/safetensors_file.h"
#include "testing/paths.h"

namespace icecache::testing {

// Names the parameter in gtest output instead of dumping its bytes.
void PrintTo(const TinyModelSpec& spec, std::ostream* os) { *os << spec.name; }

namespace {

using nlohmann::json;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json ReadFixture(const std::string& model) {
  const std::string path = DataPath("reference/" + model + ".json");
  json j = json::parse(ReadText(path), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not JSON";
  return j;
}

uint64_t Hex(const json& v) { return std::stoull(v.get<std::string>(), nullptr, 16); }

uint64_t BytesFnv(const void* p, size_t n) {
  return Fnv1a64(std::span<const uint8_t>(static_cast<const uint8_t*>(p), n));
}

std::vector<float> Dequantize(const GgufTensorInfo& t) {
  const std::vector<int64_t> shape = t.Shape();
  const int64_t cols = shape.back();
  const int64_t rows = static_cast<int64_t>(t.nbytes / RowBytes(t.dtype, cols));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t.dtype, t.data + r * RowBytes(t.dtype, cols), out.data() + r * cols, cols);
  }
  return out;
}

class TinyModelTest : public ::testing::TestWithParam<TinyModelSpec> {};

std::string SpecName(const ::testing::TestParamInfo<TinyModelSpec>& info) {
  return info.param.name;
}

TEST(TinyModelGenerator, KnownVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafull);  // first output of splitmix64 seeded with 0
  float v[2];
  FillTinyTensor("model.norm.weight", TinyTensorKind::kNorm, 0, v);
  for (float x : v) EXPECT_TRUE(x >= 0.875f && x <= 1.125f) << x;
  FillTinyTensor("x_proj.weight", TinyTensorKind::kProjection, 0, v);
  for (float x : v) EXPECT_TRUE(x >= -0.125f && x < 0.125f) << x;
  EXPECT_FALSE(TinyTensorKindOf("model.rotary_emb.inv_freq").ok());
}

TEST(TinyModelGenerator, PermutationRoundTrips) {
  const int64_t n_head = 3, d = 8, rows = n_head * d, cols = 5;
  std::vector<float> src(rows * cols), perm(src.size()), back(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  LlamaPermuteQkRows(src.data(), perm.data(), rows, cols, n_head);
  // Head 1, GGUF row 2j+s = HF row s*d/2 + j: row 8+3 (j=1, s=1) comes from HF row 8+4+1.
  EXPECT_EQ(perm[(8 + 3) * cols], src[(8 + 5) * cols]);
  EXPECT_EQ(perm[(8 + 2) * cols], src[(8 + 1) * cols]);
  LlamaUnpermuteQkRows(perm.data(), back.data(), rows, cols, n_head);
  EXPECT_EQ(back, src);
}

TEST(TinyModelGenerator, TokenizerConfigPath) {
  EXPECT_EQ(TokenizerConfigPathFor("/a/tokenizer.json"), "/a/tokenizer_config.json");
  EXPECT_EQ(TokenizerConfigPathFor("/a/tiny_tok_qwen2.json"), "/a/tiny_tok_qwen2_config.json");
}

TEST(TinyModelGenerator, RejectsBadSpecs) {
  TinyModelSpec s = TinyQwen2Spec();
  s.arch = "gpt2";
  EXPECT_FALSE(ValidateTinyModelSpec(s).ok());
  s = TinyQwen2Spec();
  s.head_dim = 128;  // only qwen3 may have head_dim != hidden / heads
  EXPECT_FALSE(ValidateTinyModelSpec(s).ok());
  s = TinyQwen2Spec();
  const std::string dir = MakeTempDir("tiny-bad");
  EXPECT_FALSE(WriteTinyHfModel(s, dir, dir + "/missing.json").ok());
  EXPECT_FALSE(WriteTinyGgufModel(s, dir + "/m.gguf", dir + "/missing.json", DType::kF32).ok());
}

TEST_P(TinyModelTest, SpecMatchesFixture) {
  const TinyModelSpec& spec = GetParam();
  const json fx = ReadFixture(spec.name);
  Result<TinyModelSpec> parsed = ParseTinyModelSpec(fx.at("spec").dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(*parsed == spec) << "tests/testing/tiny_model.cc and tools/reference/tiny_spec.py "
                                  "disagree on "
                               << spec.name << ": " << fx.at("spec").dump();
  EXPECT_TRUE(ValidateTinyModelSpec(spec).ok());
  EXPECT_EQ(fx.at("tokenizer").get<std::string>() + ".json",
            std::filesystem::path(TinyTokenizerPath(spec)).filename().string());
}

// (a) The safetensors weights are bit-identical to the Python generator's (fnv1a64 of the f32
// bytes), and config.json equals the one transformers loaded.
TEST_P(TinyModelTest, HfFolderMatchesPython) {
  const TinyModelSpec& spec = GetParam();
  const json fx = ReadFixture(spec.name);
  const std::string dir = MakeTempDir("tiny-hf-" + spec.name);
  Status st = WriteTinyHfModel(spec, dir, TinyTokenizerPath(spec));
  ASSERT_TRUE(st.ok()) << st.ToString();

  const json config = json::parse(ReadText(dir + "/config.json"));
  EXPECT_EQ(config, fx.at("hf_config")) << config.dump(1);
  EXPECT_EQ(ReadText(dir + "/tokenizer.json"), ReadText(TinyTokenizerPath(spec)));
  EXPECT_EQ(ReadText(dir + "/tokenizer_config.json"),
            ReadText(TokenizerConfigPathFor(TinyTokenizerPath(spec))));

  Result<std::unique_ptr<HfCheckpoint>> ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const json& tensors = fx.at("tensors");
  EXPECT_EQ((*ckpt)->AllTensors().size(), tensors.size());
  for (const auto& [name, ref] : tensors.items()) {
    const SafetensorsTensorInfo* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::kF32) << name;
    EXPECT_EQ(t->shape, ref.at("shape").get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(BytesFnv(t->data, t->nbytes), Hex(ref.at("fnv1a64"))) << name;
    std::vector<float> v(t->nbytes / sizeof(float));
    std::memcpy(v.data(), t->data, t->nbytes);
    double sum = 0;
    for (float x : v) sum += x;
    EXPECT_NEAR(sum, ref.at("sum").get<double>(), 1e-9 * static_cast<double>(v.size())) << name;
  }
}

// (b) The F32 GGUF holds the fixture's GGUF-layout tensors bit for bit (so the llama Q/K
// permutation equals the Python one, which transformers' GGUF loader undoes exactly), and undoing
// the permutation gives the safetensors weights back.
TEST_P(TinyModelTest, GgufF32RoundTrips) {
  const TinyModelSpec& spec = GetParam();
  const json fx = ReadFixture(spec.name);
  const std::string dir = MakeTempDir("tiny-gguf-" + spec.name);
  const std::string path = dir + "/model.gguf";
  Status st = WriteTinyGgufModel(spec, path, TinyTokenizerPath(spec), DType::kF32);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Result<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const GgufFile& g = **opened;

  const json& ref_tensors = fx.at("gguf_f32_tensors");
  const size_t extra = spec.rope_scaling ? 1 : 0;
  EXPECT_EQ(g.tensors().size(), ref_tensors.size() + extra);
  for (const auto& [name, ref] : ref_tensors.items()) {
    const GgufTensorInfo* t = g.FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->dtype, DType::kF32) << name;
    EXPECT_EQ(t->Shape(), ref.at("shape").get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(BytesFnv(t->data, t->nbytes), Hex(ref.at("fnv1a64"))) << name;
  }
  for (const TinyTensor& hf : TinyHfTensors(spec)) {
    Result<std::string> name = GgufTensorName(hf.name);
    ASSERT_TRUE(name.ok());
    const GgufTensorInfo* t = g.FindTensor(*name);
    ASSERT_NE(t, nullptr) << *name;
    std::vector<float> got = Dequantize(*t);
    const bool q = hf.name.ends_with("q_proj.weight"), k = hf.name.ends_with("k_proj.weight");
    if (spec.arch == "llama" && (q || k)) {
      std::vector<float> unpermuted(got.size());
      LlamaUnpermuteQkRows(got.data(), unpermuted.data(), hf.shape[0], hf.shape[1],
                           q ? spec.heads : spec.kv_heads);
      got = std::move(unpermuted);
    }
    EXPECT_EQ(got, TinyTensorData(spec, hf)) << hf.name;
  }
  if (spec.rope_scaling) {
    const GgufTensorInfo* t = g.FindTensor("rope_freqs.weight");
    ASSERT_NE(t, nullptr);
    const std::vector<float> got = Dequantize(*t);
    const std::vector<double> ref = fx.at("rope_freqs").get<std::vector<double>>();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6 * ref[i]) << i;
  } else {
    EXPECT_EQ(g.FindTensor("rope_freqs.weight"), nullptr);
  }
  EXPECT_EQ(g.FindTensor("output.weight") != nullptr, !spec.tie_word_embeddings);
}

TEST_P(TinyModelTest, GgufMetadata) {
  const TinyModelSpec& spec = GetParam();
  const std::string dir = MakeTempDir("tiny-gguf-meta-" + spec.name);
  const std::string path = dir + "/model.gguf";
  ASSERT_TRUE(WriteTinyGgufModel(spec, path, TinyTokenizerPath(spec), DType::kQ8_0).ok());
  Result<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const GgufFile& g = **opened;
  const std::string a = spec.arch;
  auto int_key = [&](const std::string& key) {
    Result<int64_t> v = g.GetInt(key);
    EXPECT_TRUE(v.ok()) << key;
    return v.ok() ? *v : -1;
  };
  auto float_key = [&](const std::string& key) {
    Result<double> v = g.GetFloat(key);
    EXPECT_TRUE(v.ok()) << key;
    return v.ok() ? *v : -1.0;
  };
  EXPECT_EQ(*g.GetString("general.architecture"), a);
  EXPECT_EQ(int_key(a + ".block_count"), spec.layers);
  EXPECT_EQ(int_key(a + ".embedding_length"), spec.hidden);
  EXPECT_EQ(int_key(a + ".feed_forward_length"), spec.ffn);
  EXPECT_EQ(int_key(a + ".attention.head_count"), spec.heads);
  EXPECT_EQ(int_key(a + ".attention.head_count_kv"), spec.kv_heads);
  EXPECT_EQ(int_key(a + ".context_length"), spec.max_position_embeddings);
  EXPECT_EQ(float_key(a + ".rope.freq_base"), static_cast<float>(spec.rope_theta));
  EXPECT_EQ(float_key(a + ".attention.layer_norm_rms_epsilon"), static_cast<float>(spec.rms_eps));
  EXPECT_EQ(g.Find(a + ".attention.key_length") != nullptr, a == "qwen3");
  if (a == "qwen3") {
    EXPECT_EQ(int_key(a + ".attention.key_length"), spec.head_dim);
  }
  EXPECT_EQ(int_key("general.file_type"), 7);  // MOSTLY_Q8_0

  // Tokenizer metadata against the tokenizer files.
  const json tok = json::parse(ReadText(TinyTokenizerPath(spec)));
  const json cfg = json::parse(ReadText(TokenizerConfigPathFor(TinyTokenizerPath(spec))));
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*g.GetString("tokenizer.ggml.pre"), a == "llama" ? "llama-bpe" : "qwen2");
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_NE(tokens->AsStringArray(), nullptr);
  const std::vector<std::string>& vocab = *tokens->AsStringArray();
  ASSERT_EQ(static_cast<int64_t>(vocab.size()), spec.vocab);
  std::optional<std::vector<int64_t>> types = g.Find("tokenizer.ggml.token_type")->AsIntArray();
  ASSERT_TRUE(types.has_value());
  for (const auto& [text, id] : tok.at("model").at("vocab").items()) {
    ASSERT_EQ(vocab[id.get<int64_t>()], text);
    EXPECT_EQ((*types)[id.get<int64_t>()], 1);
  }
  std::map<std::string, int64_t> special;
  for (const json& t : tok.at("added_tokens")) {
    const int64_t id = t.at("id").get<int64_t>();
    EXPECT_EQ(vocab[id], t.at("content").get<std::string>());
    EXPECT_EQ((*types)[id], 3) << "special added tokens are CONTROL";
    special[t.at("content").get<std::string>()] = id;
  }
  const GgufValue* merges = g.Find("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->AsStringArray()->size(), tok.at("model").at("merges").size());
  const json& m0 = tok.at("model").at("merges")[0];
  EXPECT_EQ(merges->AsStringArray()->front(),
            m0.is_string() ? m0.get<std::string>()
                           : m0[0].get<std::string>() + " " + m0[1].get<std::string>());
  const std::string bos = a == "llama" ? "<|begin_of_text|>" : "<|endoftext|>";
  const std::string eos = cfg.at("eos_token").get<std::string>();
  EXPECT_EQ(int_key("tokenizer.ggml.bos_token_id"), special.at(bos));
  EXPECT_EQ(int_key("tokenizer.ggml.eos_token_id"), special.at(eos));
  EXPECT_EQ(*g.GetBool("tokenizer.ggml.add_bos_token", !cfg.at("add_bos_token").get<bool>()),
            cfg.at("add_bos_token").get<bool>());
  EXPECT_EQ(*g.GetString("tokenizer.chat_template"), cfg.at("chat_template").get<std::string>());
}

// Quantized GGUFs: every matrix is stored as the requested type, bytes equal QuantizeRow of the
// (permuted) weights, and dequantizing is close to the F32 weights; norms and biases stay F32.
TEST_P(TinyModelTest, GgufQuantized) {
  const TinyModelSpec& spec = GetParam();
  for (DType dtype : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const std::string dir = MakeTempDir("tiny-gguf-q-" + spec.name);
    const std::string path = dir + "/model.gguf";
    Status st = WriteTinyGgufModel(spec, path, TinyTokenizerPath(spec), dtype);
    ASSERT_TRUE(st.ok()) << st.ToString();
    Result<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    for (const TinyTensor& hf : TinyHfTensors(spec)) {
      const GgufTensorInfo* t = (*opened)->FindTensor(*GgufTensorName(hf.name));
      ASSERT_NE(t, nullptr) << hf.name;
      if (hf.shape.size() == 1) {
        EXPECT_EQ(t->dtype, DType::kF32) << hf.name;
        continue;
      }
      ASSERT_EQ(t->dtype, dtype) << hf.name;
      std::vector<float> w = TinyTensorData(spec, hf);
      const bool q = hf.name.ends_with("q_proj.weight"), k = hf.name.ends_with("k_proj.weight");
      if (spec.arch == "llama" && (q || k)) {
        std::vector<float> permuted(w.size());
        LlamaPermuteQkRows(w.data(), permuted.data(), hf.shape[0], hf.shape[1],
                           q ? spec.heads : spec.kv_heads);
        w = std::move(permuted);
      }
      const int64_t cols = hf.shape[1];
      std::vector<uint8_t> row(RowBytes(dtype, cols));
      for (int64_t r = 0; r < hf.shape[0]; ++r) {
        QuantizeRow(dtype, w.data() + r * cols, row.data(), cols);
        ASSERT_EQ(std::memcmp(row.data(), t->data + r * row.size(), row.size()), 0)
            << hf.name << " row " << r;
      }
      const std::vector<float> got = Dequantize(*t);
      double err2 = 0, ref2 = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        err2 += (got[i] - w[i]) * static_cast<double>(got[i] - w[i]);
        ref2 += w[i] * static_cast<double>(w[i]);
      }
      const double rel_rmse = std::sqrt(err2 / ref2);
      const double bound = dtype == DType::kF16 ? 1e-3 : dtype == DType::kQ8_0 ? 0.01 : 0.12;
      EXPECT_LT(rel_rmse, bound) << hf.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyModelTest, ::testing::ValuesIn(AllTinySpecs()), SpecName);

}  // namespace
}  // namespace icecache::testing
