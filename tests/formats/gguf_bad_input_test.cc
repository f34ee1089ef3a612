// Malformed GGUF files: every check of the reader, one test each, asserting a non-OK Status whose
// message names the file and the problem.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format_test_util.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "testing/paths.h"

namespace icecache {
namespace {

using testing::Bytes;
using testing::ExpectErrorMentions;
using testing::RawGguf;
using testing::RawTensor;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ5_0 = 6, kIQ2_XS = 17;
constexpr uint32_t kTypeU32 = 4, kTypeString = 8, kTypeArray = 9;

Status ParseStatus(const std::vector<uint8_t>& bytes) {
  return GgufFile::Parse(bytes, "bad.gguf").status();
}

// A small valid file: metadata of several kinds, three tensors, no trailing padding (the last
// tensor ends at the end of the file), so that every proper prefix is invalid.
std::vector<uint8_t> ValidFile() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 2);
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"<s>", "</s>", "hello"}));
  w.Add("tokenizer.ggml.scores", GgufValue::FloatArray(GgufType::kFloat32, {0, -1, -2}));
  std::vector<float> a(2 * 32, 0.5f);
  std::vector<uint8_t> q(2 * 34 * 2, 0);
  std::vector<float> c(3 * 32, -1.0f);
  w.AddTensor("a", DType::kF32, std::vector<int64_t>{2, 32}, a.data());
  w.AddTensor("q", DType::kQ8_0, std::vector<int64_t>{2, 64}, q.data());
  w.AddTensor("c", DType::kF32, std::vector<int64_t>{3, 32}, c.data());
  return w.Serialize();
}

TEST(GgufBadInput, ValidFileParses) {
  const std::vector<uint8_t> bytes = ValidFile();
  auto r = GgufFile::Parse(bytes, "bad.gguf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufTensorInfo* c = (*r)->FindTensor("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->data + c->nbytes, bytes.data() + bytes.size()) << "last tensor ends the file";
}

TEST(GgufBadInput, TruncatedAtEveryCutPoint) {
  const std::vector<uint8_t> bytes = ValidFile();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    const Status s = ParseStatus(prefix);
    ASSERT_FALSE(s.ok()) << "a prefix of " << cut << " of " << bytes.size() << " bytes parsed";
    EXPECT_EQ(s.message().rfind("bad.gguf: ", 0), 0u) << s.message();
    const bool names_problem = s.message().find("ends inside") != std::string::npos ||
                               s.message().find("past the end") != std::string::npos ||
                               s.message().find("too small") != std::string::npos ||
                               s.message().find("impossible") != std::string::npos ||
                               s.message().find("hold at most") != std::string::npos;
    EXPECT_TRUE(names_problem) << "cut " << cut << ": " << s.message();
  }
}

TEST(GgufBadInput, EmptyFile) { ExpectErrorMentions(ParseStatus({}), {"bad.gguf", "too small"}); }

TEST(GgufBadInput, WrongMagic) {
  std::vector<uint8_t> bytes = ValidFile();
  bytes[3] = 'X';
  ExpectErrorMentions(ParseStatus(bytes), {"bad.gguf", "not a GGUF file", "GGUX"});
}

TEST(GgufBadInput, VersionOneIsRejectedClearly) {
  RawGguf g;
  g.version = 1;
  const Status s = ParseStatus(g.Build());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  ExpectErrorMentions(s, {"bad.gguf", "version 1", "only versions 2 and 3"});
}

TEST(GgufBadInput, VersionNinetyNine) {
  RawGguf g;
  g.version = 99;
  const Status s = ParseStatus(g.Build());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  ExpectErrorMentions(s, {"bad.gguf", "version 99"});
}

TEST(GgufBadInput, BigEndianFile) {
  RawGguf g;
  g.version = 0x03000000;
  ExpectErrorMentions(ParseStatus(g.Build()), {"big-endian"});
}

TEST(GgufBadInput, TensorDataPastTheEnd) {
  RawGguf g;
  g.tensors = {{"blk.0.attn_q.weight", {64}, kF32, 0}};
  g.data_bytes = 100;  // needs 256
  ExpectErrorMentions(ParseStatus(g.Build()),
                      {"bad.gguf", "tensor 'blk.0.attn_q.weight'", "256 bytes", "past the end"});
}

