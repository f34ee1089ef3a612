#include "eval/result_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "core/write_file.h"

namespace icecache::eval {

namespace fs = std::filesystem;

void ResultStore::Fd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

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
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError(fmt::format("{}: cannot open results file for writing: {}", path,
                               std::generic_category().message(errno)));
  }
  store->file_.Reset(fd);
  store->size_ = static_cast<int64_t>(complete);
  return store;
}

Status ResultStore::Append(const EvalRecord& record) {
  if (file_.get() < 0) return IoError(path_ + ": closed after a write that could not be undone");
  const std::string line = RecordToJson(record) + "\n";
  const int err =
      WriteAll(file_.get(), {reinterpret_cast<const uint8_t*>(line.data()), line.size()});
  if (err != 0) {
    // Cut what was written back off, so that the next line does not start inside this one.
    if (ftruncate(file_.get(), size_) != 0) {
      const int trunc_err = errno;
      file_.Close();  // appending after the cut-short line would spoil the next one too
      return IoError(fmt::format(
          "{}: write failed ({}), and its cut-short line stays at the end (the next run drops "
          "it): {}",
          path_, std::generic_category().message(err), std::generic_category().message(trunc_err)));
    }
    return IoError(
        fmt::format("{}: write failed: {}", path_, std::generic_category().message(err)));
  }
  size_ += static_cast<int64_t>(line.size());
  if (keys_.insert(record.Key()).second) records_.push_back(record);
  return Status::Ok();
}

}  // namespace icecache::eval
