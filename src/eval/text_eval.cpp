// text_eval.cpp — see text_eval.hpp.
#include "eval/text_eval.hpp"

#include <chrono>
#include <cmath>

namespace activekv::eval {

double SettingScore::perplexity() const noexcept {
  return tokens == 0 ? 0.0 : std::exp(nll_sum / static_cast<double>(tokens));
}

double negative_log_likelihood(std::span<const float> logits, engine::TokenId target) noexcept {
  AK_ASSERT(target < logits.size(), "nll: target outside the logits");
  double max = -INFINITY;
  for (float x : logits) max = std::fmax(max, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  return max + std::log(sum) - static_cast<double>(logits[target]);
}

engine::TokenId argmax(std::span<const float> logits) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<engine::TokenId>(best);
}

Result<TextEvalResult> evaluate_text(EvalRig& rig, std::span<const EvalSetting> settings,
                                     std::span<const engine::TokenId> tokens, std::span<const Window> windows,
                                     WindowProgress progress, void* user) {
  AK_ASSERT(!settings.empty(), "text eval: no setting");
  AK_ASSERT(!settings[0].sparse.enabled(), "text eval: exact must run first (top-1 compares with it)");
  TextEvalResult result;
  result.settings.resize(settings.size());
  for (std::size_t s = 0; s < settings.size(); ++s) result.settings[s].name = settings[s].name;
  std::vector<engine::TokenId> exact_top;  // exact's argmax per scored token of the window
  SettingContexts contexts(rig.forward(), rig.runtime(), settings);
  for (const Window& w : windows) {
    AK_ASSERT(w.end <= tokens.size(), "text eval: a window past the text");
    AK_ASSERT(w.scored_begin > w.begin, "text eval: a scored token with nothing before it in its window");
    AK_ASSERT(w.scored_begin < w.end, "text eval: a window that scores nothing");
    if (Status st = contexts.open(tokens.subspan(w.begin, w.prefill_tokens()), w.end - w.begin); !st) return st.error();
    exact_top.assign(w.scored_tokens(), 0);
    for (std::uint32_t s = 0; s < settings.size(); ++s) {
      SettingScore& score = result.settings[s];
      const auto start = std::chrono::steady_clock::now();
      for (std::uint32_t t = w.scored_begin - 1; t + 1 < w.end; ++t) {
        Result<std::span<const float>> logits = contexts.decode(s, tokens[t]);
        if (!logits) return logits.error();
        const std::uint32_t i = t + 1 - w.scored_begin;
        const engine::TokenId top = argmax(*logits);
        if (s == 0) exact_top[i] = top;
        score.top1_agree += top == exact_top[i] ? 1 : 0;
        score.nll_sum += negative_log_likelihood(*logits, tokens[t + 1]);
        ++score.tokens;
      }
      score.decode_ns += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    }
    contexts.close();
    ++result.windows;
    result.scored_tokens += w.scored_tokens();
    if (progress != nullptr) progress(user, result.windows, static_cast<std::uint32_t>(windows.size()));
  }
  for (std::uint32_t s = 0; s < settings.size(); ++s) result.settings[s].selection = contexts.totals(s);
  result.tokens_prefilled = contexts.tokens_prefilled();
  result.tokens_adopted = contexts.tokens_adopted();
  return result;
}

}  // namespace activekv::eval
