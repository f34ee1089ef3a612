#include "icecache/status.h"

namespace icecache {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kCorrupt:
      return "corrupt";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const { return ok() ? std::string("OK") : message_; }

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

Status InvalidArgument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
Status Corrupt(std::string message) { return {StatusCode::kCorrupt, std::move(message)}; }
Status Unsupported(std::string message) { return {StatusCode::kUnsupported, std::move(message)}; }
Status OutOfRange(std::string message) { return {StatusCode::kOutOfRange, std::move(message)}; }
Status ResourceExhausted(std::string message) {
  return {StatusCode::kResourceExhausted, std::move(message)};
}
Status IoError(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

}  // namespace icecache
