// trace.cpp — JSON-lines workload parsing with errors that name the line and field.
#include "serve/trace.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serve/input_file.hpp"
#include "serve/json_limits.hpp"

namespace activekv::serve {

namespace {

using nlohmann::json;

constexpr std::uint32_t max_tokens_max = 1u << 20;

Error line_error(std::string_view source, std::uint32_t line, std::string message) {
  return make_error(ErrorCode::malformed, fmt::format("{}:{}", source, line), std::move(message));
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

bool is_skipped(std::string_view text) {
  const std::string_view t = trim(text);
  return t.empty() || t.front() == '#';
}

// A JSON number that is a whole value in [lo, hi], or an error naming the field.
Result<std::int64_t> whole_number(const json& value, const char* field, std::int64_t lo, std::int64_t hi,
                                  std::string_view source, std::uint32_t line) {
  if (!value.is_number()) {
    return line_error(source, line, fmt::format("field \"{}\" must be a whole number, got {}", field, describe_json(value)));
  }
  const double d = value.get<double>();
  if (std::floor(d) != d || d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    return line_error(source, line,
                      fmt::format("field \"{}\" must be a whole number from {} to {}, got {}", field, lo, hi, describe_json(value)));
  }
  return static_cast<std::int64_t>(d);
}

Status read_prompt(const json& object, TraceRequest& request, std::string_view source, std::uint32_t line) {
  const bool has_text = object.contains("prompt");
  const bool has_tokens = object.contains("prompt_tokens");
  if (has_text == has_tokens) {
    return line_error(source, line, "exactly one of the fields \"prompt\" (text) and \"prompt_tokens\" (ids) is required");
  }
  if (has_text) {
    const json& text = object.at("prompt");
    if (!text.is_string()) return line_error(source, line, fmt::format("field \"prompt\" must be a string, got {}", describe_json(text)));
    request.prompt = text.get<std::string>();
    if (request.prompt.empty() && request.session.empty()) {
      return line_error(source, line, "field \"prompt\" is empty");
    }
    return {};
  }
  const json& ids = object.at("prompt_tokens");
  if (!ids.is_array() || ids.empty()) {
    return line_error(source, line, fmt::format("field \"prompt_tokens\" must be a non-empty array of token ids, got {}",
                                                describe_json(ids)));
  }
  request.prompt_tokens.reserve(ids.size());
  for (const json& id : ids) {
    auto value = whole_number(id, "prompt_tokens", 0, std::numeric_limits<std::int32_t>::max(), source, line);
    if (!value) return value.error();
    request.prompt_tokens.push_back(static_cast<std::int32_t>(*value));
  }
  return {};
}

}  // namespace

Result<TraceRequest> parse_trace_line(std::string_view text, std::uint32_t line, std::string_view source) {
  Result<json> parsed = parse_json(text, json_depth_max, fmt::format("{}:{}", source, line));
  if (!parsed) return parsed.error();
  json object = std::move(parsed).value();
  if (!object.is_object()) {
    return line_error(source, line, "a trace line must be a JSON object such as {\"arrival_s\": 0, \"prompt\": \"...\", \"max_tokens\": 16}");
  }
  for (const auto& [key, value] : object.items()) {
    (void)value;
    if (key != "id" && key != "arrival_s" && key != "prompt" && key != "prompt_tokens" && key != "max_tokens" &&
        key != "session" && key != "cancel_after_tokens") {
      return line_error(source, line,
                        fmt::format("unknown field \"{}\" (known: id, arrival_s, prompt, prompt_tokens, max_tokens, "
                                    "session, cancel_after_tokens)",
                                    key));
    }
  }
  TraceRequest request;
  request.line = line;
  request.id = fmt::format("line {}", line);
  if (object.contains("id")) {
    if (!object["id"].is_string()) return line_error(source, line, "field \"id\" must be a string");
    request.id = object["id"].get<std::string>();
  }
  if (!object.contains("arrival_s")) return line_error(source, line, "field \"arrival_s\" is missing");
  {
    const json& arrival = object["arrival_s"];
    if (!arrival.is_number() || !std::isfinite(arrival.get<double>()) || arrival.get<double>() < 0.0) {
      return line_error(source, line, fmt::format("field \"arrival_s\" must be a number of seconds >= 0, got {}", describe_json(arrival)));
    }
    request.arrival_s = arrival.get<double>();
  }
  if (!object.contains("max_tokens")) return line_error(source, line, "field \"max_tokens\" is missing");
  {
    auto max_tokens = whole_number(object["max_tokens"], "max_tokens", 1, max_tokens_max, source, line);
    if (!max_tokens) return max_tokens.error();
    request.max_tokens = static_cast<std::uint32_t>(*max_tokens);
  }
  if (object.contains("session")) {
    if (!object["session"].is_string() || object["session"].get<std::string>().empty()) {
      return line_error(source, line, "field \"session\" must be a non-empty string");
    }
    request.session = object["session"].get<std::string>();
  }
  if (object.contains("cancel_after_tokens")) {
    auto cancel = whole_number(object["cancel_after_tokens"], "cancel_after_tokens", 0, max_tokens_max, source, line);
    if (!cancel) return cancel.error();
    request.cancel_after_tokens = *cancel;
  }
  if (Status prompt = read_prompt(object, request, source, line); !prompt) return prompt.error();
  return request;
}

Result<std::vector<TraceRequest>> read_trace(std::istream& in, std::string_view source) {
  std::vector<TraceRequest> requests;
  std::string text;
  std::uint32_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (is_skipped(text)) continue;
    auto request = parse_trace_line(text, line, source);
    if (!request) return request.error();
    requests.push_back(std::move(request).value());
  }
  if (requests.empty()) {
    return make_error(ErrorCode::malformed, std::string(source), "the trace holds no requests (one JSON object per line)");
  }
  return requests;
}

Result<std::vector<TraceRequest>> read_trace_file(const std::string& path) {
  Result<std::string> text = read_input_file(path, trace_file_bytes_max, "--trace");
  if (!text) return text.error();
  std::istringstream in(std::move(text).value());
  return read_trace(in, path);
}

}  // namespace activekv::serve
