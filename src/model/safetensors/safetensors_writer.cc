#include <cstring>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/write_file.h"
#include "model/safetensors/safetensors_dtype.h"
#include "model/safetensors/safetensors_file.h"

namespace icecache {

void SafetensorsWriter::AddTensor(const std::string& name, DType dtype,
                                  std::span<const int64_t> shape, const void* data) {
  ICECACHE_CHECK_MSG(SafetensorsDTypeName(dtype) != nullptr, "safetensors: F32, F16, BF16 only");
  ICECACHE_CHECK(name != "__metadata__");
  for (const Pending& t : tensors_) ICECACHE_CHECK_MSG(t.name != name, name.c_str());
  int64_t numel = 1;
  for (int64_t d : shape) {
    ICECACHE_CHECK(d >= 0);
    numel *= d;
  }
  const auto nbytes = static_cast<size_t>(numel * BlockBytes(dtype));
  Pending p{name, dtype, {shape.begin(), shape.end()}, std::vector<uint8_t>(nbytes)};
  if (nbytes > 0) std::memcpy(p.data.data(), data, nbytes);
  tensors_.push_back(std::move(p));
}

void SafetensorsWriter::AddMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::vector<uint8_t> SafetensorsWriter::Serialize() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    const uint64_t end = offset + t.data.size();
    header[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  // Pad with spaces so that the data section starts 8-byte aligned (as the reference does).
  while ((8 + text.size()) % 8 != 0) text += ' ';

  // One allocation and memcpy (GCC 12 warns falsely about vector::insert here).
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (const Pending& t : tensors_) {
    if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return out;
}

Status SafetensorsWriter::WriteFile(const std::string& path) const {
  return WriteFileBytes(path, Serialize());
}

}  // namespace icecache
