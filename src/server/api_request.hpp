// api_request.hpp — an OpenAI request body, checked: text in, a request or the field at fault out.
//
// A pure function (no server, no engine) so it can be unit-tested and fuzzed.
// It owns the limits a body must respect before anything else reads it: at
// most body_bytes_max bytes, JSON nested at most depth_max deep (checked by a
// scan before the JSON parser runs, so a hostile body cannot recurse it), and
// max_tokens at most max_tokens_max (the max context). Every refusal is an
// Error whose `setting` names the field ("messages[2].role", "temperature")
// and whose message says what is wrong and what is allowed; the server turns
// it into a 400 with an OpenAI-style error object. Unknown fields are ignored,
// as OpenAI's own server does; `n` other than 1 is refused (one choice only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::server {

enum class ApiKind : std::uint8_t { chat, completion };

struct ApiMessage {
  std::string role;     // system, user, assistant
  std::string content;
};

struct ApiRequest {
  ApiKind kind = ApiKind::chat;
  std::string model;                     // empty: not given
  std::vector<ApiMessage> messages;      // chat
  std::string prompt;                    // completion
  std::optional<std::uint32_t> max_tokens;  // absent: the server's default
  float temperature = 1.0f;              // OpenAI's default; 0 is greedy
  float top_p = 1.0f;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;         // at most 4 strings, none empty
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
};

struct ApiLimits {
  std::size_t body_bytes_max = 1u << 20;     // 1 MiB
  std::uint32_t depth_max = 16;              // objects and arrays nested
  std::uint32_t max_tokens_max = 8192;       // the max context
  std::size_t messages_max = 256;
};

Result<ApiRequest> parse_api_request(std::string_view body, ApiKind kind, const ApiLimits& limits);

}  // namespace activekv::server
