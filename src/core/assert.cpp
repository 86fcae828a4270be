// assert.cpp — the one place a failed assertion ends the process.
#include "activekv/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace activekv {

void assert_fail(const char* expression, const char* message, const char* file, int line) noexcept {
  std::fprintf(stderr, "activekv: assertion failed: %s\n  %s\n  at %s:%d\n", message, expression, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace activekv
