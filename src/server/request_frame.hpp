// request_frame.hpp — where one HTTP/1.1 request ends in the bytes read from a connection so far.
//
// The connection gate (connection_gate.hpp) reads a request whole before any
// worker thread sees it, so a client that sends half a request holds no thread.
// It asks this pure function after every read: is the request complete (its
// header, and its body by Content-Length or chunked framing), still partial, or
// refused (a header or body above the limits, a framing that cannot be read)?
// Invariant: `complete` is returned only when the first `bytes` bytes hold the
// whole request, so the worker that parses it never waits on the client.
#pragma once

#include <cstddef>
#include <string_view>

namespace activekv::server {

struct FrameLimits {
  std::size_t header_bytes_max = 16 * 1024;  // request line and headers, the blank line included
  std::size_t body_bytes_max = 4u << 20;     // what the gate buffers; the body parser's own limit is lower
};

struct Frame {
  enum class State { partial, complete, refused };
  State state = State::partial;
  std::size_t bytes = 0;          // complete: the request's length, header and body
  std::size_t header_bytes = 0;   // once the header is complete: its length, the blank line included
  bool expects_continue = false;  // the header asks for "100 Continue" before the body is sent
  int status = 0;                 // refused: 400, 413 or 431
  const char* reason = "";        // refused: what is wrong, for the error body
};

Frame frame_request(std::string_view bytes, const FrameLimits& limits);

}  // namespace activekv::server
