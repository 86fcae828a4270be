// json_limits.cpp — depth-limited JSON parsing and bounded descriptions (see json_limits.hpp).
#include "serve/json_limits.hpp"

#include <fmt/format.h>

namespace activekv::serve {

std::size_t json_nesting(std::string_view text, std::size_t stop_after) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stop_after) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string text_prefix(std::string_view text, std::size_t bytes) {
  if (text.size() <= bytes) return std::string(text);
  return std::string(text.substr(0, bytes)) + "...";
}

Result<nlohmann::json> parse_json(std::string_view text, std::size_t depth_max, std::string_view what, bool comments) {
  if (json_nesting(text, depth_max) > depth_max) {
    return make_error(ErrorCode::malformed, std::string(what),
                      fmt::format("JSON nests arrays/objects more than {} deep (starts {})", depth_max,
                                  text_prefix(text, 40)));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, comments);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number too large (1e400)
    return make_error(ErrorCode::malformed, std::string(what),
                      fmt::format("not valid JSON ({})", text_prefix(e.what(), 200)));
  }
}

std::string describe_json(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::array:
      return fmt::format("an array of {} item{}", value.size(), value.size() == 1 ? "" : "s");
    case nlohmann::json::value_t::object:
      return fmt::format("an object of {} field{}", value.size(), value.size() == 1 ? "" : "s");
    case nlohmann::json::value_t::string: {
      const std::string& s = value.get_ref<const std::string&>();
      if (s.size() <= 60) return value.dump();
      return nlohmann::json(s.substr(0, 60)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + " (cut; " + std::to_string(s.size()) + " bytes)";
    }
    default:
      return value.dump();  // a scalar: bounded
  }
}

}  // namespace activekv::serve
