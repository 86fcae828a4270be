// sliding_windows.hpp — which tokens of a text each evaluation window reads and scores.
//
// Standard sliding-window evaluation with context N and stride S, shaped so
// that every scored token is predicted by a decode step (where sparse
// selection applies) with a long context behind it:
//
//   window k reads tokens [begin, end) with end − begin = N, begin = k·S
//   it scores the last S of them, [end − S, end): the tokens no earlier window
//   scored; a final window ending at the text's end scores the remainder
//   prefill: [begin, end − S − 1) in one exact pass (chunked)
//   decode:  tokens end − S − 1 … end − 2, one per step (teacher forcing); the
//            logits of the step that feeds token t predict token t + 1
//
// So consecutive windows score consecutive, disjoint spans, every scored token
// sees at least N − S − 1 tokens before it in its window, and the first N − S
// tokens of the text are context only (never scored). 1 ≤ S < N ≤ the text.
#pragma once

#include <cstdint>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::eval {

struct Window {
  std::uint32_t begin = 0;         // first token read
  std::uint32_t scored_begin = 0;  // first token scored (its logits come from feeding scored_begin − 1)
  std::uint32_t end = 0;           // one past the last token read and scored
  std::uint32_t prefill_tokens() const noexcept { return scored_begin - 1 - begin; }
  std::uint32_t scored_tokens() const noexcept { return end - scored_begin; }
};

// The windows over a text of `tokens` tokens, at most `windows_max` of them
// (0: all). Refused, naming the flag: stride 0 or not below the context, a
// context of fewer than 2 tokens, a text shorter than the context.
Result<std::vector<Window>> plan_windows(std::uint32_t tokens, std::uint32_t context, std::uint32_t stride,
                                         std::uint32_t windows_max);

}  // namespace activekv::eval
