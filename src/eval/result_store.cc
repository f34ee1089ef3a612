#include "eval/result_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace icecache::eval {

namespace fs = std::filesystem;

Result<std::unique_ptr<ResultStore>> ResultStore::Open(const std::string& path) {
  std::unique_ptr<ResultStore> store(new ResultStore());
  store->path_ = path;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec)
      return IoError(fmt::format("{}: cannot create folder: {}", parent.string(), ec.message()));
  }
  std::string text;
  if (fs::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return IoError(path + ": cannot read results file");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  // Complete lines end with '\n'; anything after the last one was cut short by an interruption.
  const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (complete < text.size()) {
    fs::resize_file(path, complete, ec);
    if (ec)
      return IoError(
          fmt::format("{}: cannot drop the cut-short last line: {}", path, ec.message()));
    std::fprintf(stderr, "note: %s: dropped a last line cut short by an interrupted run\n",
                 path.c_str());
  }
  size_t pos = 0;
  for (int line = 1; pos < complete; ++line) {
    const size_t end = text.find('\n', pos);
    const std::string row = text.substr(pos, end - pos);
    pos = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<EvalRecord> r = RecordFromJson(row);
    if (!r.ok()) {
      return Corrupt(fmt::format("{}:{}: {} (fix or delete this line to resume)", path, line,
                                 r.status().message()));
    }
    if (store->keys_.insert(r->Key()).second) store->records_.push_back(std::move(*r));
  }
  store->file_.reset(std::fopen(path.c_str(), "ab"));
  if (!store->file_) return IoError(path + ": cannot open results file for writing");
  return store;
}

Status ResultStore::Append(const EvalRecord& record) {
  const std::string line = RecordToJson(record) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() ||
      std::fflush(file_.get()) != 0) {
    return IoError(path_ + ": write failed");
  }
  if (keys_.insert(record.Key()).second) records_.push_back(record);
  return Status::Ok();
}

}  // namespace icecache::eval
