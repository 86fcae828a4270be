// prompt_dump.hpp — the token ids `activekv eval` feeds, written out (--dump-prompt FILE), so
// that a peer implementation can be given the very same input (scripts/peer-passkey.sh).
//
// JSON, passkey mode: {"mode": "passkey", "model", "context", "seed", "format",
//   "prompts": [{"depth", "key", "needle_token", "question_token", "tokens": [ids],
//                "text": the ids' bytes}, …]}                               in the eval's order
// text mode: {"mode": "text", "model", "text", "context", "stride", "tokens": [ids], "text_decoded",
//   "windows": [[begin, scored_begin, end], …]}   (eval/sliding_windows.hpp: what each window reads and scores)
// `tokens` is every id the model is given before the answer (passkey: prefix then question, BOS
// included when the model adds one); `question_token` is where the question's ids begin (fed as
// decode steps), so the answer is predicted by the logits of the last id. The text spells control
// tokens out ("<|im_start|>"), so it tokenizes back to `tokens` with special tokens parsed.
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string>

#include "eval/eval_report.hpp"
#include "eval/passkey.hpp"
#include "eval/sliding_windows.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::eval {

nlohmann::json passkey_prompts_json(const ReportHeader& h, std::string_view format, const tokenizer::Tokenizer& tok,
                                    std::span<const PasskeyCase> cases);
nlohmann::json text_tokens_json(const ReportHeader& h, const tokenizer::Tokenizer& tok,
                                std::span<const engine::TokenId> tokens, std::span<const Window> windows);

}  // namespace activekv::eval
