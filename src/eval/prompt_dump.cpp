// prompt_dump.cpp — see prompt_dump.hpp.
#include "eval/prompt_dump.hpp"

#include <vector>

namespace activekv::eval {
namespace {

std::string spelled(const tokenizer::Tokenizer& tok, std::span<const engine::TokenId> ids) {
  std::string text;
  for (engine::TokenId id : ids) tok.decode_token(static_cast<tokenizer::TokenId>(id), false, text);
  return text;
}

}  // namespace

nlohmann::json passkey_prompts_json(const ReportHeader& h, std::string_view format, const tokenizer::Tokenizer& tok,
                                    std::span<const PasskeyCase> cases) {
  nlohmann::json prompts = nlohmann::json::array();
  for (const PasskeyCase& c : cases) {
    std::vector<engine::TokenId> ids = c.prompt.prefix;
    ids.insert(ids.end(), c.prompt.question.begin(), c.prompt.question.end());
    prompts.push_back({{"depth", c.depth},
                       {"key", c.prompt.key},
                       {"needle_token", c.prompt.needle_token},
                       {"question_token", c.prompt.prefix.size()},
                       {"tokens", ids},
                       {"text", spelled(tok, ids)}});
  }
  return {{"mode", "passkey"}, {"model", h.model}, {"context", h.context}, {"seed", h.seed},
          {"format", format},  {"prompts", prompts}};
}

nlohmann::json text_tokens_json(const ReportHeader& h, const tokenizer::Tokenizer& tok,
                                std::span<const engine::TokenId> tokens, std::span<const Window> windows) {
  nlohmann::json spans = nlohmann::json::array();
  for (const Window& w : windows) spans.push_back({w.begin, w.scored_begin, w.end});
  return {{"mode", "text"},     {"model", h.model},   {"text", h.text}, {"context", h.context},
          {"stride", h.stride}, {"tokens", std::vector<engine::TokenId>(tokens.begin(), tokens.end())},
          {"text_decoded", spelled(tok, tokens)}, {"windows", spans}};
}

}  // namespace activekv::eval
