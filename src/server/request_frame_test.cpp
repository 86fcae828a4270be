// request_frame_test.cpp — a request is whole only when its header and its whole body are there; every prefix is partial.
#include "server/request_frame.hpp"

#include <gtest/gtest.h>

#include <string>

namespace activekv::server {
namespace {

using State = Frame::State;

// Every strict prefix of a complete request is partial; the whole is complete with its exact length.
void expect_framed(const std::string& request, const std::string& next = "") {
  const FrameLimits limits{};
  for (std::size_t n = 0; n < request.size(); ++n) {
    const Frame f = frame_request(std::string_view(request).substr(0, n), limits);
    ASSERT_EQ(f.state, State::partial) << "prefix of " << n << " bytes of " << request;
  }
  const Frame f = frame_request(request + next, limits);
  ASSERT_EQ(f.state, State::complete);
  EXPECT_EQ(f.bytes, request.size());
}

TEST(RequestFrame, HeaderOnly) { expect_framed("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "GET /metrics HTTP/1.1\r\n"); }

TEST(RequestFrame, ContentLengthBody) {
  expect_framed("POST /v1/completions HTTP/1.1\r\ncontent-length: 11\r\n\r\n{\"a\":12345}", "POST /v1/comp");
}

TEST(RequestFrame, ChunkedBody) {
  expect_framed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nA;x=y\r\n0123456789\r\n0\r\n\r\n", "GET");
  expect_framed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nTrailer: 1\r\n\r\n");
}

TEST(RequestFrame, ExpectContinueIsSeenBeforeTheBody) {
  const Frame f = frame_request("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n", FrameLimits{});
  EXPECT_EQ(f.state, State::partial);
  EXPECT_TRUE(f.expects_continue);
}

TEST(RequestFrame, RefusedFramings) {
  const FrameLimits limits{};
  const auto status = [&](const std::string& s) {
    const Frame f = frame_request(s, limits);
    return f.state == State::refused ? f.status : 0;
  };
  EXPECT_EQ(status(std::string(limits.header_bytes_max, 'a')), 431);  // no blank line within the limit
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: " + std::to_string(limits.body_bytes_max + 1) + "\r\n\r\n"), 413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFF\r\n"), 413);
}

}  // namespace
}  // namespace activekv::server
