// api_request_test.cpp — every bad body gets an error naming its field; good bodies parse to what they say.
#include "server/api_request.hpp"

#include <gtest/gtest.h>

#include <string>

namespace activekv::server {
namespace {

ApiLimits limits() {
  ApiLimits l;
  l.body_bytes_max = 4096;
  l.depth_max = 8;
  l.max_tokens_max = 2048;
  return l;
}

std::string field_of(std::string_view body, ApiKind kind = ApiKind::chat) {
  auto r = parse_api_request(body, kind, limits());
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? std::string("(parsed)") : r.error().setting;
}

TEST(ApiRequest, ParsesAChatRequestWithEveryField) {
  auto r = parse_api_request(
      R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":7,
          "temperature":0,"top_p":0.5,"seed":42,"stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},
          "unknown_field":{"ignored":[1,2]}})",
      ApiKind::chat, limits());
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "hi");
  EXPECT_EQ(r->max_tokens, 7u);
  EXPECT_EQ(r->temperature, 0.0f);
  EXPECT_EQ(r->top_p, 0.5f);
  EXPECT_EQ(r->seed, 42u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(ApiRequest, ParsesACompletionWithDefaults) {
  auto r = parse_api_request(R"({"prompt":"Once upon","stop":"x"})", ApiKind::completion, limits());
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(r->prompt, "Once upon");
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_EQ(r->temperature, 1.0f);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x"}));
  EXPECT_FALSE(r->stream);
}

TEST(ApiRequest, EveryBadBodyNamesItsField) {
  EXPECT_EQ(field_of("{not json"), "body");
  EXPECT_EQ(field_of("[1,2]"), "body");
  EXPECT_EQ(field_of(R"({"model":"m"})"), "messages");
  EXPECT_EQ(field_of(R"({"messages":"hi"})"), "messages");
  EXPECT_EQ(field_of(R"({"messages":[]})"), "messages");
  EXPECT_EQ(field_of(R"({"messages":[{"role":"wizard","content":"x"}]})"), "messages[0].role");
  EXPECT_EQ(field_of(R"({"messages":[{"role":"user","content":"a"},{"role":"user"}]})"), "messages[1].content");
  EXPECT_EQ(field_of(R"({"messages":[{"role":"user","content":5}]})"), "messages[0].content");
  EXPECT_EQ(field_of(R"({"messages":[{"role":"user","content":"x"}],"model":7})"), "model");
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(field_of("{" + m + R"(,"max_tokens":0})"), "max_tokens");
  EXPECT_EQ(field_of("{" + m + R"(,"max_tokens":-3})"), "max_tokens");
  EXPECT_EQ(field_of("{" + m + R"(,"max_tokens":"10"})"), "max_tokens");
  EXPECT_EQ(field_of("{" + m + R"(,"max_tokens":1.5})"), "max_tokens");
  EXPECT_EQ(field_of("{" + m + R"(,"max_tokens":99999999999999})"), "max_tokens");
  EXPECT_EQ(field_of("{" + m + R"(,"temperature":-0.1})"), "temperature");
  EXPECT_EQ(field_of("{" + m + R"(,"temperature":2.5})"), "temperature");
  EXPECT_EQ(field_of("{" + m + R"(,"temperature":"hot"})"), "temperature");
  EXPECT_EQ(field_of("{" + m + R"(,"temperature":1e999})"), "body");  // the JSON parser refuses the overflow
  EXPECT_EQ(field_of("{" + m + R"(,"top_p":0})"), "top_p");
  EXPECT_EQ(field_of("{" + m + R"(,"top_p":1.01})"), "top_p");
  EXPECT_EQ(field_of("{" + m + R"(,"seed":"x"})"), "seed");
  EXPECT_EQ(field_of("{" + m + R"(,"stop":[1]})"), "stop");
  EXPECT_EQ(field_of("{" + m + R"(,"stop":["a","b","c","d","e"]})"), "stop");
  EXPECT_EQ(field_of("{" + m + R"(,"stop":""})"), "stop");
  EXPECT_EQ(field_of("{" + m + R"(,"stream":"yes"})"), "stream");
  EXPECT_EQ(field_of("{" + m + R"(,"stream_options":{"include_usage":1}})"), "stream_options.include_usage");
  EXPECT_EQ(field_of("{" + m + R"(,"n":2})"), "n");
  EXPECT_EQ(field_of(R"({"prompt":3})", ApiKind::completion), "prompt");
  EXPECT_EQ(field_of(R"({})", ApiKind::completion), "prompt");
}

TEST(ApiRequest, NaNIsNotJsonAndIsRefused) {
  EXPECT_EQ(field_of(R"({"messages":[{"role":"user","content":"x"}],"temperature":NaN})"), "body");
}

TEST(ApiRequest, BodyOverTheSizeLimitIsRefusedBeforeParsing) {
  const std::string big = R"({"prompt":")" + std::string(5000, 'a') + R"("})";
  auto r = parse_api_request(big, ApiKind::completion, limits());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::exhausted);
  EXPECT_NE(r.error().message.find("4096"), std::string::npos) << r.error().message;
}

TEST(ApiRequest, NestingDeeperThanTheLimitIsRefusedBeforeParsing) {
  const std::string deep = R"({"prompt":"x","extra":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  ApiLimits l = limits();
  l.body_bytes_max = 1u << 20;
  auto r = parse_api_request(deep, ApiKind::completion, l);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("more than 8 deep"), std::string::npos) << r.error().message;
  // Brackets inside strings do not count.
  auto ok = parse_api_request(R"({"prompt":"[[[[[[[[[[[[[[[[[[[[\"{{{{{{{{{{{{"})", ApiKind::completion, l);
  EXPECT_TRUE(ok.ok());
}

}  // namespace
}  // namespace activekv::server
