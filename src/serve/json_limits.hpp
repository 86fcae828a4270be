// json_limits.hpp — JSON from outside input (trace lines, configuration files,
// request bodies), parsed within stated limits.
//
// What it owns: the one place where untrusted text becomes an nlohmann::json.
// The invariant: a value returned by parse_json() nests at most `depth_max`
// arrays/objects deep, so nothing that walks it afterwards (dump(), the
// destructor, a validator) can recurse without bound; and no message built
// here or by describe_json() is longer than a few hundred bytes, whatever the
// input — an error quotes a bounded prefix of the raw text, never a recursive
// rendering of the value.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv::serve {

// Nesting allowed in traces, configurations and request bodies: far beyond any
// real one (they nest two levels), far below what recursion can survive.
inline constexpr std::size_t json_depth_max = 64;

// Parses `text` as one JSON value. Refuses (malformed, setting = `what`):
// nesting deeper than depth_max (checked before the parser runs, in one linear
// pass), and anything nlohmann::json refuses (syntax, a number out of range).
// `comments` allows // and /* */ comments (configuration files).
Result<nlohmann::json> parse_json(std::string_view text, std::size_t depth_max, std::string_view what,
                                  bool comments = false);

// The deepest nesting of arrays and objects in `text` (strings skipped), stopping
// early once past `stop_after`. Linear, no recursion.
std::size_t json_nesting(std::string_view text, std::size_t stop_after);

// A short description of a parsed value for an error message: scalars as JSON
// (strings cut to 60 bytes), containers by kind and size. Never recurses.
std::string describe_json(const nlohmann::json& value);

// At most `bytes` of `text` for an error message, with "..." when cut.
std::string text_prefix(std::string_view text, std::size_t bytes = 80);

}  // namespace activekv::serve
