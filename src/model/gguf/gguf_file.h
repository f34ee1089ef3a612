// GGUF v2/v3 reader: all metadata, tensor directory, memory-mapped tensor data.
//
// Every offset and count read from the file is bounds-checked; a malformed file yields a Status
// naming the file and what is wrong, never a crash (the parser runs under a fuzzer in CI).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"
#include "icecache/status.h"

namespace icecache {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufTypeName(GgufType t);

// One metadata value. Scalars and arrays of scalars or strings (nested arrays are rejected).
class GgufValue {
 public:
  GgufType type() const { return type_; }
  // For arrays: the element type and count. For scalars: array_type() == type(), size 1.
  GgufType array_type() const { return array_type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  size_t array_size() const;

  // Scalar access with conversion among integer types (and bool); nullopt on type mismatch.
  std::optional<int64_t> AsInt() const;
  // Float types, and integer types converted.
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;  // nullptr unless a string scalar
  // Array access; nullptr / nullopt unless an array of that kind.
  const std::vector<std::string>* AsStringArray() const;
  std::optional<std::vector<int64_t>> AsIntArray() const;
  std::optional<std::vector<float>> AsFloatArray() const;

  // Human-readable form for `icecache inspect`: scalars in full (strings cut at max_chars),
  // arrays as "[type x N] first items...".
  std::string ToDisplayString(size_t max_chars = 80) const;

  // Constructors used by the reader and the writer.
  static GgufValue Int(GgufType t, int64_t v);
  static GgufValue Float(GgufType t, double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue IntArray(GgufType elem, std::vector<int64_t> v);
  static GgufValue FloatArray(GgufType elem, std::vector<double> v);

 private:
  friend class GgufWriter;  // serializes the stored values bit for bit
  GgufType type_ = GgufType::kUint8;
  GgufType array_type_ = GgufType::kUint8;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<int64_t> ai_;
  std::vector<double> af_;
  std::vector<std::string> as_;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  uint32_t ggml_type;       // the raw type id in the file
  std::vector<int64_t> ne;  // ggml order: ne[0] is the innermost (contiguous) dimension
  uint64_t offset;          // relative to the data section
  uint64_t nbytes;
  const uint8_t* data;  // inside the mapping (bounds already checked)

  // Row-major shape: reverse of ne (e.g. ne = [576, 49152] -> [49152, 576]).
  std::vector<int64_t> Shape() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Fails on bad magic, unsupported version (only 2 and 3), truncation,
  // out-of-bounds tensor data, overlapping or misaligned tensors, duplicate names, and tensor
  // types outside the supported set (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K; the
  // error names the tensor and its type).
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes already in memory (fuzzing, tests). `bytes` must outlive the result.
  static Result<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                 const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return bytes_.size(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(const std::string& key) const;  // nullptr if absent

  // Typed getters; errors name the file and key ("missing key" / "wrong type").
  Result<std::string> GetString(const std::string& key) const;
  Result<int64_t> GetInt(const std::string& key) const;
  Result<double> GetFloat(const std::string& key) const;
  // With defaults for optional keys (still an error if present with a wrong type).
  Result<int64_t> GetInt(const std::string& key, int64_t def) const;
  Result<double> GetFloat(const std::string& key, double def) const;
  Result<bool> GetBool(const std::string& key, bool def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;  // nullptr if absent
  // A host Tensor view of the tensor's data (row-major shape), keeping the mapping alive.
  Tensor TensorView(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  std::string path_;
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Maps our DType to the ggml type id and back (false if not one we support).
uint32_t GgmlTypeId(DType t);
bool DTypeFromGgml(uint32_t ggml_type, DType* out);
// Name of any ggml type id, known or not ("Q5_0", "IQ2_XS", "type 99").
std::string GgmlTypeName(uint32_t ggml_type);

}  // namespace icecache
