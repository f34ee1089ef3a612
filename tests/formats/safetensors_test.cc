// safetensors: writer round trips, every reader check, and HfCheckpoint over folders.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "format_test_util.h"
#include "model/safetensors/safetensors_file.h"
#include "testing/paths.h"

namespace icecache {
namespace {

using testing::ExpectErrorMentions;

// A file with `header` as its JSON text, followed by `data_bytes` bytes 0, 1, 2, ...
std::vector<uint8_t> RawFile(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i);
  return b;
}

Status ParseStatus(const std::vector<uint8_t>& bytes) {
  return SafetensorsFile::Parse(bytes, "bad.safetensors").status();
}

std::vector<uint8_t> SampleFile() {
  SafetensorsWriter w;
  std::vector<float> a(6);
  for (int i = 0; i < 6; ++i) a[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint16_t> h(8), bf(4);
  for (int i = 0; i < 8; ++i) h[i] = F32ToF16(static_cast<float>(i));
  for (int i = 0; i < 4; ++i) bf[i] = F32ToBf16(-static_cast<float>(i));
  const float scalar = 3.0f;
  w.AddTensor("model.embed_tokens.weight", DType::kF32, std::vector<int64_t>{2, 3}, a.data());
  w.AddTensor("model.norm.weight", DType::kF16, std::vector<int64_t>{2, 2, 2}, h.data());
  w.AddTensor("lm_head.weight", DType::kBF16, std::vector<int64_t>{1, 1, 2, 2}, bf.data());
  w.AddTensor("scalar", DType::kF32, std::vector<int64_t>{}, &scalar);
  w.AddTensor("empty", DType::kF32, std::vector<int64_t>{0, 4}, nullptr);
  w.AddTensor("last", DType::kF32, std::vector<int64_t>{2}, a.data());
  w.AddMetadata("format", "pt");
  return w.Serialize();
}

TEST(SafetensorsRoundTrip, WriterOutputParses) {
  const std::vector<uint8_t> bytes = SampleFile();
  auto r = SafetensorsFile::Parse(bytes, "rt.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const SafetensorsFile& f = **r;
  EXPECT_EQ(f.path(), "rt.safetensors");
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");

  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "header padded so the data section is 8-byte aligned";

  const SafetensorsTensorInfo* a = f.FindTensor("model.embed_tokens.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  const Tensor ta = f.TensorView(*a);
  EXPECT_EQ(ta.data_as<float>()[5], 2.5f);
  EXPECT_EQ(ta.ShapeString(), "[2, 3]");

  const SafetensorsTensorInfo* h = f.FindTensor("model.norm.weight");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, DType::kF16);
  uint16_t v;
  std::memcpy(&v, h->data + 7 * 2, 2);
  EXPECT_EQ(F16ToF32(v), 7.0f);

  const SafetensorsTensorInfo* bf = f.FindTensor("lm_head.weight");
  ASSERT_NE(bf, nullptr);
  EXPECT_EQ(bf->dtype, DType::kBF16);
  EXPECT_EQ(bf->shape.size(), 4u);
  std::memcpy(&v, bf->data + 3 * 2, 2);
  EXPECT_EQ(Bf16ToF32(v), -3.0f);

  const SafetensorsTensorInfo* s = f.FindTensor("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(f.TensorView(*s).numel(), 1);
  EXPECT_EQ(f.TensorView(*s).data_as<float>()[0], 3.0f);

  const SafetensorsTensorInfo* e = f.FindTensor("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(f.TensorView(*e).numel(), 0);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);

  // Tensors come in file (data offset) order.
  EXPECT_EQ(f.tensors().front().name, "model.embed_tokens.weight");
}

TEST(SafetensorsRoundTrip, WriteFileAndOpen) {
  const std::string dir = testing::MakeTempDir("st-rt");
  SafetensorsWriter w;
  std::vector<float> a(4, 1.25f);
  w.AddTensor("a", DType::kF32, std::vector<int64_t>{4}, a.data());
  ASSERT_TRUE(w.WriteFile(dir + "/x.safetensors").ok());
  Tensor view;
  {
    auto r = SafetensorsFile::Open(dir + "/x.safetensors");
    ASSERT_TRUE(r.ok()) << r.status().message();
    view = (*r)->TensorView(*(*r)->FindTensor("a"));
  }
  EXPECT_EQ(view.data_as<float>()[3], 1.25f) << "the view keeps the mapping alive";
  ExpectErrorMentions(SafetensorsFile::Open(dir + "/missing.safetensors").status(),
                      {"missing.safetensors", "No such file"});
  ExpectErrorMentions(w.WriteFile(dir + "/nodir/x.safetensors"), {"nodir/x.safetensors"});
}

TEST(SafetensorsBadInput, TruncatedAtEveryCutPoint) {
  const std::vector<uint8_t> bytes = SampleFile();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    const Status s = ParseStatus(prefix);
    ASSERT_FALSE(s.ok()) << "a prefix of " << cut << " bytes parsed";
    EXPECT_EQ(s.message().rfind("bad.safetensors: ", 0), 0u) << s.message();
  }
}

TEST(SafetensorsBadInput, ShortFile) {
  for (size_t n = 0; n < 8; ++n) {
    ExpectErrorMentions(ParseStatus(std::vector<uint8_t>(n, 0)), {"bad.safetensors", "too small"});
  }
}

TEST(SafetensorsBadInput, HeaderLengthPastEnd) {
  std::vector<uint8_t> b = RawFile("{}", 0);
  const uint64_t n = 1000;
  std::memcpy(b.data(), &n, 8);
  ExpectErrorMentions(ParseStatus(b), {"header length 1000", "past the end", "size 10"});
  const uint64_t huge = ~uint64_t{0};
  std::memcpy(b.data(), &huge, 8);
  ExpectErrorMentions(ParseStatus(b), {"header length 18446744073709551615"});
}

TEST(SafetensorsBadInput, BadJson) {
  ExpectErrorMentions(ParseStatus(RawFile("{\"a\": {\"dtype\": ", 0)),
                      {"bad.safetensors", "not valid JSON"});
  ExpectErrorMentions(ParseStatus(RawFile("", 0)), {"not valid JSON"});
  ExpectErrorMentions(ParseStatus(RawFile("[1, 2]", 0)), {"not a JSON object"});
  ExpectErrorMentions(ParseStatus(RawFile("{\"a\": 5}", 0)), {"tensor 'a'", "not a JSON object"});
}

TEST(SafetensorsBadInput, OffsetMismatch) {
  const std::string h = R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})";
  ExpectErrorMentions(ParseStatus(RawFile(h, 24)),
                      {"tensor 'w'", "[0, 20]", "hold 20 bytes", "[2, 3]", "needs 24 bytes"});
}

TEST(SafetensorsBadInput, OffsetsPastDataSection) {
  const std::string h = R"({"w": {"dtype": "F16", "shape": [8], "data_offsets": [16, 32]}})";
  ExpectErrorMentions(ParseStatus(RawFile(h, 20)),
                      {"tensor 'w'", "[16, 32]", "past the end of the data section (20 bytes)"});
}

TEST(SafetensorsBadInput, ReversedOffsets) {
  const std::string h = R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})";
  ExpectErrorMentions(ParseStatus(RawFile(h, 8)), {"tensor 'w'", "end before they begin"});
}

