// sliding_windows.cpp — see sliding_windows.hpp.
#include "eval/sliding_windows.hpp"

#include <fmt/format.h>

namespace activekv::eval {

Result<std::vector<Window>> plan_windows(std::uint32_t tokens, std::uint32_t context, std::uint32_t stride,
                                         std::uint32_t windows_max) {
  if (context < 2)
    return make_error(ErrorCode::invalid_argument, "--context",
                      fmt::format("{} tokens leave nothing to predict from: give at least 2", context));
  if (stride == 0 || stride >= context)
    return make_error(ErrorCode::invalid_argument, "--stride",
                      fmt::format("{} is out of range: give 1 to {} (below --context {}: the first token of a window "
                                  "has nothing to be predicted from)",
                                  stride, context - 1, context));
  if (tokens < context)
    return make_error(ErrorCode::invalid_argument, "--context",
                      fmt::format("the text has {} tokens, fewer than the window of {}: lower --context or give a "
                                  "longer --text",
                                  tokens, context));
  std::vector<Window> out;
  std::uint32_t scored_until = context - stride;  // tokens before it are context only
  for (std::uint64_t begin = 0; begin + context <= tokens; begin += stride) {
    if (windows_max != 0 && out.size() == windows_max) return out;
    const auto b = static_cast<std::uint32_t>(begin);
    out.push_back(Window{b, b + context - stride, b + context});
    scored_until = b + context;
  }
  if (scored_until < tokens && (windows_max == 0 || out.size() < windows_max)) {
    // The remainder: a last window ending at the text's end, scoring what no window scored.
    out.push_back(Window{tokens - context, scored_until, tokens});
  }
  return out;
}

}  // namespace activekv::eval
