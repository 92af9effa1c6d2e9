// Status and Result<T>: errors are values (DESIGN principle 6). Bad user input
// becomes a Status with a message naming what failed; assert guards internals only.
#pragma once
#include <cassert>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode { kOk = 0, kInvalidArgument, kInvalidModel, kUnsupported, kNotFound, kIoError, kInternal };

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prepends context ("node 'conv1' (Conv): ") to the message of an error.
  Status with_context(const std::string& ctx) const {
    if (is_ok()) return *this;
    return Status(code_, ctx + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
Status invalid_argument(const Args&... args) { return Status(StatusCode::kInvalidArgument, cat(args...)); }
template <typename... Args>
Status invalid_model(const Args&... args) { return Status(StatusCode::kInvalidModel, cat(args...)); }
template <typename... Args>
Status unsupported(const Args&... args) { return Status(StatusCode::kUnsupported, cat(args...)); }
template <typename... Args>
Status io_error(const Args&... args) { return Status(StatusCode::kIoError, cat(args...)); }
template <typename... Args>
Status internal_error(const Args&... args) { return Status(StatusCode::kInternal, cat(args...)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status ok_status;
    return is_ok() ? ok_status : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

#define KILN_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::kiln::Status kiln_status_ = (expr);       \
    if (!kiln_status_.is_ok()) return kiln_status_; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()

#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)

// Validates user-controlled input; on failure returns kInvalidArgument with the message.
#define KILN_ENSURE(cond, ...)                                 \
  do {                                                         \
    if (!(cond)) return ::kiln::invalid_argument(__VA_ARGS__); \
  } while (0)
