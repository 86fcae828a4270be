// result.hpp — operating conditions as values.
//
// An Error is what a user or a caller must act on: it names the setting at
// fault and says what to change ("host pool must be at least 2 GiB ...").
// Result<T> holds either a T or an Error; reading the wrong one is a
// programming error and aborts. Errors allocate (a string) and so never
// appear on the step path: there, conditions such as "no free page" are
// plain enum results.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "activekv/assert.hpp"

namespace activekv {

enum class ErrorCode {
  invalid_argument,  // a value the user gave is malformed or out of range
  refused,           // a valid request the plan cannot honour (too small, automatic size)
  not_found,         // a file or name that does not exist
  malformed,         // outside input (a file, a trace line) that does not parse
  unsupported,       // well-formed, but not something this build handles
  io,                // the operating system said no (open, mmap, mlock)
  backend,           // a device API failed
  exhausted,         // a bounded resource is used up
};

const char* error_code_name(ErrorCode code) noexcept;

struct Error {
  ErrorCode code;
  std::string setting;  // the option, field or file at fault ("--host-pool"); may be empty
  std::string message;  // what is wrong and what to change

  // "--host-pool: host pool must be at least ..." or just the message.
  std::string describe() const;
};

Error make_error(ErrorCode code, std::string setting, std::string message);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    AK_ASSERT(ok(), "Result::value() on an error");
    return std::get<0>(state_);
  }
  const T& value() const& {
    AK_ASSERT(ok(), "Result::value() on an error");
    return std::get<0>(state_);
  }
  T&& value() && {
    AK_ASSERT(ok(), "Result::value() on an error");
    return std::get<0>(std::move(state_));
  }
  const Error& error() const& {
    AK_ASSERT(!ok(), "Result::error() on a value");
    return std::get<1>(state_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> state_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT: implicit by design
  static Status success() { return {}; }

  bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& {
    AK_ASSERT(failed_, "Status::error() on success");
    return error_;
  }

 private:
  Error error_{};
  bool failed_ = false;
};

}  // namespace activekv
