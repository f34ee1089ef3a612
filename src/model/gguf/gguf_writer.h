// GGUF v3 writer: used by tests (tiny random models of every architecture), fuzz seeds and tools.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "icecache/status.h"
#include "model/gguf/gguf_file.h"

namespace icecache {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Adding a key again replaces its value (keys are unique in a GGUF file). Adding
  // "general.alignment" also sets the padding. REQUIRES: an alignment is a power of two.
  void Add(const std::string& key, GgufValue value);
  void AddString(const std::string& key, std::string v) {
    Add(key, GgufValue::String(std::move(v)));
  }
  void AddU32(const std::string& key, uint32_t v) {
    Add(key, GgufValue::Int(GgufType::kUint32, v));
  }
  void AddF32(const std::string& key, float v) {
    Add(key, GgufValue::Float(GgufType::kFloat32, v));
  }
  void AddBool(const std::string& key, bool v) { Add(key, GgufValue::Bool(v)); }

  // Adds a tensor with row-major `shape`; `data` holds RowBytes(dtype, shape.back()) * rows bytes
  // and is copied.
  void AddTensor(const std::string& name, DType dtype, std::span<const int64_t> shape,
                 const void* data);
  // Quantizes f32 data into `dtype` (QuantizeRow) and adds it.
  void AddTensorF32(const std::string& name, DType dtype, std::span<const int64_t> shape,
                    const float* data);

  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  // Appends the GGUF encoding of `v` (type tag and value) to `out`.
  static void PutValue(std::vector<uint8_t>* out, const GgufValue& v);

  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace icecache
