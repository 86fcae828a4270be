// passkey.cpp — see passkey.hpp.
#include "eval/passkey.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

#include "eval/text_eval.hpp"

namespace activekv::eval {
namespace {

constexpr const char* intro =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";
constexpr const char* filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
constexpr const char* question = "What is the pass key? The pass key is";

constexpr const char* chat_question = "What is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is";

// Plain text: user-defined tokens (Gemma's whitespace runs) are matched, control-token text is not.
std::vector<engine::TokenId> encode(const tokenizer::Tokenizer& tok, const std::string& text) {
  const std::vector<tokenizer::TokenId> ids = tok.encode(text, tokenizer::Special::user_defined);
  return {ids.begin(), ids.end()};
}

// The chat template's markers become their control tokens.
std::vector<engine::TokenId> encode_special(const tokenizer::Tokenizer& tok, const std::string& text) {
  const std::vector<tokenizer::TokenId> ids = tok.encode(text, tokenizer::Special::allow);
  return {ids.begin(), ids.end()};
}

bool answer_done(const std::string& answer) {
  const std::string digits = leading_digits(answer);
  if (digits.empty()) {  // nothing but spaces so far keeps it going; anything else ends it
    for (char c : answer) {
      if (std::isspace(static_cast<unsigned char>(c)) == 0) return true;
    }
    return false;
  }
  const std::size_t lead = answer.find(digits);
  return lead + digits.size() < answer.size();  // something followed the digits
}

// {id, logit, id, logit} of the two highest logits, ties to the lowest id (as argmax).
std::array<float, 4> two_highest(std::span<const float> logits) {
  std::size_t first = 0, second = logits.size() > 1 ? 1 : 0;
  if (logits.size() > 1 && logits[1] > logits[0]) std::swap(first, second);
  for (std::size_t i = 2; i < logits.size(); ++i) {
    if (logits[i] > logits[first]) {
      second = first;
      first = i;
    } else if (logits[i] > logits[second]) {
      second = i;
    }
  }
  return {static_cast<float>(first), logits[first], static_cast<float>(second), logits[second]};
}

// The needle's best rank per layer and group in the step just taken (see PasskeyTrial).
void note_needle_ranks(const KvRuntime& runtime, ContextId context, const PasskeyPrompt& prompt, bool sparse,
                       PasskeyTrial& entry) {
  std::vector<std::vector<std::uint32_t>> ranks;
  std::vector<std::uint32_t> budgets;
  if (sparse) {
    const MemoryPlan& plan = runtime.plan();
    const std::uint32_t P = plan.arena.page_tokens;
    const std::uint32_t first = prompt.needle_token / P, last = (prompt.needle_token + prompt.needle_tokens - 1) / P;
    for (std::uint32_t l = 0; l < plan.geometry.dense_layers; ++l) {
      std::vector<std::uint32_t> by_group(plan.geometry.kv_heads, UINT32_MAX);
      for (std::uint32_t g = 0; g < plan.geometry.kv_heads; ++g) {
        for (std::uint32_t page = first; page <= last; ++page) {
          by_group[g] = std::min(by_group[g], runtime.sparse_rank(context, l, g, page));
        }
      }
      ranks.push_back(std::move(by_group));
    }
    budgets = runtime.explain(context).sparse_layer_budget;
  }
  entry.needle_ranks.push_back(std::move(ranks));
  entry.budgets.push_back(std::move(budgets));
}

}  // namespace

std::string leading_digits(std::string_view answer) {
  std::size_t i = 0;
  while (i < answer.size() && std::isspace(static_cast<unsigned char>(answer[i])) != 0) ++i;
  std::size_t j = i;
  while (j < answer.size() && std::isdigit(static_cast<unsigned char>(answer[j])) != 0) ++j;
  return std::string(answer.substr(i, j - i));
}

Result<PasskeyPrompt> make_passkey_prompt(const tokenizer::Tokenizer& tok, std::uint32_t context, double depth,
                                          std::uint32_t key, PasskeyFormat format) {
  PasskeyPrompt p;
  p.key = fmt::format("{}", key);
  const bool chat = format == PasskeyFormat::chat;
  std::vector<engine::TokenId> head = chat ? encode_special(tok, "<|im_start|>user\n") : std::vector<engine::TokenId>{};
  const std::vector<engine::TokenId> intro_tokens = encode(tok, intro);
  head.insert(head.end(), intro_tokens.begin(), intro_tokens.end());
  const std::vector<engine::TokenId> unit = encode(tok, filler);
  const std::vector<engine::TokenId> needle = encode(tok, fmt::format("The pass key is {}. Remember it. {} is the pass key.\n", key, key));
  p.question = chat ? encode_special(tok, chat_question) : encode(tok, question);
  const std::size_t fixed = head.size() + needle.size() + p.question.size() + passkey_answer_tokens_max;
  if (context < fixed + unit.size())
    return make_error(ErrorCode::invalid_argument, "--context",
                      fmt::format("{} tokens cannot hold a passkey prompt: give at least {}", context, fixed + unit.size()));
  const std::size_t units = (context - fixed) / unit.size();
  const auto before = static_cast<std::size_t>(std::llround(depth * static_cast<double>(units)));
  p.prefix = head;
  for (std::size_t u = 0; u < units; ++u) {
    if (u == before) {
      p.needle_token = static_cast<std::uint32_t>(p.prefix.size());
      p.prefix.insert(p.prefix.end(), needle.begin(), needle.end());
    }
    p.prefix.insert(p.prefix.end(), unit.begin(), unit.end());
  }
  if (before == units) {
    p.needle_token = static_cast<std::uint32_t>(p.prefix.size());
    p.prefix.insert(p.prefix.end(), needle.begin(), needle.end());
  }
  if (tok.add_bos() && tok.bos()) {
    p.prefix.insert(p.prefix.begin(), static_cast<engine::TokenId>(*tok.bos()));
    ++p.needle_token;
  }
  p.needle_tokens = static_cast<std::uint32_t>(needle.size());
  return p;
}

Status check_passkey_request(const PasskeyRequest& r) {
  if (r.depths.empty() || r.depths.size() > passkey_depths_max)
    return make_error(ErrorCode::invalid_argument, "--depths", fmt::format("give 1 to {} depths", passkey_depths_max));
  for (double d : r.depths) {
    if (!(d >= 0.0 && d <= 1.0))
      return make_error(ErrorCode::invalid_argument, "--depths",
                        fmt::format("{} is not a depth: give numbers in [0, 1] (0 = start of the filler, 1 = its end)", d));
  }
  if (r.trials == 0 || r.trials > passkey_trials_max)
    return make_error(ErrorCode::invalid_argument, "--trials",
                      fmt::format("{} is out of range: give 1 to {}", r.trials, passkey_trials_max));
  return Status::success();
}

Result<std::vector<PasskeyCase>> make_passkey_prompts(const tokenizer::Tokenizer& tok, const PasskeyRequest& request) {
  if (Status st = check_passkey_request(request); !st) return st.error();
  std::vector<PasskeyCase> cases;
  std::mt19937_64 keys(request.seed);
  for (double depth : request.depths) {
    for (std::uint32_t trial = 0; trial < request.trials; ++trial) {
      const auto key = static_cast<std::uint32_t>(10000 + keys() % 90000);
      Result<PasskeyPrompt> prompt = make_passkey_prompt(tok, request.context, depth, key, request.format);
      if (!prompt) return prompt.error();
      cases.push_back(PasskeyCase{depth, std::move(prompt).value()});
    }
  }
  return cases;
}

Result<PasskeyResult> evaluate_passkey(EvalRig& rig, const tokenizer::Tokenizer& tok, std::span<const EvalSetting> settings,
                                       const PasskeyRequest& request, TrialProgress progress, void* user) {
  if (Status st = check_passkey_request(request); !st) return st.error();
  AK_ASSERT(!settings.empty(), "passkey: no setting");
  AK_ASSERT(!settings[0].sparse.enabled(), "passkey: exact must run first");
  PasskeyResult result;
  for (const EvalSetting& s : settings) result.settings.push_back(s.name);
  result.depths = request.depths;
  result.trials = request.trials;
  result.correct.assign(settings.size(), std::vector<std::uint32_t>(request.depths.size(), 0));
  Result<std::vector<PasskeyCase>> cases = make_passkey_prompts(tok, request);
  if (!cases) return cases.error();
  SettingContexts contexts(rig.forward(), rig.runtime(), settings);
  const std::uint32_t total = static_cast<std::uint32_t>(request.depths.size()) * request.trials;
  std::uint32_t done = 0;
  std::string piece;
  for (std::size_t d = 0; d < request.depths.size(); ++d) {
    for (std::uint32_t trial = 0; trial < request.trials; ++trial) {
      const PasskeyPrompt* prompt = &(*cases)[d * request.trials + trial].prompt;
      if (Status st = contexts.open(prompt->prefix, request.context); !st) return st.error();
      PasskeyTrial entry{request.depths[d], prompt->key, {}, {}, {}, {}, {}};
      for (std::uint32_t s = 0; s < settings.size(); ++s) {
        std::span<const float> logits;
        for (engine::TokenId t : prompt->question) {
          Result<std::span<const float>> l = contexts.decode(s, t);
          if (!l) return l.error();
          logits = *l;
        }
        note_needle_ranks(rig.runtime(), contexts.context(s), *prompt, settings[s].sparse.enabled(), entry);
        std::string answer;
        std::vector<std::array<float, 4>> top2;
        for (std::uint32_t a = 0; a < passkey_answer_tokens_max; ++a) {
          const engine::TokenId next = argmax(logits);
          top2.push_back(two_highest(logits));
          piece.clear();
          tok.decode_token(static_cast<tokenizer::TokenId>(next), true, piece);
          answer += piece;
          if (answer_done(answer) || a + 1 == passkey_answer_tokens_max) break;
          Result<std::span<const float>> l = contexts.decode(s, next);
          if (!l) return l.error();
          logits = *l;
        }
        const std::string digits = leading_digits(answer);
        if (digits == prompt->key) ++result.correct[s][d];
        entry.answers.push_back(digits);
        entry.texts.push_back(answer);
        entry.top2.push_back(std::move(top2));
      }
      contexts.close();
      result.log.push_back(std::move(entry));
      if (progress != nullptr) progress(user, ++done, total);
    }
  }
  for (std::uint32_t s = 0; s < settings.size(); ++s) result.selection.push_back(contexts.totals(s));
  return result;
}

}  // namespace activekv::eval
