// json_limits_test.cpp — depth-limited parsing and bounded descriptions (json_limits.hpp).
#include "serve/json_limits.hpp"

#include <gtest/gtest.h>

#include <string>

namespace activekv::serve {
namespace {

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonLimits, NestingCountsArraysAndObjectsButNotStrings) {
  EXPECT_EQ(json_nesting("1", 64), 0u);
  EXPECT_EQ(json_nesting(R"({"a": [1, {"b": []}]})", 64), 4u);
  EXPECT_EQ(json_nesting(R"(["[[[[", "\"[[[["])", 64), 1u);  // brackets inside strings, an escaped quote
  EXPECT_EQ(json_nesting(nested(1000), 10), 11u);           // stops once past the limit
}

TEST(JsonLimits, ParsesUpToTheLimitAndRefusesPastIt) {
  EXPECT_TRUE(parse_json(nested(64), 64, "x").ok());
  Result<nlohmann::json> deep = parse_json(nested(100000), 64, "trace.jsonl:3");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().setting, "trace.jsonl:3");
  EXPECT_NE(deep.error().message.find("more than 64 deep"), std::string::npos);
  EXPECT_LT(deep.error().describe().size(), 200u);  // a bounded prefix of the text, never the value
}

TEST(JsonLimits, SyntaxErrorsAreRefusedWithABoundedMessage) {
  Result<nlohmann::json> bad = parse_json("[1, 2, \"" + std::string(100000, 'x') + "\" x", 64, "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_LT(bad.error().describe().size(), 400u);
  Result<nlohmann::json> big = parse_json("1e400", 64, "config.json");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("not valid JSON"), std::string::npos);
}

TEST(JsonLimits, CommentsOnlyWhenAllowed) {
  EXPECT_FALSE(parse_json("// c\n{}", 64, "x").ok());
  EXPECT_TRUE(parse_json("// c\n{}", 64, "x", /*comments=*/true).ok());
}

TEST(JsonLimits, DescribeNeverRecursesAndIsBounded) {
  Result<nlohmann::json> value = parse_json(nested(64), 64, "x");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(describe_json(*value), "an array of 1 item");
  EXPECT_EQ(describe_json(nlohmann::json::object({{"a", 1}, {"b", 2}})), "an object of 2 fields");
  EXPECT_EQ(describe_json(nlohmann::json(7)), "7");
  const std::string long_text = describe_json(nlohmann::json(std::string(10000, 'x')));
  EXPECT_LT(long_text.size(), 120u);
  EXPECT_NE(long_text.find("10000 bytes"), std::string::npos);
  // A cut inside a multi-byte character is replaced, never an exception.
  EXPECT_NO_THROW((void)describe_json(nlohmann::json(std::string(59, 'x') + "\xC3\xA9" + std::string(10, 'y'))));
}

TEST(JsonLimits, TextPrefixIsBounded) {
  EXPECT_EQ(text_prefix("short"), "short");
  EXPECT_EQ(text_prefix(std::string(200, 'a'), 10), std::string(10, 'a') + "...");
}

}  // namespace
}  // namespace activekv::serve
