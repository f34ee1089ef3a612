// Keys and queries recorded from a model run, as the selection benchmark reads them: for a few
// layers, the post-RoPE key of every token of every KV head and the query vectors (all query
// heads) at chosen positions, plus the token ids. One binary file, little-endian.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "icecache/status.h"

namespace icecache::bench {

struct RecordedKeys {
  std::string source;           // what was recorded (model, text), for the report
  std::vector<int32_t> layers;  // model layers recorded, in file order
  int n_kv_heads = 0, n_heads = 0, head_dim = 0;
  std::vector<int32_t> tokens;           // [T]
  std::vector<int64_t> query_positions;  // ascending
  std::vector<float> keys;               // [layer][T][kv head][head_dim]
  std::vector<float> queries;            // [layer][query][head][head_dim]

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
  const float* Key(int layer, int64_t pos, int head) const {
    return keys.data() +
           ((static_cast<int64_t>(layer) * length() + pos) * n_kv_heads + head) * head_dim;
  }
  // The n_heads query vectors of the token at query_positions[i].
  const float* Query(int layer, int64_t i) const {
    const int64_t nq = static_cast<int64_t>(query_positions.size());
    return queries.data() + ((static_cast<int64_t>(layer) * nq + i) * n_heads) * head_dim;
  }
  // Index of `pos` in query_positions, or -1.
  int64_t QueryIndex(int64_t pos) const {
    for (size_t i = 0; i < query_positions.size(); ++i) {
      if (query_positions[i] == pos) return static_cast<int64_t>(i);
    }
    return -1;
  }
};

namespace key_file_internal {

constexpr char kMagic[8] = {'I', 'C', 'E', 'K', 'E', 'Y', 'S', '1'};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

template <typename T>
bool WriteVec(std::FILE* f, const std::vector<T>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return std::fwrite(&n, sizeof n, 1, f) == 1 &&
         (n == 0 || std::fwrite(v.data(), sizeof(T), v.size(), f) == v.size());
}

template <typename T>
bool ReadVec(std::FILE* f, std::vector<T>* v, int64_t max) {
  int64_t n = 0;
  if (std::fread(&n, sizeof n, 1, f) != 1 || n < 0 || n > max) return false;
  v->resize(static_cast<size_t>(n));
  return n == 0 || std::fread(v->data(), sizeof(T), v->size(), f) == v->size();
}

}  // namespace key_file_internal

inline Status SaveRecordedKeys(const RecordedKeys& r, const std::string& path) {
  using namespace key_file_internal;
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return NotFound(path + ": cannot create");
  const int32_t dims[3] = {r.n_kv_heads, r.n_heads, r.head_dim};
  const std::vector<char> source(r.source.begin(), r.source.end());
  const bool ok = std::fwrite(kMagic, 1, 8, f.get()) == 8 &&
                  std::fwrite(dims, sizeof dims, 1, f.get()) == 1 && WriteVec(f.get(), source) &&
                  WriteVec(f.get(), r.layers) && WriteVec(f.get(), r.tokens) &&
                  WriteVec(f.get(), r.query_positions) && WriteVec(f.get(), r.keys) &&
                  WriteVec(f.get(), r.queries);
  if (!ok) return Internal(path + ": write failed");
  return Status::Ok();
}

inline Result<RecordedKeys> LoadRecordedKeys(const std::string& path) {
  using namespace key_file_internal;
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return NotFound(path + ": cannot open");
  char magic[8];
  int32_t dims[3];
  RecordedKeys r;
  std::vector<char> source;
  const int64_t kMax = int64_t{1} << 34;
  if (std::fread(magic, 1, 8, f.get()) != 8 || std::string(magic, 8) != std::string(kMagic, 8)) {
    return Corrupt(path + ": not a recorded-keys file");
  }
  if (std::fread(dims, sizeof dims, 1, f.get()) != 1 || !ReadVec(f.get(), &source, 4096) ||
      !ReadVec(f.get(), &r.layers, 4096) || !ReadVec(f.get(), &r.tokens, kMax) ||
      !ReadVec(f.get(), &r.query_positions, kMax) || !ReadVec(f.get(), &r.keys, kMax) ||
      !ReadVec(f.get(), &r.queries, kMax)) {
    return Corrupt(path + ": truncated or malformed");
  }
  r.source.assign(source.begin(), source.end());
  r.n_kv_heads = dims[0];
  r.n_heads = dims[1];
  r.head_dim = dims[2];
  const int64_t L = static_cast<int64_t>(r.layers.size());
  if (r.n_kv_heads <= 0 || r.n_heads <= 0 || r.head_dim <= 0 ||
      static_cast<int64_t>(r.keys.size()) != L * r.length() * r.n_kv_heads * r.head_dim ||
      static_cast<int64_t>(r.queries.size()) !=
          L * static_cast<int64_t>(r.query_positions.size()) * r.n_heads * r.head_dim) {
    return Corrupt(path + ": sizes do not match the header");
  }
  return r;
}

}  // namespace icecache::bench
