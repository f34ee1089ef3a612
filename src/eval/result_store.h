// The results JSONL of an eval run: finished runs are read back at start (so a rerun skips
// them) and every new run is appended and flushed as soon as it completes.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "eval/record.h"
#include "icecache/status.h"

namespace icecache::eval {

class ResultStore {
 public:
  // Opens `path`, creating it and its folder if needed. A last line cut short by an interrupted
  // run is dropped (the file is truncated after its last complete line); any other bad line is
  // an error that names the file and line. Duplicate keys keep their first record.
  static Result<std::unique_ptr<ResultStore>> Open(const std::string& path);

  bool Has(const std::string& key) const { return keys_.count(key) != 0; }
  // Appends one line to the file (written through to the operating system, not buffered). A
  // write that fails part way (a full disk, a file size limit) is cut back off, so the file
  // keeps exactly the records before it and a later Append or run continues after them. (If
  // even that fails, the store refuses further appends; the next Open drops the cut-short line.)
  Status Append(const EvalRecord& record);

  const std::vector<EvalRecord>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  // Owns a file descriptor (-1: none).
  class Fd {
   public:
    Fd() = default;
    ~Fd() { Reset(-1); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    void Reset(int fd);  // closes the one held
    void Close() { Reset(-1); }

   private:
    int fd_ = -1;
  };
  ResultStore() = default;

  std::string path_;
  Fd file_;
  int64_t size_ = 0;  // bytes of complete lines in the file
  std::vector<EvalRecord> records_;
  std::set<std::string> keys_;
};

}  // namespace icecache::eval