TEST(GgufBadInput, TensorOffsetPastTheEnd) {
  RawGguf g;
  g.tensors = {{"t", {8}, kF32, 0xFFFFFFFFFFFFFFE0ull}};
  g.data_bytes = 32;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 't'", "past the end"});
}

TEST(GgufBadInput, MisalignedOffset) {
  RawGguf g;
  g.tensors = {{"t", {8}, kF32, 4}};
  g.data_bytes = 64;
  ExpectErrorMentions(ParseStatus(g.Build()),
                      {"tensor 't'", "offset 4", "not a multiple of the alignment 32"});
}

TEST(GgufBadInput, OverlappingTensors) {
  RawGguf g;
  g.tensors = {{"first", {64}, kF32, 0}, {"second", {64}, kF32, 128}};
  g.data_bytes = 512;
  ExpectErrorMentions(ParseStatus(g.Build()), {"'first'", "'second'", "overlap"});
}

TEST(GgufBadInput, SameOffsetOverlaps) {
  RawGguf g;
  g.tensors = {{"x", {8}, kF32, 32}, {"y", {8}, kF32, 32}};
  g.data_bytes = 64;
  ExpectErrorMentions(ParseStatus(g.Build()), {"'x'", "'y'", "overlap"});
}

TEST(GgufBadInput, DuplicateTensorNames) {
  RawGguf g;
  g.tensors = {{"dup", {8}, kF32, 0}, {"dup", {8}, kF32, 32}};
  g.data_bytes = 64;
  ExpectErrorMentions(ParseStatus(g.Build()), {"bad.gguf", "duplicate tensor name 'dup'"});
}

TEST(GgufBadInput, UnsupportedTensorTypes) {
  for (auto [id, name] : std::vector<std::pair<uint32_t, std::string>>{
           {kQ5_0, "Q5_0"}, {kIQ2_XS, "IQ2_XS"}, {10, "Q2_K"}, {28, "F64"}, {77, "type 77"}}) {
    RawGguf g;
    g.tensors = {{"blk.3.ffn_up.weight", {256}, id, 0}};
    g.data_bytes = 4096;
    const Status s = ParseStatus(g.Build());
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << name;
    ExpectErrorMentions(s, {"bad.gguf", "tensor 'blk.3.ffn_up.weight'", name, "not supported"});
  }
}

TEST(GgufBadInput, InnermostDimNotMultipleOfBlock) {
  RawGguf g;
  g.tensors = {{"q", {33, 2}, kQ8_0, 0}};
  g.data_bytes = 256;
  ExpectErrorMentions(ParseStatus(g.Build()),
                      {"tensor 'q'", "33", "not a multiple", "Q8_0", "block size 32"});
}

TEST(GgufBadInput, AbsurdStringLength) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.U64(uint64_t{1} << 62);  // key length
  g.kv.Zeros(16);
  ExpectErrorMentions(ParseStatus(g.Build()),
                      {"bad.gguf", "string length 4611686018427387904", "past the end"});
}

TEST(GgufBadInput, AbsurdStringValueLength) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("general.name").U32(kTypeString).U64(1000000);
  g.kv.Zeros(4);
  ExpectErrorMentions(ParseStatus(g.Build()), {"'general.name'", "string length 1000000"});
}

TEST(GgufBadInput, AbsurdArrayCount) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("tokenizer.ggml.token_type").U32(kTypeArray).U32(kTypeU32).U64(uint64_t{1} << 40);
  g.kv.Zeros(64);
  ExpectErrorMentions(ParseStatus(g.Build()),
                      {"array 'tokenizer.ggml.token_type'", "1099511627776", "hold at most"});
}

TEST(GgufBadInput, AbsurdStringArrayCount) {
  RawGguf g;
  g.n_kv = 1;
  // 13 strings need at least 13 x 8 = 104 bytes; 91 remain (60 + padding to 160).
  g.kv.Str("tokenizer.ggml.tokens").U32(kTypeArray).U32(kTypeString).U64(13);
  g.kv.Zeros(60);
  const std::vector<uint8_t> bytes = g.Build();
  ASSERT_EQ(bytes.size(), 160u);
  ExpectErrorMentions(ParseStatus(bytes), {"array 'tokenizer.ggml.tokens'", "claims 13"});
}

