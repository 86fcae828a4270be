// trace.hpp — a workload as requests with arrival times, read from JSON lines.
//
// One request per line:
//
//   {"id": "r01", "arrival_s": 0.5, "prompt": "text ...", "max_tokens": 64, "session": "a"}
//   {"arrival_s": 2.0, "prompt_tokens": [1, 2, 3], "max_tokens": 16}
//
//   arrival_s            seconds after the run starts (>= 0)
//   prompt | prompt_tokens   text (tokenized with the model's tokenizer) or token ids; exactly one
//   max_tokens           tokens to generate, >= 1
//   session              optional: a later request of the same session is a follow-up turn;
//                        its prompt is the previous request's prompt + answer + this text
//   cancel_after_tokens  optional: cancel the request once it has produced this many tokens
//                        (0: cancel as soon as it has been admitted)
//   id                   optional: a name for reports (default "line N")
//
// Blank lines and lines whose first non-space character is '#' are skipped.
// Anything else that does not parse — bad JSON, a missing or mistyped field, an
// unknown field (a typo must not silently change the workload) — is an Error
// whose setting names the file and line ("trace.jsonl:7") and whose message
// names the field.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::serve {

struct TraceRequest {
  std::string id;                          // for reports
  double arrival_s = 0.0;                  // after the run starts
  std::string prompt;                      // text; empty when prompt_tokens is given
  std::vector<std::int32_t> prompt_tokens; // ids; empty when prompt is given
  std::uint32_t max_tokens = 0;            // tokens to generate
  std::string session;                     // empty: not part of a session
  std::int64_t cancel_after_tokens = -1;   // -1: run to completion
  std::uint32_t line = 0;                  // 1-based line in its source
};

// Parses one non-blank line; `source` names the file in errors.
Result<TraceRequest> parse_trace_line(std::string_view text, std::uint32_t line, std::string_view source);

// Every request of a JSON-lines stream, in file order. Refuses an empty trace.
Result<std::vector<TraceRequest>> read_trace(std::istream& in, std::string_view source);
Result<std::vector<TraceRequest>> read_trace_file(const std::string& path);

// The default trace shipped in the repository (data/default_trace.jsonl),
// embedded in the library so `activekv run` needs no file.
std::string_view default_trace_text() noexcept;

}  // namespace activekv::serve
