// Status and Result<T>: the error type of every path a user or a request can reach.
//
// A Status is either OK or carries a code and a message that says what went wrong and where
// ("model.gguf: tensor 'blk.0.attn_q.weight' data [offset 123, 4096 bytes] is past the end of the
// file"). Result<T> holds either a value or a non-OK Status.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace icecache {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, bad request field, bad prompt
  kNotFound,           // missing file, unknown tensor or key
  kCorrupt,            // malformed file contents
  kUnsupported,        // valid input that this build cannot handle (architecture, tensor type)
  kOutOfRange,         // e.g. prompt longer than the context limit
  kResourceExhausted,  // out of memory or KV space
  kIoError,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "message" for errors, "OK" otherwise.
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (no-op on OK).
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status Corrupt(std::string message);
Status Unsupported(std::string message);
Status OutOfRange(std::string message);
Status ResourceExhausted(std::string message);
Status IoError(std::string message);
Status Internal(std::string message);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: !ok() for a meaningful status; returns OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok(). Aborts otherwise (an internal invariant, not a user error).
  T& value() & {
    if (!ok()) std::abort();
    return std::get<T>(v_);
  }
  const T& value() const& {
    if (!ok()) std::abort();
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) std::abort();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace icecache

#define ICECACHE_CONCAT_INNER_(a, b) a##b
#define ICECACHE_CONCAT_(a, b) ICECACHE_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define ICECACHE_RETURN_IF_ERROR(expr)           \
  do {                                           \
    ::icecache::Status icecache_st_ = (expr);    \
    if (!icecache_st_.ok()) return icecache_st_; \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define ICECACHE_ASSIGN_OR_RETURN(lhs, expr) \
  ICECACHE_ASSIGN_OR_RETURN_IMPL_(ICECACHE_CONCAT_(icecache_res_, __LINE__), lhs, expr)
// `res` names a variable and `lhs` may declare one: neither can take parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ICECACHE_ASSIGN_OR_RETURN_IMPL_(res, lhs, expr) \
  auto res = (expr);                                    \
  if (!res.ok()) return res.status();                   \
  lhs = std::move(res).value()
// NOLINTEND(bugprone-macro-parentheses)
