// HfCheckpoint: the tensors of a Hugging Face model folder, one file or index-listed shards.
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "model/safetensors/safetensors_file.h"

namespace icecache {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string Quote(const std::string& s) { return "'" + s + "'"; }

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Shards live next to the index: a bare file name, never a path that could leave the folder.
bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

// Reads the index and returns tensor name -> shard file name.
Result<std::map<std::string, std::string>> ReadIndex(const std::string& index_path) {
  ICECACHE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(index_path));
  json j;
  try {
    j = json::parse(file->data(), file->data() + file->size());
  } catch (const json::exception& e) {
    return Corrupt(index_path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return Corrupt(index_path + ": not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return Corrupt(index_path + ": missing \"weight_map\" object");
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return Corrupt(index_path + ": weight_map entry " + Quote(name) + " is not a string");
    }
    const std::string file_name = shard.get<std::string>();
    if (!IsPlainFileName(file_name)) {
      return Corrupt(index_path + ": weight_map entry " + Quote(name) + " names shard " +
                     Quote(file_name) + ", which is not a file name inside the model folder");
    }
    out[name] = file_name;
  }
  if (out.empty()) return Corrupt(index_path + ": \"weight_map\" lists no tensors");
  return out;
}

}  // namespace

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return NotFound(dir + ": no such directory");
  if (!fs::is_directory(dir, ec)) return InvalidArgument(dir + ": is not a directory");

  auto ckpt = std::unique_ptr<HfCheckpoint>(new HfCheckpoint());
  const fs::path index_path = fs::path(dir) / kIndexFile;
  std::vector<std::string> shard_names;  // parallel to files_
  std::map<std::string, std::string> weight_map;
  if (IsRegularFile(index_path)) {
    ICECACHE_ASSIGN_OR_RETURN(weight_map, ReadIndex(index_path.string()));
    std::set<std::string> shards;
    for (const auto& [name, shard] : weight_map) shards.insert(shard);
    for (const std::string& shard : shards) {
      const fs::path p = fs::path(dir) / shard;
      if (!IsRegularFile(p)) {
        std::string example;
        for (const auto& [name, s] : weight_map) {
          if (s == shard) {
            example = name;
            break;
          }
        }
        return NotFound(index_path.string() + ": shard " + Quote(shard) + " (holding tensor " +
                        Quote(example) + ") does not exist in " + dir);
      }
      ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                                SafetensorsFile::Open(p.string()));
      ckpt->files_.push_back(std::move(f));
      shard_names.push_back(shard);
    }
  } else if (IsRegularFile(fs::path(dir) / kSingleFile)) {
    ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                              SafetensorsFile::Open((fs::path(dir) / kSingleFile).string()));
    ckpt->files_.push_back(std::move(f));
    shard_names.push_back(kSingleFile);
  } else {
    return NotFound(dir + ": neither " + std::string(kSingleFile) + " nor " +
                    std::string(kIndexFile) + " found");
  }

  // Every tensor of every file, each name in exactly one file.
  for (size_t i = 0; i < ckpt->files_.size(); ++i) {
    for (const SafetensorsTensorInfo& t : ckpt->files_[i]->tensors()) {
      auto [it, inserted] = ckpt->by_name_.emplace(t.name, std::make_pair(i, &t));
      if (!inserted) {
        return Corrupt(dir + ": tensor " + Quote(t.name) + " is in two files: " +
                       Quote(shard_names[it->second.first]) + " and " + Quote(shard_names[i]));
      }
    }
  }
  // And the index must say where each listed tensor really is.
  for (const auto& [name, shard] : weight_map) {
    auto it = ckpt->by_name_.find(name);
    if (it == ckpt->by_name_.end() || shard_names[it->second.first] != shard) {
      return Corrupt(index_path.string() + ": tensor " + Quote(name) + " is listed in shard " +
                     Quote(shard) + ", but that file has no such tensor");
    }
  }
  return ckpt;
}

const SafetensorsTensorInfo* HfCheckpoint::FindTensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.second;
}

Tensor HfCheckpoint::TensorView(const SafetensorsTensorInfo& info) const {
  auto it = by_name_.find(info.name);
  ICECACHE_CHECK_MSG(it != by_name_.end() && it->second.second == &info,
                     "TensorView: tensor is not from this checkpoint");
  return files_[it->second.first]->TensorView(info);
}

std::vector<const SafetensorsTensorInfo*> HfCheckpoint::AllTensors() const {
  std::vector<const SafetensorsTensorInfo*> out;
  for (const auto& f : files_) {
    for (const SafetensorsTensorInfo& t : f->tensors()) out.push_back(&t);
  }
  return out;
}

}  // namespace icecache
