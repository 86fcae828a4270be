// sliding_windows_test.cpp — the windows cover the text's scored tokens once, in order.
#include "eval/sliding_windows.hpp"

#include <gtest/gtest.h>

namespace activekv::eval {
namespace {

TEST(SlidingWindows, ScoredSpansAreConsecutiveDisjointAndEndAtTheText) {
  for (std::uint32_t tokens : {8u, 9u, 100u, 1000u, 1027u}) {
    for (std::uint32_t context : {2u, 7u, 8u}) {
      for (std::uint32_t stride = 1; stride < context; ++stride) {
        Result<std::vector<Window>> w = plan_windows(tokens, context, stride, 0);
        ASSERT_TRUE(w.ok()) << w.error().describe();
        ASSERT_FALSE(w->empty());
        std::uint32_t next = context - stride;  // the first scored token
        for (const Window& x : *w) {
          EXPECT_EQ(x.end - x.begin, context);
          EXPECT_EQ(x.scored_begin, next);
          EXPECT_GE(x.scored_begin, x.begin + 1);  // a scored token has a token before it in its window
          EXPECT_LE(x.scored_tokens(), stride);
          EXPECT_GT(x.scored_tokens(), 0u);
          EXPECT_EQ(x.prefill_tokens() + 1 + x.scored_tokens(), context);
          next = x.end;
        }
        EXPECT_EQ(next, tokens) << tokens << " " << context << " " << stride;
      }
    }
  }
}

TEST(SlidingWindows, ExampleAndLimit) {
  Result<std::vector<Window>> w = plan_windows(10, 6, 2, 0);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 3u);
  EXPECT_EQ((*w)[0].begin, 0u);
  EXPECT_EQ((*w)[0].scored_begin, 4u);
  EXPECT_EQ((*w)[0].prefill_tokens(), 3u);  // tokens 0..2; token 3 is fed as decode and predicts 4
  EXPECT_EQ((*w)[2].begin, 4u);
  EXPECT_EQ((*w)[2].end, 10u);
  // The remainder window: 11 tokens, context 6, stride 2 → windows end at 6, 8, 10, then 11.
  w = plan_windows(11, 6, 2, 0);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 4u);
  EXPECT_EQ(w->back().begin, 5u);
  EXPECT_EQ(w->back().scored_begin, 10u);
  EXPECT_EQ(w->back().scored_tokens(), 1u);
  w = plan_windows(11, 6, 2, 2);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->size(), 2u);
}

TEST(SlidingWindows, RefusalsNameTheFlag) {
  Result<std::vector<Window>> w = plan_windows(100, 8, 0, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().setting, "--stride");
  w = plan_windows(100, 8, 8, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().setting, "--stride");
  w = plan_windows(100, 1, 1, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().setting, "--context");
  w = plan_windows(7, 8, 2, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().setting, "--context");
}

}  // namespace
}  // namespace activekv::eval
