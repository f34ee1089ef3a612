// GGUF writer -> reader round trips, metadata access, and the real default model.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/quant.h"
#include "format_test_util.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "testing/paths.h"

namespace icecache {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Random bytes are fine for the block formats' payload, but the scales must stay finite so that
// comparisons of dequantized values are meaningful; here only bytes are compared.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

std::vector<TensorSpec> EveryDTypeTensors() {
  return {
      {"f32.2d", DType::kF32, {3, 64}},    {"f16.2d", DType::kF16, {2, 32}},
      {"bf16.2d", DType::kBF16, {4, 32}},  {"q8_0.2d", DType::kQ8_0, {2, 64}},
      {"q4_0.2d", DType::kQ4_0, {5, 32}},  {"q4_1.2d", DType::kQ4_1, {1, 96}},
      {"q4_k.2d", DType::kQ4_K, {2, 256}}, {"q5_k.2d", DType::kQ5_K, {3, 256}},
      {"q6_k.2d", DType::kQ6_K, {1, 512}}, {"i32.1d", DType::kI32, {7}},
      {"f32.3d", DType::kF32, {2, 3, 4}},  {"f32.4d", DType::kF32, {2, 1, 3, 8}},
      {"f32.1d", DType::kF32, {5}},
  };
}

int64_t NBytes(const TensorSpec& s) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < s.shape.size(); ++i) rows *= s.shape[i];
  return rows * RowBytes(s.dtype, s.shape.back());
}

void AddEveryValueType(GgufWriter& w) {
  w.Add("u8", GgufValue::Int(GgufType::kUint8, 200));
  w.Add("i8", GgufValue::Int(GgufType::kInt8, -5));
  w.Add("u16", GgufValue::Int(GgufType::kUint16, 60000));
  w.Add("i16", GgufValue::Int(GgufType::kInt16, -30000));
  w.AddU32("u32", 4000000000u);
  w.Add("i32", GgufValue::Int(GgufType::kInt32, -7));
  w.AddF32("f32", 0.1f);
  w.AddBool("bool", true);
  w.AddString("str", "h\xc3\xa9llo\nworld");
  w.Add("u64.big", GgufValue::Int(GgufType::kUint64, static_cast<int64_t>(0x8000000000000005ull)));
  w.Add("u64", GgufValue::Int(GgufType::kUint64, 123));
  w.Add("i64", GgufValue::Int(GgufType::kInt64, -(int64_t{1} << 40)));
  w.Add("f64", GgufValue::Float(GgufType::kFloat64, 1e300));
  w.Add("a.str", GgufValue::StringArray({"a", "", "<|im_start|>"}));
  w.Add("a.i32", GgufValue::IntArray(GgufType::kInt32, {1, -2, 3}));
  w.Add("a.u8", GgufValue::IntArray(GgufType::kUint8, {0, 255}));
  w.Add("a.bool", GgufValue::IntArray(GgufType::kBool, {1, 0, 1}));
  w.Add("a.f32", GgufValue::FloatArray(GgufType::kFloat32, {0.5, -1.25}));
  w.Add("a.f64", GgufValue::FloatArray(GgufType::kFloat64, {1e-300, 3.0}));
  w.Add("a.empty", GgufValue::IntArray(GgufType::kUint32, {}));
}

