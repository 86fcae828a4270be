// fuzz_api_request.cpp — the server's request-body parser on arbitrary bytes.
//
// Any body, as a chat or a completion request, is either a request that keeps
// the parser's own promises (max_tokens within the limit, temperature and
// top_p in range, at most 4 non-empty stop strings, messages with known roles)
// or a refusal naming a field — never a crash, an escaped exception or
// undefined behaviour, however deep or large the JSON.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api_request.hpp"

using activekv::server::ApiKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  activekv::server::ApiLimits limits;
  limits.body_bytes_max = 64 * 1024;
  limits.depth_max = 16;
  limits.max_tokens_max = 8192;
  for (const ApiKind kind : {ApiKind::chat, ApiKind::completion}) {
    auto r = activekv::server::parse_api_request(text, kind, limits);
    if (!r.ok()) {
      if (r.error().setting.empty() || r.error().message.empty()) std::abort();  // a refusal must name the field
      continue;
    }
    if (r->max_tokens && (*r->max_tokens == 0 || *r->max_tokens > limits.max_tokens_max)) std::abort();
    if (!std::isfinite(r->temperature) || r->temperature < 0 || r->temperature > 2) std::abort();
    if (!(r->top_p > 0 && r->top_p <= 1)) std::abort();
    if (r->stop.size() > 4) std::abort();
    for (const auto& s : r->stop) {
      if (s.empty()) std::abort();
    }
    if (kind == ApiKind::chat) {
      if (r->messages.empty()) std::abort();
      for (const auto& m : r->messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant") std::abort();
      }
    } else if (r->prompt.empty()) {
      std::abort();
    }
  }
  return 0;
}
