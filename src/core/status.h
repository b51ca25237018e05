// Status / StatusOr<T>: how input-dependent failures (files, configs, requests) travel upward.
// Internal invariants use MIMO_CHECK (check.h) instead.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace mimo {

enum class StatusCode { kOk, kInvalidArgument, kNotFound, kDataLoss, kUnimplemented, kInternal,
                        kResourceExhausted, kCount };

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// printf-style message builder.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define MIMO_STATUS_FN(Name, Code)                                                \
  template <typename... Args>                                                     \
  inline Status Name(const char* fmt, Args... args) {                             \
    if constexpr (sizeof...(Args) == 0) return Status(StatusCode::Code, fmt);     \
    else return Status(StatusCode::Code, StrFormat(fmt, args...));                \
  }
MIMO_STATUS_FN(InvalidArgument, kInvalidArgument)
MIMO_STATUS_FN(NotFound, kNotFound)
MIMO_STATUS_FN(DataLoss, kDataLoss)
MIMO_STATUS_FN(Unimplemented, kUnimplemented)
MIMO_STATUS_FN(Internal, kInternal)
MIMO_STATUS_FN(ResourceExhausted, kResourceExhausted)
#undef MIMO_STATUS_FN

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status s) : v_(std::move(s)) {}  // NOLINT: implicit like absl
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

#define MIMO_CONCAT_INNER(a, b) a##b
#define MIMO_CONCAT(a, b) MIMO_CONCAT_INNER(a, b)

#define MIMO_RETURN_IF_ERROR(expr)         \
  do {                                     \
    ::mimo::Status _st = (expr);           \
    if (!_st.ok()) return _st;             \
  } while (0)

#define MIMO_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto MIMO_CONCAT(_sor_, __LINE__) = (expr);                         \
  if (!MIMO_CONCAT(_sor_, __LINE__).ok())                             \
    return MIMO_CONCAT(_sor_, __LINE__).status();                     \
  lhs = std::move(MIMO_CONCAT(_sor_, __LINE__)).value()

}  // namespace mimo
