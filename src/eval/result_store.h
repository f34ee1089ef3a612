// The results JSONL of an eval run: finished runs are read back at start (so a rerun skips
// them) and every new run is appended and flushed as soon as it completes.
#pragma once

#include <cstdio>
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
  // Appends one line and flushes it to the file.
  Status Append(const EvalRecord& record);

  const std::vector<EvalRecord>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  ResultStore() = default;

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::vector<EvalRecord> records_;
  std::set<std::string> keys_;
};

}  // namespace icecache::eval
