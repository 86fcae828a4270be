// result.cpp — naming and formatting of operating-condition errors.
#include "activekv/result.hpp"

namespace activekv {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::refused: return "refused";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::malformed: return "malformed";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::io: return "i/o";
    case ErrorCode::backend: return "backend";
    case ErrorCode::exhausted: return "exhausted";
  }
  return "unknown";
}

std::string Error::describe() const {
  if (setting.empty()) return message;
  return setting + ": " + message;
}

Error make_error(ErrorCode code, std::string setting, std::string message) {
  return Error{code, std::move(setting), std::move(message)};
}

}  // namespace activekv