TEST(GgufRoundTrip, EveryValueTypeAndDType) {
  GgufWriter w;
  AddEveryValueType(w);
  std::vector<std::vector<uint8_t>> data;
  for (const TensorSpec& s : EveryDTypeTensors()) {
    data.push_back(RandomBytes(static_cast<size_t>(NBytes(s)), static_cast<uint32_t>(data.size())));
    w.AddTensor(s.name, s.dtype, s.shape, data.back().data());
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  auto r = GgufFile::Parse(bytes, "rt.gguf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), bytes.size());
  ASSERT_EQ(f.metadata().size(), 20u);
  EXPECT_EQ(f.metadata()[0].first, "u8");  // file order kept
  EXPECT_EQ(f.metadata()[19].first, "a.empty");

  EXPECT_EQ(*f.Find("u8")->AsInt(), 200);
  EXPECT_EQ(f.Find("u8")->type(), GgufType::kUint8);
  EXPECT_EQ(*f.Find("i8")->AsInt(), -5);
  EXPECT_EQ(*f.Find("u16")->AsInt(), 60000);
  EXPECT_EQ(*f.Find("i16")->AsInt(), -30000);
  EXPECT_EQ(*f.Find("u32")->AsInt(), 4000000000);
  EXPECT_EQ(*f.Find("i32")->AsInt(), -7);
  EXPECT_EQ(*f.Find("f32")->AsFloat(), static_cast<double>(0.1f));
  EXPECT_FALSE(f.Find("f32")->AsInt().has_value());
  EXPECT_EQ(*f.Find("bool")->AsBool(), true);
  EXPECT_EQ(*f.Find("str")->AsString(), "h\xc3\xa9llo\nworld");
  EXPECT_FALSE(f.Find("u64.big")->AsInt().has_value()) << "above INT64_MAX";
  EXPECT_EQ(*f.Find("u64.big")->AsFloat(), 9223372036854775813.0);
  EXPECT_EQ(f.Find("u64.big")->ToDisplayString(), "9223372036854775813");
  EXPECT_EQ(*f.Find("u64")->AsInt(), 123);
  EXPECT_EQ(*f.Find("i64")->AsInt(), -(int64_t{1} << 40));
  EXPECT_EQ(*f.Find("f64")->AsFloat(), 1e300);
  ASSERT_NE(f.Find("a.str")->AsStringArray(), nullptr);
  EXPECT_EQ(*f.Find("a.str")->AsStringArray(), (std::vector<std::string>{"a", "", "<|im_start|>"}));
  EXPECT_EQ(*f.Find("a.i32")->AsIntArray(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.Find("a.i32")->array_type(), GgufType::kInt32);
  EXPECT_EQ(*f.Find("a.u8")->AsIntArray(), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(*f.Find("a.bool")->AsIntArray(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(*f.Find("a.f32")->AsFloatArray(), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(*f.Find("a.f64")->AsFloatArray(), (std::vector<float>{0.0f, 3.0f}));
  EXPECT_EQ(f.Find("a.empty")->array_size(), 0u);
  EXPECT_TRUE(f.Find("a.empty")->is_array());
  EXPECT_EQ(f.Find("missing"), nullptr);

  const std::vector<TensorSpec> specs = EveryDTypeTensors();
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(specs[i].name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.dtype, specs[i].dtype);
    EXPECT_EQ(t.ggml_type, GgmlTypeId(specs[i].dtype));
    EXPECT_EQ(t.Shape(), specs[i].shape);
    EXPECT_EQ(t.ne.front(), specs[i].shape.back()) << "ggml order is innermost first";
    EXPECT_EQ(static_cast<int64_t>(t.nbytes), NBytes(specs[i]));
    EXPECT_EQ((t.data - bytes.data()) % 32, 0) << "data aligned in the file";
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.nbytes), 0);
    EXPECT_EQ(f.FindTensor(t.name), &t);
    const Tensor view = f.TensorView(t);
    EXPECT_EQ(view.data(), t.data);
    EXPECT_EQ(view.dtype(), t.dtype);
    EXPECT_EQ(std::vector<int64_t>(view.shape().begin(), view.shape().end()), specs[i].shape);
    EXPECT_EQ(view.nbytes(), static_cast<int64_t>(t.nbytes));
  }
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
}

TEST(GgufRoundTrip, CustomAlignmentsPadAndRecordTheAlignment) {
  for (uint64_t alignment : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w(alignment);
    w.AddString("general.architecture", "llama");
    const std::vector<float> a(3 * 32, 1.5f), b(32, -2.0f);
    w.AddTensor("a", DType::kF32, std::vector<int64_t>{3, 32}, a.data());
    w.AddTensor("b", DType::kF16, std::vector<int64_t>{1, 32}, b.data());
    const std::vector<uint8_t> bytes = w.Serialize();
    auto r = GgufFile::Parse(bytes);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)->alignment(), alignment);
    EXPECT_EQ((*r)->Find("general.alignment") != nullptr, alignment != 32);
    for (const GgufTensorInfo& t : (*r)->tensors()) {
      EXPECT_EQ((t.data - bytes.data()) % static_cast<int64_t>(alignment), 0);
    }
    EXPECT_EQ(std::memcmp((*r)->FindTensor("a")->data, a.data(), a.size() * 4), 0);
  }
}

TEST(GgufRoundTrip, AddTensorF32QuantizesEveryType) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> src(2 * 256);
  for (float& v : src) v = normal(rng);
  GgufWriter w;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    w.AddTensorF32(std::string(DTypeName(t)), t, std::vector<int64_t>{2, 256}, src.data());
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  auto r = GgufFile::Parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (const GgufTensorInfo& t : (*r)->tensors()) {
    const Tensor view = (*r)->TensorView(t);
    std::vector<float> y(256);
    double err2 = 0, x2 = 0;
    for (int64_t row = 0; row < 2; ++row) {
      DequantizeRow(t.dtype, view.row(row), y.data(), 256);
      for (int i = 0; i < 256; ++i) {
        const double e = y[i] - src[row * 256 + i];
        err2 += e * e;
        x2 += src[row * 256 + i] * src[row * 256 + i];
      }
    }
    EXPECT_LT(std::sqrt(err2 / x2), 0.15) << t.name;
  }
}

TEST(GgufRoundTrip, VersionTwoReadsLikeVersionThree) {
  GgufWriter w;
  w.AddU32("llama.block_count", 2);
  const std::vector<float> a(32, 1.0f);
  w.AddTensor("a", DType::kF32, std::vector<int64_t>{32}, a.data());
  std::vector<uint8_t> bytes = w.Serialize();
  bytes[4] = 2;  // the version field
  auto r = GgufFile::Parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->version(), 2u);
  EXPECT_EQ(*(*r)->GetInt("llama.block_count"), 2);
  EXPECT_EQ((*r)->tensors().size(), 1u);
}

