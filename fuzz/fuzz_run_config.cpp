// fuzz_run_config.cpp — the run configuration reader on arbitrary text.
//
// Any input is either a configuration that passes its own cross-field checks
// or a refusal with a message — never a crash, an exception or undefined
// behaviour.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/run_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = activekv::serve::parse_run_config(text, "fuzz.json");
  if (config.ok()) {
    if (!config->validate("fuzz.json").ok()) std::abort();  // parse returned what validate refuses
  } else if (config.error().message.empty()) {
    std::abort();
  }
  return 0;
}
