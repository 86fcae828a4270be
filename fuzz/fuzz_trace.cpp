// fuzz_trace.cpp — the JSON-lines trace reader on arbitrary text.
//
// Any input is either read as requests that keep the reader's rules (an id,
// an arrival time that is finite and not negative, a prompt) or refused with
// an error naming the line — never a crash, an exception or undefined
// behaviour.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "serve/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  auto trace = activekv::serve::read_trace(in, "fuzz.jsonl");
  if (trace.ok()) {
    for (const auto& request : *trace) {
      if (!(request.arrival_s >= 0.0) || !std::isfinite(request.arrival_s)) std::abort();
    }
  } else if (trace.error().message.empty()) {
    std::abort();  // a refusal must say what is wrong
  }
  (void)activekv::serve::parse_trace_line(text, 1, "fuzz.jsonl");
  return 0;
}