TEST(GgufRoundTrip, WriteFileAndOpenKeepsTheMappingAliveThroughViews) {
  const std::string dir = testing::MakeTempDir("gguf-rt");
  const std::string path = dir + "/tiny.gguf";
  GgufWriter w;
  w.AddString("general.name", "tiny");
  std::vector<float> a(4 * 32);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  w.AddTensor("a", DType::kF32, std::vector<int64_t>{4, 32}, a.data());
  ASSERT_TRUE(w.WriteFile(path).ok());

  Tensor view;
  {
    auto r = GgufFile::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ((*r)->path(), path);
    EXPECT_EQ(*(*r)->GetString("general.name"), "tiny");
    view = (*r)->TensorView(*(*r)->FindTensor("a"));
    EXPECT_NE(view.keepalive(), nullptr);
  }
  // The GgufFile is gone; the view still holds the mapping.
  EXPECT_EQ(view.data_as<float>()[77], 77.0f);
  EXPECT_EQ(view.Slice(3, 4).data_as<float>()[1], 97.0f);

  const Status bad = w.WriteFile(dir + "/no/such/dir/x.gguf");
  testing::ExpectErrorMentions(bad, {"no/such/dir/x.gguf", "No such file"});
}

TEST(GgufFileTest, OpenMissingFileNamesThePath) {
  auto r = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  testing::ExpectErrorMentions(r.status(), {"/nonexistent/model.gguf", "No such file"});
}

TEST(GgufFileTest, TypedGettersNameFileAndKey) {
  GgufWriter w;
  w.AddString("s", "x");
  w.AddU32("n", 5);
  w.AddF32("f", 2.5f);
  w.AddBool("b", false);
  w.Add("big", GgufValue::Int(GgufType::kUint64, -1));
  const std::vector<uint8_t> bytes = w.Serialize();
  auto r = GgufFile::Parse(bytes, "meta.gguf");
  ASSERT_TRUE(r.ok());
  const GgufFile& f = **r;
  EXPECT_EQ(*f.GetString("s"), "x");
  EXPECT_EQ(*f.GetInt("n"), 5);
  EXPECT_EQ(*f.GetFloat("n"), 5.0) << "integers convert to float";
  EXPECT_EQ(*f.GetFloat("f"), 2.5);
  EXPECT_EQ(*f.GetBool("b", true), false);
  EXPECT_EQ(*f.GetBool("absent", true), true);
  EXPECT_EQ(*f.GetInt("absent", 42), 42);
  EXPECT_EQ(*f.GetFloat("absent", 0.5), 0.5);

  auto missing = f.GetString("general.name");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  testing::ExpectErrorMentions(missing.status(), {"meta.gguf", "general.name", "missing"});
  testing::ExpectErrorMentions(f.GetInt("s").status(), {"meta.gguf", "'s'", "string"});
  testing::ExpectErrorMentions(f.GetString("n").status(), {"'n'", "uint32", "expected a string"});
  testing::ExpectErrorMentions(f.GetFloat("s").status(), {"'s'", "expected a number"});
  testing::ExpectErrorMentions(f.GetBool("n", false).status(), {"'n'", "expected a bool"});
  testing::ExpectErrorMentions(f.GetInt("s", 1).status(), {"'s'"});
  testing::ExpectErrorMentions(f.GetInt("big").status(), {"'big'", "18446744073709551615"});
}

TEST(GgufValueTest, DisplayStrings) {
  EXPECT_EQ(GgufValue::Int(GgufType::kInt32, -3).ToDisplayString(), "-3");
  EXPECT_EQ(GgufValue::Bool(true).ToDisplayString(), "true");
  EXPECT_EQ(GgufValue::Float(GgufType::kFloat32, 1e-5).ToDisplayString(), "1e-05");
  EXPECT_EQ(GgufValue::String("a\nb").ToDisplayString(), "a\\nb");
  EXPECT_EQ(GgufValue::String(std::string(100, 'x')).ToDisplayString(10), "xxxxxxxxxx...");
  EXPECT_EQ(GgufValue::StringArray({"a", "b"}).ToDisplayString(), "[string x 2] \"a\", \"b\"");
  EXPECT_EQ(GgufValue::IntArray(GgufType::kInt32, {1, 2, 3}).ToDisplayString(),
            "[int32 x 3] 1, 2, 3");
  std::vector<int64_t> many(1000, 7);
  const std::string s = GgufValue::IntArray(GgufType::kUint32, many).ToDisplayString(40);
  EXPECT_EQ(s.rfind("[uint32 x 1000] 7, 7", 0), 0u) << s;
  EXPECT_LT(s.size(), 60u) << s;
  EXPECT_EQ(s.substr(s.size() - 3), "...") << s;
}

