// safetensors reader (single file) and a Hugging Face checkpoint view over one file or a sharded
// set with model.safetensors.index.json. Bounds-checked like the GGUF reader; fuzzed in CI.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"
#include "icecache/status.h"

namespace icecache {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype;  // F32, F16, BF16 (others are rejected with a message naming the tensor)
  std::vector<int64_t> shape;
  const uint8_t* data;
  uint64_t nbytes;
};

class SafetensorsFile {
 public:
  // Fails on a short file, a header length past the end, bad JSON, offsets out of bounds or not
  // matching shape x dtype, overlapping tensors, unsupported dtypes.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  static Result<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                        const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* FindTensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  Tensor TensorView(const SafetensorsTensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a Hugging Face model folder: model.safetensors, or the shards listed in
// model.safetensors.index.json (every listed shard must exist and hold what the index says).
class HfCheckpoint {
 public:
  static Result<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);
  const SafetensorsTensorInfo* FindTensor(const std::string& name) const;
  Tensor TensorView(const SafetensorsTensorInfo& info) const;
  // Every tensor of every shard, in a stable order.
  std::vector<const SafetensorsTensorInfo*> AllTensors() const;
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const SafetensorsTensorInfo*>> by_name_;
};

class SafetensorsWriter {
 public:
  // `data` is copied; dtype must be F32, F16 or BF16.
  void AddTensor(const std::string& name, DType dtype, std::span<const int64_t> shape,
                 const void* data);
  void AddMetadata(const std::string& key, const std::string& value);
  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace icecache
