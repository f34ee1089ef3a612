// GGUF reader. Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count,
// the metadata (string key, u32 type, value), the tensor directory (string name, u32 n_dims,
// u64 ne[n_dims], u32 ggml type, u64 offset), padding to general.alignment, the tensor data.
// Strings are a u64 length and bytes; arrays a u32 element type, a u64 count and the elements.
//
// Nothing read from the file is trusted: every length and count is checked against the bytes
// that remain before it is used, so a hostile file can neither read out of bounds nor make the
// reader allocate more than a small multiple of the file size.
#include "model/gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "model/gguf/gguf_parse.h"

namespace icecache {

namespace {

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
};
// Every ggml type id that has been assigned, supported or not, so errors can name them.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32"},     {1, "F16"},         {2, "Q4_0"},        {3, "Q4_1"},        {4, "Q4_2"},
    {5, "Q4_3"},    {6, "Q5_0"},        {7, "Q5_1"},        {8, "Q8_0"},        {9, "Q8_1"},
    {10, "Q2_K"},   {11, "Q3_K"},       {12, "Q4_K"},       {13, "Q5_K"},       {14, "Q6_K"},
    {15, "Q8_K"},   {16, "IQ2_XXS"},    {17, "IQ2_XS"},     {18, "IQ3_XXS"},    {19, "IQ1_S"},
    {20, "IQ4_NL"}, {21, "IQ3_S"},      {22, "IQ2_S"},      {23, "IQ4_XS"},     {24, "I8"},
    {25, "I16"},    {26, "I32"},        {27, "I64"},        {28, "F64"},        {29, "IQ1_M"},
    {30, "BF16"},   {31, "Q4_0_4_4"},   {32, "Q4_0_4_8"},   {33, "Q4_0_8_8"},   {34, "TQ1_0"},
    {35, "TQ2_0"},  {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}, {39, "MXFP4"},
    {40, "NVFP4"},  {41, "Q1_0"},
};

struct DTypeGgml {
  DType dtype;
  uint32_t ggml;
};
constexpr DTypeGgml kDTypeGgml[] = {
    {DType::kF32, 0},   {DType::kF16, 1},   {DType::kBF16, 30}, {DType::kI32, 26},
    {DType::kQ8_0, 8},  {DType::kQ4_0, 2},  {DType::kQ4_1, 3},  {DType::kQ4_K, 12},
    {DType::kQ5_K, 13}, {DType::kQ6_K, 14},
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string TypeDescription(const GgufValue& v) {
  if (v.is_array()) return std::string("array of ") + GgufTypeName(v.array_type());
  return GgufTypeName(v.type());
}

}  // namespace

uint32_t GgmlTypeId(DType t) {
  for (const auto& e : kDTypeGgml) {
    if (e.dtype == t) return e.ggml;
  }
  return std::numeric_limits<uint32_t>::max();
}

bool DTypeFromGgml(uint32_t ggml_type, DType* out) {
  for (const auto& e : kDTypeGgml) {
    if (e.ggml == ggml_type) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

std::string GgmlTypeName(uint32_t ggml_type) {
  for (const auto& e : kGgmlTypes) {
    if (e.id == ggml_type) return e.name;
  }
  return "type " + std::to_string(ggml_type);
}

std::vector<int64_t> GgufTensorInfo::Shape() const { return {ne.rbegin(), ne.rend()}; }

// ---- GgufFile -------------------------------------------------------------------------------

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ICECACHE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, Parse(file->bytes(), path));
  gguf->file_ = std::move(file);
  return gguf;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                  const std::string& name) {
  ICECACHE_ASSIGN_OR_RETURN(ParsedGguf parsed, ParseGguf(bytes, name));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->bytes_ = bytes;
  f->version_ = parsed.version;
  f->alignment_ = parsed.alignment;
  f->metadata_ = std::move(parsed.metadata);
  f->tensors_ = std::move(parsed.tensors);
  for (size_t i = 0; i < f->metadata_.size(); ++i) f->metadata_index_[f->metadata_[i].first] = i;
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->tensor_index_[f->tensors_[i].name] = i;
  return f;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

Result<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing metadata key " + Quote(key));
  if (const std::string* s = v->AsString()) return *s;
  return Corrupt(path_ + ": metadata key " + Quote(key) + " has type " + TypeDescription(*v) +
                 ", expected a string");
}

Result<int64_t> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing metadata key " + Quote(key));
  if (auto i = v->AsInt()) return *i;
  if (v->type() == GgufType::kUint64) {
    return Corrupt(path_ + ": metadata key " + Quote(key) + " value " + v->ToDisplayString() +
                   " does not fit in a signed 64-bit integer");
  }
  return Corrupt(path_ + ": metadata key " + Quote(key) + " has type " + TypeDescription(*v) +
                 ", expected an integer");
}

Result<double> GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing metadata key " + Quote(key));
  if (auto f = v->AsFloat()) return *f;
  return Corrupt(path_ + ": metadata key " + Quote(key) + " has type " + TypeDescription(*v) +
                 ", expected a number");
}

Result<int64_t> GgufFile::GetInt(const std::string& key, int64_t def) const {
  if (Find(key) == nullptr) return def;
  return GetInt(key);
}

Result<double> GgufFile::GetFloat(const std::string& key, double def) const {
  if (Find(key) == nullptr) return def;
  return GetFloat(key);
}

Result<bool> GgufFile::GetBool(const std::string& key, bool def) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return def;
  if (auto b = v->AsBool()) return *b;
  return Corrupt(path_ + ": metadata key " + Quote(key) + " has type " + TypeDescription(*v) +
                 ", expected a bool");
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::TensorView(const GgufTensorInfo& info) const {
  const std::vector<int64_t> shape = info.Shape();
  // The mapping is read-only; Tensor has no const view, so writes through it would fault.
  return Tensor(const_cast<uint8_t*>(info.data), info.dtype, shape, Device::kCpu, file_);
}

}  // namespace icecache