TEST(GgufValueTest, ConversionsRefuseMismatches) {
  const GgufValue s = GgufValue::String("x");
  EXPECT_FALSE(s.AsInt().has_value());
  EXPECT_FALSE(s.AsFloat().has_value());
  EXPECT_FALSE(s.AsBool().has_value());
  EXPECT_EQ(s.AsStringArray(), nullptr);
  EXPECT_EQ(s.array_size(), 1u);
  const GgufValue b = GgufValue::Bool(true);
  EXPECT_EQ(*b.AsInt(), 1);
  EXPECT_FALSE(b.AsFloat().has_value());
  const GgufValue i = GgufValue::Int(GgufType::kInt16, 3);
  EXPECT_FALSE(i.AsBool().has_value());
  EXPECT_EQ(i.AsString(), nullptr);
  EXPECT_FALSE(i.AsIntArray().has_value());
  const GgufValue sa = GgufValue::StringArray({"a"});
  EXPECT_FALSE(sa.AsInt().has_value());
  EXPECT_FALSE(sa.AsIntArray().has_value());
  EXPECT_FALSE(sa.AsFloatArray().has_value());
  EXPECT_EQ(*GgufValue::IntArray(GgufType::kInt8, {-1, 2}).AsFloatArray(),
            (std::vector<float>{-1.0f, 2.0f}));
  EXPECT_FALSE(GgufValue::IntArray(GgufType::kUint64, {-1}).AsIntArray().has_value());
}

TEST(GgmlTypes, NamesAndIds) {
  EXPECT_EQ(GgmlTypeName(0), "F32");
  EXPECT_EQ(GgmlTypeName(6), "Q5_0");
  EXPECT_EQ(GgmlTypeName(10), "Q2_K");
  EXPECT_EQ(GgmlTypeName(17), "IQ2_XS");
  EXPECT_EQ(GgmlTypeName(30), "BF16");
  EXPECT_EQ(GgmlTypeName(999), "type 999");
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kQ8_0, DType::kQ4_0,
                  DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    DType back;
    ASSERT_TRUE(DTypeFromGgml(GgmlTypeId(t), &back)) << DTypeName(t);
    EXPECT_EQ(back, t);
    // Our dtype names are ggml's, lower-cased.
    std::string upper(DTypeName(t));
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(GgmlTypeName(GgmlTypeId(t)), upper);
  }
  DType out;
  EXPECT_FALSE(DTypeFromGgml(6, &out));
  EXPECT_FALSE(DTypeFromGgml(23, &out));
}

// ---- The real default model --------------------------------------------------------------------

TEST(GgufRealModel, SmolLM2Q4_1) {
  const std::string path = testing::DefaultModelPath();
  if (path.empty()) GTEST_SKIP() << "default model not found (.cache/models or ICECACHE_MODEL_DIR)";
  auto r = GgufFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat("llama.rope.freq_base")), 100000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(*f.GetBool("tokenizer.ggml.add_bos_token", true), false);

  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_NE(tokens->AsStringArray(), nullptr);
  EXPECT_EQ(tokens->AsStringArray()->size(), 49152u);
  EXPECT_EQ(f.Find("tokenizer.ggml.merges")->AsStringArray()->size(), 48900u);

  const GgufTensorInfo* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->Shape(), (std::vector<int64_t>{49152, 576}));
  const Tensor view = f.TensorView(*emb);
  std::vector<float> row(576);
  DequantizeRow(DType::kQ8_0, view.row(49151), row.data(), 576);
  double sum2 = 0;
  for (float v : row) {
    ASSERT_TRUE(std::isfinite(v));
    sum2 += v * v;
  }
  EXPECT_GT(sum2, 0.0);

  int q4_1 = 0, f32 = 0;
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    q4_1 += t.dtype == DType::kQ4_1;
    f32 += t.dtype == DType::kF32;
    total += t.nbytes;
  }
  EXPECT_EQ(q4_1, 210);
  EXPECT_EQ(f32, 61);
  EXPECT_LE(total, f.file_size());
  const GgufTensorInfo* down = f.FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->Shape(), (std::vector<int64_t>{576, 1536}));
}

}  // namespace
}  // namespace icecache
