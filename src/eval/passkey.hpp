// passkey.hpp — retrieval of a number hidden at a chosen depth in filler text.
//
// The prompt (generated here, deterministic for a seed; after Mohtashami and
// Jaggi's landmark-attention passkey test):
//
//   There is an important piece of information hidden inside a lot of irrelevant text. ...
//   The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.   × k
//   The pass key is 48213. Remember it. 48213 is the pass key.                                  at depth d
//   The grass is green. ...                                                                     × rest
//   What is the pass key? The pass key is
//
// Depth d in [0, 1] places the needle after round(d × filler units) whole
// filler units; the prompt fills the context less answer_tokens_max tokens.
// Keys are five-digit numbers drawn from std::mt19937_64 seeded with --seed
// (a generator whose sequence the standard fixes), one per (depth, trial).
//
// Retrieval, per setting: everything before the question is the shared exact
// prefix (setting_contexts.hpp); the question's tokens are fed one at a time
// as decode steps under the setting — so the step that must find the needle
// is a sparse one — and then the answer is decoded greedily, at most
// answer_tokens_max tokens, stopping at the first token after the digits
// began that is not part of the number. Correct: the answer's digits, leading
// spaces dropped, are the key.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/eval_rig.hpp"
#include "eval/setting_contexts.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::eval {

inline constexpr std::uint32_t passkey_answer_tokens_max = 8;
inline constexpr std::uint32_t passkey_trials_max = 1000;
inline constexpr std::uint32_t passkey_depths_max = 101;

struct PasskeyPrompt {
  std::vector<engine::TokenId> prefix;    // intro, filler, needle, filler: prefilled exactly
  std::vector<engine::TokenId> question;  // fed as decode steps
  std::string key;                        // five digits
  std::uint32_t needle_token = 0;         // where the needle starts in the prompt (BOS counted)
  std::uint32_t needle_tokens = 0;        // its length in tokens
};

// The prompt for one trial: `context` tokens at most, answer room included.
// Refused (naming --context) when the context cannot hold the intro, the
// needle, the question, the answer and one filler unit.
// The prompt's format: plain (above), or chat — the same haystack as the user's turn of a ChatML
// conversation (the instruct model's own template) and the answer begun in the assistant's:
//   <|im_start|>user\n{intro}{filler…needle…filler}What is the pass key?<|im_end|>\n
//   <|im_start|>assistant\nThe pass key is
// (the question part, from "What is", fed as decode steps as before).
enum class PasskeyFormat : std::uint8_t { plain, chat };
Result<PasskeyPrompt> make_passkey_prompt(const tokenizer::Tokenizer& tok, std::uint32_t context, double depth,
                                          std::uint32_t key, PasskeyFormat format = PasskeyFormat::plain);

struct PasskeyRequest {
  std::uint32_t context = 0;
  std::vector<double> depths;  // each in [0, 1]
  std::uint32_t trials = 1;    // per depth
  std::uint64_t seed = 0;
  PasskeyFormat format = PasskeyFormat::plain;
};

struct PasskeyTrial {
  double depth = 0.0;
  std::string key;
  std::vector<std::string> answers;  // per setting, the digits it gave (may be empty)
  std::vector<std::string> texts;    // per setting, the answer as decoded (what the digits came from)
  // Per setting, per answer step: the two highest logits, {id, logit, id, logit} (ties: lowest id
  // first) — how close each greedy choice was, to hold against a peer's (scripts/peer-passkey.sh).
  std::vector<std::vector<std::array<float, 4>>> top2;
  // Per setting, at the step of the question's last token (the one whose logits give the
  // answer's first token): per dense layer and KV head group, the best rank of the needle's
  // pages among every page by the setting's score (sparse settings with per-group lists; empty
  // otherwise), and each layer's budget — a rank below the budget less the forced pages is read.
  std::vector<std::vector<std::vector<std::uint32_t>>> needle_ranks;  // [setting][layer][group]
  std::vector<std::vector<std::uint32_t>> budgets;                    // [setting][layer]
};

struct PasskeyResult {
  std::vector<std::string> settings;          // names, exact first
  std::vector<double> depths;
  std::vector<std::vector<std::uint32_t>> correct;  // [setting][depth]: trials retrieved
  std::uint32_t trials = 0;                   // per depth
  std::vector<PasskeyTrial> log;              // every trial, in order
  std::vector<SelectionTotals> selection;     // per setting, over the question's and the answer's steps
};

// Refused, naming the flag: a depth outside [0, 1] (--depths), trials 0 or past passkey_trials_max (--trials).
Status check_passkey_request(const PasskeyRequest& request);

// Every trial's prompt, in the order evaluate_passkey runs them (depth by depth, trial by trial),
// with the keys it draws: what `activekv eval --passkey --dump-prompt FILE` writes, so that a
// peer can be fed the very same token ids.
struct PasskeyCase {
  double depth = 0.0;
  PasskeyPrompt prompt;
};
Result<std::vector<PasskeyCase>> make_passkey_prompts(const tokenizer::Tokenizer& tok, const PasskeyRequest& request);

using TrialProgress = void (*)(void* user, std::uint32_t done, std::uint32_t total);

Result<PasskeyResult> evaluate_passkey(EvalRig& rig, const tokenizer::Tokenizer& tok, std::span<const EvalSetting> settings,
                                       const PasskeyRequest& request, TrialProgress progress = nullptr,
                                       void* user = nullptr);

// The digits an answer starts with (leading whitespace dropped): "48213" from " 48213.".
std::string leading_digits(std::string_view answer);

}  // namespace activekv::eval
