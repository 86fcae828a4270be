// embedded_data.cpp — the default trace and configuration, compiled into the library.
//
// `activekv run` with no arguments must work from any directory, so the files
// it defaults to (data/default_trace.jsonl, configs/default.json) are included
// byte for byte with the assembler's .incbin; CMake passes their paths and
// rebuilds this file when either changes. The repository's files stay the
// single source: there is no second copy to drift.
#include <string_view>

#include "serve/run_config.hpp"
#include "serve/trace.hpp"

#define ACTIVEKV_EMBED(name, path)               \
  __asm__(".section .rodata\n"                   \
          ".global " #name "_begin\n"            \
          ".balign 16\n" #name "_begin:\n"       \
          ".incbin \"" path "\"\n"               \
          ".global " #name "_end\n" #name "_end:\n" \
          ".byte 0\n"                            \
          ".previous\n")

ACTIVEKV_EMBED(activekv_default_trace, ACTIVEKV_DEFAULT_TRACE_PATH);
ACTIVEKV_EMBED(activekv_default_config, ACTIVEKV_DEFAULT_CONFIG_PATH);

extern "C" const char activekv_default_trace_begin[];
extern "C" const char activekv_default_trace_end[];
extern "C" const char activekv_default_config_begin[];
extern "C" const char activekv_default_config_end[];

namespace activekv::serve {

std::string_view default_trace_text() noexcept {
  return {activekv_default_trace_begin, static_cast<std::size_t>(activekv_default_trace_end - activekv_default_trace_begin)};
}

std::string_view default_config_text() noexcept {
  return {activekv_default_config_begin,
          static_cast<std::size_t>(activekv_default_config_end - activekv_default_config_begin)};
}

}  // namespace activekv::serve
