#include "model/gguf/gguf_writer.h"

#include <cstring>

#include "core/check.h"
#include "core/quant.h"
#include "core/write_file.h"
#include "model/gguf/gguf_parse.h"

namespace icecache {

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    PutBytes(&v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    PutBytes(s.data(), s.size());
  }
  // resize + memcpy rather than insert: GCC 12 warns falsely (stringop-overflow) on the latter.
  void PutBytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  void PadTo(uint64_t alignment) {
    while (out_->size() % alignment != 0) out_->push_back(0);
  }

 private:
  std::vector<uint8_t>* out_;
};

void PutInt(ByteSink& s, GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return s.Put(static_cast<uint8_t>(v));
    case GgufType::kInt8:
      return s.Put(static_cast<int8_t>(v));
    case GgufType::kUint16:
      return s.Put(static_cast<uint16_t>(v));
    case GgufType::kInt16:
      return s.Put(static_cast<int16_t>(v));
    case GgufType::kUint32:
      return s.Put(static_cast<uint32_t>(v));
    case GgufType::kInt32:
      return s.Put(static_cast<int32_t>(v));
    case GgufType::kUint64:
      return s.Put(static_cast<uint64_t>(v));
    case GgufType::kInt64:
      return s.Put(v);
    default:
      ICECACHE_CHECK_MSG(false, "not an integer type");
  }
}

void PutFloat(ByteSink& s, GgufType t, double v) {
  if (t == GgufType::kFloat32) {
    s.Put(static_cast<float>(v));
  } else {
    s.Put(v);
  }
}

bool IsFloat(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

}  // namespace

void GgufWriter::PutValue(std::vector<uint8_t>* out, const GgufValue& v) {
  ByteSink s(out);
  s.Put(static_cast<uint32_t>(v.type_));
  if (v.is_array()) {
    const GgufType elem = v.array_type_;
    s.Put(static_cast<uint32_t>(elem));
    s.Put<uint64_t>(v.array_size());
    if (elem == GgufType::kString) {
      for (const std::string& x : v.as_) s.PutString(x);
    } else if (IsFloat(elem)) {
      for (double x : v.af_) PutFloat(s, elem, x);
    } else {
      for (int64_t x : v.ai_) PutInt(s, elem, x);
    }
  } else if (v.type_ == GgufType::kString) {
    s.PutString(v.s_);
  } else if (IsFloat(v.type_)) {
    PutFloat(s, v.type_, v.f_);
  } else {
    PutInt(s, v.type_, v.i_);
  }
}

void GgufWriter::Add(const std::string& key, GgufValue value) {
  if (key == "general.alignment") {
    std::optional<int64_t> a = value.AsInt();
    ICECACHE_CHECK_MSG(a && *a > 0 && (*a & (*a - 1)) == 0, "alignment must be a power of two");
    alignment_ = static_cast<uint64_t>(*a);
  }
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, std::span<const int64_t> shape,
                           const void* data) {
  ICECACHE_CHECK(!shape.empty() && shape.size() <= static_cast<size_t>(kGgufMaxDims));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  for (int64_t d : shape) ICECACHE_CHECK(d > 0);
  ICECACHE_CHECK(shape.back() % BlockElems(dtype) == 0);
  for (const PendingTensor& t : tensors_) ICECACHE_CHECK_MSG(t.name != name, name.c_str());
  const auto nbytes = static_cast<size_t>(rows * RowBytes(dtype, shape.back()));
  PendingTensor t{name, dtype, {shape.begin(), shape.end()}, std::vector<uint8_t>(nbytes)};
  if (nbytes > 0) std::memcpy(t.data.data(), data, nbytes);
  tensors_.push_back(std::move(t));
}

void GgufWriter::AddTensorF32(const std::string& name, DType dtype, std::span<const int64_t> shape,
                              const float* data) {
  ICECACHE_CHECK(!shape.empty());
  const int64_t cols = shape.back();
  ICECACHE_CHECK(cols % BlockElems(dtype) == 0);
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  std::vector<uint8_t> q(static_cast<size_t>(rows * RowBytes(dtype, cols)));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(dtype, data + r * cols, q.data() + r * RowBytes(dtype, cols), cols);
  }
  AddTensor(name, dtype, shape, q.data());
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  ByteSink s(&out);
  s.Put(kGgufMagic);
  s.Put<uint32_t>(3);
  s.Put<uint64_t>(tensors_.size());
  bool has_alignment = false;
  for (const auto& kv : kv_) has_alignment |= kv.first == "general.alignment";
  const bool add_alignment = !has_alignment && alignment_ != kGgufDefaultAlignment;
  s.Put<uint64_t>(kv_.size() + (add_alignment ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    s.PutString(key);
    PutValue(&out, value);
  }
  if (add_alignment) {
    s.PutString("general.alignment");
    PutValue(&out, GgufValue::Int(GgufType::kUint32, static_cast<int64_t>(alignment_)));
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    s.PutString(t.name);
    s.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      s.Put<uint64_t>(*it);  // ggml order: innermost first
    }
    s.Put<uint32_t>(GgmlTypeId(t.dtype));
    s.Put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  s.PadTo(alignment_);
  for (const PendingTensor& t : tensors_) {
    s.PutBytes(t.data.data(), t.data.size());
    s.PadTo(alignment_);
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  return WriteFileBytes(path, Serialize());
}

}  // namespace icecache
