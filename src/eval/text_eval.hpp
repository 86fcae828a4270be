// text_eval.hpp — perplexity and top-1 agreement of each setting over a text.
//
// For every window (sliding_windows.hpp) the settings' contexts share the
// window's exact prefix (setting_contexts.hpp); then each setting in turn
// feeds the window's scored span one token at a time, as decode steps under
// its setting (teacher forcing: the text's token, never the model's choice),
// and scores the logits after each step against the text's next token:
//
//   nll(t)     = logsumexp(logits) − logits[token t]        (natural log, double)
//   perplexity = exp(Σ nll / scored tokens)
//   top-1      = share of scored tokens whose argmax (lowest index among ties)
//                equals exact's argmax at the same token
//
// Exact runs first in every window, so its argmaxes are there to compare with.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/forward.hpp"
#include "eval/eval_rig.hpp"
#include "eval/setting_contexts.hpp"
#include "eval/sliding_windows.hpp"

namespace activekv::eval {

struct SettingScore {
  std::string name;
  double nll_sum = 0.0;
  std::uint64_t tokens = 0;        // scored
  std::uint64_t top1_agree = 0;    // argmax equal to exact's
  std::uint64_t decode_ns = 0;     // wall time of this setting's decode steps (measure mode included)
  SelectionTotals selection;

  double perplexity() const noexcept;
  double top1_agreement() const noexcept { return tokens == 0 ? 0.0 : double(top1_agree) / double(tokens); }
};

struct TextEvalResult {
  std::vector<SettingScore> settings;  // exact first
  std::uint32_t windows = 0;
  std::uint64_t scored_tokens = 0;     // per setting
  std::uint64_t tokens_prefilled = 0;  // all windows and settings together
  std::uint64_t tokens_adopted = 0;
};

// Called after each window (done of total), e.g. for a progress line.
using WindowProgress = void (*)(void* user, std::uint32_t done, std::uint32_t total);

// `tokens` is the whole text; every window fits the rig's context.
Result<TextEvalResult> evaluate_text(EvalRig& rig, std::span<const EvalSetting> settings,
                                     std::span<const engine::TokenId> tokens, std::span<const Window> windows,
                                     WindowProgress progress = nullptr, void* user = nullptr);

// The scoring arithmetic, on its own for tests: −log softmax(logits)[target], and the argmax.
double negative_log_likelihood(std::span<const float> logits, engine::TokenId target) noexcept;
engine::TokenId argmax(std::span<const float> logits) noexcept;

}  // namespace activekv::eval
