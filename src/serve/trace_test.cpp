// trace_test.cpp — the trace reader: every field, and errors that name the line and field.
#include "serve/trace.hpp"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

namespace activekv::serve {
namespace {

Result<std::vector<TraceRequest>> read(const std::string& text) {
  std::istringstream in(text);
  return read_trace(in, "t.jsonl");
}

TEST(Trace, ReadsEveryField) {
  auto trace = read(
      "# a comment\n"
      "{\"id\": \"a\", \"arrival_s\": 0.5, \"prompt\": \"hello\", \"max_tokens\": 16, \"session\": \"s\"}\n"
      "\n"
      "{\"arrival_s\": 2, \"prompt_tokens\": [1, 2, 3], \"max_tokens\": 4, \"cancel_after_tokens\": 2}\n");
  ASSERT_TRUE(trace) << trace.error().describe();
  ASSERT_EQ(trace->size(), 2u);
  const TraceRequest& a = (*trace)[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_DOUBLE_EQ(a.arrival_s, 0.5);
  EXPECT_EQ(a.prompt, "hello");
  EXPECT_TRUE(a.prompt_tokens.empty());
  EXPECT_EQ(a.max_tokens, 16u);
  EXPECT_EQ(a.session, "s");
  EXPECT_EQ(a.cancel_after_tokens, -1);
  EXPECT_EQ(a.line, 2u);
  const TraceRequest& b = (*trace)[1];
  EXPECT_EQ(b.id, "line 4");
  EXPECT_EQ(b.prompt_tokens, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(b.cancel_after_tokens, 2);
  EXPECT_EQ(b.line, 4u);
}

// Each malformed line: the error names the file and line, and the field at fault.
TEST(Trace, MalformedLineNamesLineAndField) {
  struct Case {
    const char* line;
    const char* field;  // expected in the message
  };
  const Case cases[] = {
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": \"many\"}", "max_tokens"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 1.5}", "max_tokens"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\"}", "max_tokens"},
      {"{\"arrival_s\": -1, \"prompt\": \"x\", \"max_tokens\": 3}", "arrival_s"},
      {"{\"prompt\": \"x\", \"max_tokens\": 3}", "arrival_s"},
      {"{\"arrival_s\": 0, \"max_tokens\": 3}", "prompt"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"prompt_tokens\": [1], \"max_tokens\": 3}", "prompt_tokens"},
      {"{\"arrival_s\": 0, \"prompt_tokens\": [1, -2], \"max_tokens\": 3}", "prompt_tokens"},
      {"{\"arrival_s\": 0, \"prompt_tokens\": [], \"max_tokens\": 3}", "prompt_tokens"},
      {"{\"arrival_s\": 0, \"prompt\": 7, \"max_tokens\": 3}", "prompt"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 3, \"sesion\": \"s\"}", "sesion"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 3, \"session\": 4}", "session"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 3, \"cancel_after_tokens\": -1}", "cancel_after_tokens"},
      {"{\"arrival_s\": 0, \"prompt\": \"x\", \"max_tokens\": 3", "JSON"},
      {"[1, 2]", "JSON object"},
  };
  for (const Case& c : cases) {
    const std::string text = std::string("{\"arrival_s\": 0, \"prompt\": \"ok\", \"max_tokens\": 1}\n\n") + c.line + "\n";
    auto trace = read(text);
    ASSERT_FALSE(trace) << c.line;
    EXPECT_EQ(trace.error().code, ErrorCode::malformed) << c.line;
    EXPECT_EQ(trace.error().setting, "t.jsonl:3") << c.line;
    EXPECT_NE(trace.error().message.find(c.field), std::string::npos) << c.line << " -> " << trace.error().message;
  }
}

TEST(Trace, EmptyTraceAndMissingFileAreErrors) {
  auto empty = read("# nothing\n\n");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("no requests"), std::string::npos);
  auto missing = read_trace_file("/nonexistent/trace.jsonl");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_EQ(missing.error().setting, "--trace");
}

// The embedded default trace parses and spans the ranges (outputs 16..256, sessions).
TEST(Trace, DefaultTraceParses) {
  std::istringstream in{std::string(default_trace_text())};
  auto trace = read_trace(in, "default_trace.jsonl");
  ASSERT_TRUE(trace) << trace.error().describe();
  ASSERT_GE(trace->size(), 8u);
  std::uint32_t out_min = ~0u, out_max = 0, follow_ups = 0;
  std::size_t prompt_chars_max = 0;
  std::map<std::string, int> sessions;
  for (const TraceRequest& r : *trace) {
    out_min = std::min(out_min, r.max_tokens);
    out_max = std::max(out_max, r.max_tokens);
    prompt_chars_max = std::max(prompt_chars_max, r.prompt.size());
    if (!r.session.empty() && sessions[r.session]++ > 0) ++follow_ups;
  }
  EXPECT_EQ(out_min, 16u);
  EXPECT_EQ(out_max, 256u);
  EXPECT_GE(follow_ups, 2u);
  EXPECT_GT(prompt_chars_max, 20000u);  // the 7,000-token prompt
}

TEST(Trace, DeepNestingIsRefusedWithABoundedMessage) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto trace = read("{\"arrival_s\": 0, \"max_tokens\": 1, \"prompt_tokens\": " + deep + "}\n");
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.error().setting, "t.jsonl:1");
  EXPECT_NE(trace.error().message.find("nests"), std::string::npos);
  EXPECT_LT(trace.error().describe().size(), 300u);
}

TEST(Trace, AFileThatIsNoFileIsRefusedNamingTheFlag) {
  for (const char* path : {"/dev/zero", "/tmp", "/nonexistent/trace.jsonl"}) {
    auto trace = read_trace_file(path);
    ASSERT_FALSE(trace.ok()) << path;
    EXPECT_EQ(trace.error().setting, "--trace") << trace.error().describe();
    EXPECT_NE(trace.error().message.find(path), std::string::npos) << trace.error().describe();
  }
}

}  // namespace
}  // namespace activekv::serve