TEST(SafetensorsBadInput, MalformedFields) {
  const char* cases[][2] = {
      {R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "\"dtype\""},
      {R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "\"shape\""},
      {R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "shape [-1]"},
      {R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "shape [1.5]"},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
       "overflows"},
      {R"({"w": {"dtype": "F32", "shape": [2147483648, 2147483648], "data_offsets": [0, 4]}})",
       "more than 2^64"},
      {R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 4]}})",
       "is too large"},
      // No elements, but a row of the last dimension would not fit in bytes (found by fuzzing).
      {R"({"w": {"dtype": "F32", "shape": [0, 3999999999999999999], "data_offsets": [0, 0]}})",
       "dimension 3999999999999999999"},
      {R"({"__metadata__": {"format": 1}})", "__metadata__ value 'format'"},
      {R"({"__metadata__": [1]})", "__metadata__ is not a JSON object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0]);
    ExpectErrorMentions(ParseStatus(RawFile(c[0], 16)), {"bad.safetensors", c[1]});
  }
}

TEST(SafetensorsBadInput, UnsupportedDtypes) {
  for (const char* dtype : {"I64", "F64", "F8_E4M3", "I32", "BOOL", "WHATEVER"}) {
    const std::string h = std::string(R"({"model.layers.0.x": {"dtype": ")") + dtype +
                          R"(", "shape": [1], "data_offsets": [0, 8]}})";
    const Status s = ParseStatus(RawFile(h, 8));
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << dtype;
    ExpectErrorMentions(s, {"tensor 'model.layers.0.x'", std::string("dtype ") + dtype});
  }
}

TEST(SafetensorsBadInput, TooManyDimensions) {
  const std::string h =
      R"({"w": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}})";
  ExpectErrorMentions(ParseStatus(RawFile(h, 4)), {"tensor 'w'", "5 dimensions"});
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  const std::string h = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                            "b": {"dtype": "F32", "shape": [4], "data_offsets": [12, 28]}})";
  ExpectErrorMentions(ParseStatus(RawFile(h, 32)), {"'a' [0, 16)", "'b' [12, 28)", "overlap"});
  // Empty tensors overlap nothing, wherever they point.
  const std::string ok = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                             "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
                             "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})";
  EXPECT_TRUE(ParseStatus(RawFile(ok, 32)).ok());
}

// ---- HfCheckpoint ------------------------------------------------------------------------------

