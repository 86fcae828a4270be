// request_frame.cpp — finding a request's end: header, then Content-Length or chunks (see request_frame.hpp).
#include "server/request_frame.hpp"

#include <cctype>
#include <cstdint>
#include <optional>

namespace activekv::server {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A number of `base` digits, at most `max`; nullopt when empty, not digits, or above max.
std::optional<std::size_t> parse_size(std::string_view s, int base, std::size_t max) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::size_t v = 0;
  for (const char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    v = v * static_cast<std::size_t>(base) + static_cast<std::size_t>(d);
    if (v > max) return max + 1;
  }
  return v;
}

Frame refuse(int status, const char* reason) {
  Frame f;
  f.state = Frame::State::refused;
  f.status = status;
  f.reason = reason;
  return f;
}

// The end of a chunked body that starts at `at`: its length, 0 while partial; refused frames as above.
Frame chunked_end(std::string_view bytes, std::size_t at, const FrameLimits& limits) {
  std::size_t p = at;
  std::size_t body = 0;
  while (true) {
    const std::size_t eol = bytes.find("\r\n", p);
    if (eol == std::string_view::npos) {
      if (bytes.size() - p > 64) return refuse(400, "a chunk size line is too long");
      return Frame{};
    }
    std::string_view line = bytes.substr(p, eol - p);
    line = trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
    const auto size = parse_size(line, 16, limits.body_bytes_max);
    if (!size) return refuse(400, "a chunk size is not a hexadecimal number");
    body += *size;
    if (body > limits.body_bytes_max) return refuse(413, "the request body is larger than the server reads");
    p = eol + 2;
    if (*size == 0) {
      // Trailers, if any, end with a blank line; without them the blank line follows at once.
      if (bytes.size() - p < 2) return Frame{};
      if (bytes.compare(p, 2, "\r\n") == 0) {
        Frame f;
        f.state = Frame::State::complete;
        f.bytes = p + 2;
        return f;
      }
      const std::size_t end = bytes.find("\r\n\r\n", p);
      if (end == std::string_view::npos) return Frame{};
      Frame f;
      f.state = Frame::State::complete;
      f.bytes = end + 4;
      return f;
    }
    if (bytes.size() < p + *size + 2) return Frame{};
    if (bytes.compare(p + *size, 2, "\r\n") != 0) return refuse(400, "a chunk does not end with CRLF");
    p += *size + 2;
  }
}

}  // namespace

Frame frame_request(std::string_view bytes, const FrameLimits& limits) {
  const std::size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos || end + 4 > limits.header_bytes_max) {
    if (bytes.size() >= limits.header_bytes_max) return refuse(431, "the request line and headers are too large");
    return Frame{};
  }
  const std::size_t header_bytes = end + 4;
  std::optional<std::size_t> content_length;
  bool chunked = false;
  bool expects_continue = false;
  std::size_t p = bytes.find("\r\n") + 2;  // past the request line
  while (p < end + 2) {
    const std::size_t eol = bytes.find("\r\n", p);
    const std::string_view line = bytes.substr(p, eol - p);
    p = eol + 2;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // as httplib: a line without a colon is skipped
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      const auto n = parse_size(value, 10, SIZE_MAX / 2);
      if (!n || (content_length && *content_length != *n)) return refuse(400, "Content-Length is not one number");
      content_length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      if (!iequals(value, "chunked")) return refuse(400, "Transfer-Encoding other than chunked is not supported");
      chunked = true;
    } else if (iequals(name, "Expect")) {
      expects_continue = iequals(value, "100-continue");
    }
  }
  if (chunked && content_length) return refuse(400, "both Content-Length and Transfer-Encoding are given");
  Frame f;
  f.header_bytes = header_bytes;
  f.expects_continue = expects_continue;
  if (chunked) {
    Frame c = chunked_end(bytes, header_bytes, limits);
    c.header_bytes = header_bytes;
    c.expects_continue = expects_continue;
    return c;
  }
  const std::size_t body = content_length.value_or(0);
  if (body > limits.body_bytes_max) return refuse(413, "the request body is larger than the server reads");
  if (bytes.size() < header_bytes + body) return f;
  f.state = Frame::State::complete;
  f.bytes = header_bytes + body;
  return f;
}

}  // namespace activekv::server
