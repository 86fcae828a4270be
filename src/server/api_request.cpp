// api_request.cpp — parsing and checking OpenAI request bodies (see api_request.hpp).
#include "server/api_request.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "serve/json_limits.hpp"

namespace activekv::server {

namespace {

using nlohmann::json;

Error bad(std::string field, std::string message) {
  return make_error(ErrorCode::invalid_argument, std::move(field), std::move(message));
}

std::string type_name(const json& v) { return v.type_name(); }

Result<float> read_unit(const json& body, const char* field, float fallback, double lo, double hi, bool lo_open) {
  if (!body.contains(field) || body[field].is_null()) return fallback;
  const json& v = body[field];
  if (!v.is_number()) return bad(field, fmt::format("must be a number, got {}", type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
    return bad(field, fmt::format("must be a finite number in {}{}, {}], got {}", lo_open ? "(" : "[", lo, hi, v.dump()));
  }
  return static_cast<float>(x);
}

}  // namespace

Result<ApiRequest> parse_api_request(std::string_view text, ApiKind kind, const ApiLimits& limits) {
  if (text.size() > limits.body_bytes_max) {
    return make_error(ErrorCode::exhausted, "body",
                      fmt::format("the body is {} bytes; the limit is {} bytes", text.size(), limits.body_bytes_max));
  }
  auto parsed = serve::parse_json(text, limits.depth_max, "body");
  if (!parsed) return parsed.error();
  const json body = std::move(parsed).value();
  if (!body.is_object()) return bad("body", fmt::format("must be a JSON object, got {}", type_name(body)));

  ApiRequest r;
  r.kind = kind;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return bad("model", fmt::format("must be a string, got {}", type_name(body["model"])));
    r.model = body["model"].get<std::string>();
  }
  if (kind == ApiKind::chat) {
    if (!body.contains("messages")) return bad("messages", "missing: a chat completion needs a messages array");
    const json& messages = body["messages"];
    if (!messages.is_array()) return bad("messages", fmt::format("must be an array, got {}", type_name(messages)));
    if (messages.empty()) return bad("messages", "must hold at least one message");
    if (messages.size() > limits.messages_max) {
      return bad("messages", fmt::format("{} messages; at most {}", messages.size(), limits.messages_max));
    }
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const json& m = messages[i];
      const std::string at = fmt::format("messages[{}]", i);
      if (!m.is_object()) return bad(at, fmt::format("must be an object, got {}", type_name(m)));
      if (!m.contains("role") || !m["role"].is_string()) return bad(at + ".role", "missing or not a string");
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant") {
        return bad(at + ".role", fmt::format("unknown role \"{}\" (system, user or assistant)", role));
      }
      if (!m.contains("content") || !m["content"].is_string()) {
        return bad(at + ".content", "missing or not a string (text content only)");
      }
      r.messages.push_back(ApiMessage{role, m["content"].get<std::string>()});
    }
  } else {
    if (!body.contains("prompt")) return bad("prompt", "missing: a completion needs a prompt string");
    if (!body["prompt"].is_string()) return bad("prompt", fmt::format("must be a string, got {}", type_name(body["prompt"])));
    r.prompt = body["prompt"].get<std::string>();
    if (r.prompt.empty()) return bad("prompt", "is empty");
  }
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(field) || body[field].is_null()) continue;
    const json& v = body[field];
    if (!v.is_number_integer()) return bad(field, fmt::format("must be a whole number, got {}", v.dump()));
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() == 0 : v.get<std::int64_t>() <= 0) {
      return bad(field, fmt::format("must be at least 1, got {}", v.dump()));
    }
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > limits.max_tokens_max) {
      return bad(field, fmt::format("{} exceeds the max context of {} tokens", v.dump(), limits.max_tokens_max));
    }
    r.max_tokens = static_cast<std::uint32_t>(v.get<std::uint64_t>());
  }
  auto temperature = read_unit(body, "temperature", 1.0f, 0.0, 2.0, false);
  if (!temperature) return temperature.error();
  r.temperature = *temperature;
  auto top_p = read_unit(body, "top_p", 1.0f, 0.0, 1.0, true);
  if (!top_p) return top_p.error();
  r.top_p = *top_p;
  if (body.contains("seed") && !body["seed"].is_null()) {
    const json& v = body["seed"];
    if (!v.is_number_integer()) return bad("seed", fmt::format("must be a whole number, got {}", v.dump()));
    r.seed = v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
  }
  if (body.contains("n") && !body["n"].is_null() && body["n"] != 1) {
    return bad("n", fmt::format("only n = 1 is served, got {}", body["n"].dump()));
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& v = body["stop"];
    if (v.is_string()) {
      r.stop.push_back(v.get<std::string>());
    } else if (v.is_array() && v.size() <= 4) {
      for (const json& s : v) {
        if (!s.is_string()) return bad("stop", fmt::format("must hold strings, got {}", type_name(s)));
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("stop", "must be a string or an array of at most 4 strings");
    }
    for (const std::string& s : r.stop) {
      if (s.empty()) return bad("stop", "a stop string must not be empty");
    }
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return bad("stream", fmt::format("must be true or false, got {}", body["stream"].dump()));
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& v = body["stream_options"];
    if (!v.is_object()) return bad("stream_options", fmt::format("must be an object, got {}", type_name(v)));
    if (v.contains("include_usage") && !v["include_usage"].is_null()) {
      if (!v["include_usage"].is_boolean()) return bad("stream_options.include_usage", "must be true or false");
      r.include_usage = v["include_usage"].get<bool>();
    }
  }
  return r;
}

}  // namespace activekv::server