void WriteShard(const std::string& path, const std::vector<std::string>& names) {
  SafetensorsWriter w;
  std::vector<float> v(4);
  for (size_t i = 0; i < names.size(); ++i) {
    for (int j = 0; j < 4; ++j) v[j] = static_cast<float>(i * 10 + j);
    w.AddTensor(names[i], DType::kF32, std::vector<int64_t>{2, 2}, v.data());
  }
  ASSERT_TRUE(w.WriteFile(path).ok());
}

void WriteText(const std::string& path, const std::string& text) {
  testing::WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

constexpr const char* kIndex = R"({"metadata": {"total_size": 64}, "weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"}})";

TEST(HfCheckpointTest, SingleFile) {
  const std::string dir = testing::MakeTempDir("hf-single");
  WriteShard(dir + "/model.safetensors", {"x", "y"});
  auto r = HfCheckpoint::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->num_files(), 1u);
  EXPECT_EQ((*r)->AllTensors().size(), 2u);
  const SafetensorsTensorInfo* y = (*r)->FindTensor("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ((*r)->TensorView(*y).data_as<float>()[3], 13.0f);
  EXPECT_EQ((*r)->FindTensor("z"), nullptr);
}

TEST(HfCheckpointTest, ShardedWithIndex) {
  const std::string dir = testing::MakeTempDir("hf-sharded");
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a", "b"});
  WriteShard(dir + "/model-00002-of-00002.safetensors", {"c"});
  WriteText(dir + "/model.safetensors.index.json", kIndex);
  auto r = HfCheckpoint::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->num_files(), 2u);
  const auto all = (*r)->AllTensors();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->name, "a");
  EXPECT_EQ(all[2]->name, "c");
  const SafetensorsTensorInfo* c = (*r)->FindTensor("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*r)->TensorView(*c).data_as<float>()[1], 1.0f);
  EXPECT_EQ((*r)->TensorView(*(*r)->FindTensor("b")).data_as<float>()[0], 10.0f);
}

TEST(HfCheckpointTest, MissingShard) {
  const std::string dir = testing::MakeTempDir("hf-missing");
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a", "b"});
  WriteText(dir + "/model.safetensors.index.json", kIndex);
  const Status s = HfCheckpoint::Open(dir).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  ExpectErrorMentions(s, {"model.safetensors.index.json", "'model-00002-of-00002.safetensors'",
                          "'c'", "does not exist"});
}

TEST(HfCheckpointTest, IndexedTensorNotInItsShard) {
  const std::string dir = testing::MakeTempDir("hf-notin");
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a"});
  WriteShard(dir + "/model-00002-of-00002.safetensors", {"c", "b"});
  WriteText(dir + "/model.safetensors.index.json", kIndex);
  ExpectErrorMentions(
      HfCheckpoint::Open(dir).status(),
      {"tensor 'b'", "listed in shard 'model-00001-of-00002.safetensors'", "no such tensor"});
}

TEST(HfCheckpointTest, TensorInTwoShards) {
  const std::string dir = testing::MakeTempDir("hf-twice");
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a", "b"});
  WriteShard(dir + "/model-00002-of-00002.safetensors", {"c", "a"});
  WriteText(dir + "/model.safetensors.index.json", kIndex);
  ExpectErrorMentions(HfCheckpoint::Open(dir).status(), {"tensor 'a'", "two files"});
}

TEST(HfCheckpointTest, BadShardInside) {
  const std::string dir = testing::MakeTempDir("hf-badshard");
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a", "b"});
  testing::WriteBytes(dir + "/model-00002-of-00002.safetensors", {1, 2, 3});
  WriteText(dir + "/model.safetensors.index.json", kIndex);
  ExpectErrorMentions(HfCheckpoint::Open(dir).status(),
                      {dir + "/model-00002-of-00002.safetensors", "too small"});
}

TEST(HfCheckpointTest, BadIndexFiles) {
  const char* cases[][2] = {
      {"{not json", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata": {}})", "missing \"weight_map\""},
      {R"({"weight_map": {}})", "lists no tensors"},
      {R"({"weight_map": {"a": 3}})", "entry 'a' is not a string"},
      {R"({"weight_map": {"a": "../model.safetensors"}})", "not a file name inside"},
      {R"({"weight_map": {"a": "/etc/passwd"}})", "not a file name inside"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0]);
    const std::string dir = testing::MakeTempDir("hf-badindex");
    WriteText(dir + "/model.safetensors.index.json", c[0]);
    ExpectErrorMentions(HfCheckpoint::Open(dir).status(), {"model.safetensors.index.json", c[1]});
  }
}

TEST(HfCheckpointTest, FolderWithoutWeights) {
  const std::string dir = testing::MakeTempDir("hf-empty");
  const Status s = HfCheckpoint::Open(dir).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  ExpectErrorMentions(s, {dir, "model.safetensors", "index.json"});
  ExpectErrorMentions(HfCheckpoint::Open(dir + "/nope").status(), {"nope", "no such directory"});
  WriteText(dir + "/file", "x");
  ExpectErrorMentions(HfCheckpoint::Open(dir + "/file").status(), {"not a directory"});
}

}  // namespace
}  // namespace icecache