TEST(GgufBadInput, AbsurdCountsInHeader) {
  RawGguf g;
  g.n_kv = uint64_t{1} << 60;
  ExpectErrorMentions(ParseStatus(g.Build()), {"metadata count", "impossible"});
  RawGguf t;
  t.tensors.clear();
  std::vector<uint8_t> bytes = t.Build();
  const uint64_t huge = uint64_t{1} << 50;
  std::memcpy(bytes.data() + 8, &huge, 8);  // tensor count
  ExpectErrorMentions(ParseStatus(bytes), {"tensor count", "impossible"});
}

TEST(GgufBadInput, FiveDimensions) {
  RawGguf g;
  g.tensors = {{"t5", {2, 2, 2, 2, 2}, kF32, 0}};
  g.data_bytes = 128;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 't5'", "n_dims 5"});
}

TEST(GgufBadInput, ZeroDimensions) {
  RawGguf g;
  g.tensors = {{"t0", {}, kF32, 0}};
  g.data_bytes = 32;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 't0'", "n_dims 0"});
}

TEST(GgufBadInput, ZeroSizedDimension) {
  RawGguf g;
  g.tensors = {{"z", {32, 0}, kF32, 0}};
  g.data_bytes = 128;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 'z'", "dimension 1 of size 0"});
}

TEST(GgufBadInput, ElementCountOverflow) {
  RawGguf g;
  g.tensors = {{"huge", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0}};
  g.data_bytes = 32;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 'huge'", "overflows"});
}

TEST(GgufBadInput, ByteCountOverflow) {
  RawGguf g;
  g.tensors = {{"wide", {uint64_t{1} << 62}, kF32, 0}};  // 2^62 elements x 4 bytes
  g.data_bytes = 32;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 'wide'", "overflows"});
}

TEST(GgufBadInput, DuplicateMetadataKey) {
  RawGguf g;
  g.n_kv = 2;
  g.kv.Str("llama.block_count").U32(kTypeU32).U32(2);
  g.kv.Str("llama.block_count").U32(kTypeU32).U32(3);
  ExpectErrorMentions(ParseStatus(g.Build()), {"duplicate metadata key 'llama.block_count'"});
}

TEST(GgufBadInput, UnknownValueType) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("k").U32(13).U32(0);
  ExpectErrorMentions(ParseStatus(g.Build()), {"metadata 'k'", "unknown value type 13"});
}

TEST(GgufBadInput, UnknownArrayElementType) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("k").U32(kTypeArray).U32(200).U64(0);
  ExpectErrorMentions(ParseStatus(g.Build()), {"array 'k'", "unknown element type 200"});
}

TEST(GgufBadInput, NestedArrays) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("nested").U32(kTypeArray).U32(kTypeArray).U64(1).U32(kTypeU32).U64(0);
  const Status s = ParseStatus(g.Build());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  ExpectErrorMentions(s, {"array 'nested'", "nested arrays"});
}

TEST(GgufBadInput, AlignmentNotPowerOfTwo) {
  for (uint32_t a : {0u, 3u, 48u}) {
    RawGguf g;
    g.n_kv = 1;
    g.kv.Str("general.alignment").U32(kTypeU32).U32(a);
    ExpectErrorMentions(ParseStatus(g.Build()), {"general.alignment", "power of two"});
  }
}

TEST(GgufBadInput, AlignmentWrongType) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("general.alignment").U32(kTypeString).Str("32");
  ExpectErrorMentions(ParseStatus(g.Build()), {"general.alignment", "string"});
}

TEST(GgufBadInput, OffsetAlignedToDefaultButNotCustomAlignment) {
  RawGguf g;
  g.n_kv = 1;
  g.kv.Str("general.alignment").U32(kTypeU32).U32(64);
  g.alignment = 64;
  g.tensors = {{"t", {8}, kF32, 32}};
  g.data_bytes = 128;
  ExpectErrorMentions(ParseStatus(g.Build()), {"tensor 't'", "alignment 64"});
}

TEST(GgufBadInput, OpenReportsParseErrorsWithThePath) {
  const std::string dir = testing::MakeTempDir("gguf-bad");
  RawGguf g;
  g.version = 1;
  testing::WriteBytes(dir + "/old.gguf", g.Build());
  auto r = GgufFile::Open(dir + "/old.gguf");
  ExpectErrorMentions(r.status(), {dir + "/old.gguf: ", "version 1"});
  auto d = GgufFile::Open(dir);
  ExpectErrorMentions(d.status(), {dir, "directory"});
}

}  // namespace
}  // namespace icecache
