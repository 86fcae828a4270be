// chat_template.hpp — the ChatML conversation format, as the model's template says.
//
// SmolLM2's tokenizer.chat_template (a Jinja program) renders, for messages
// m1..mn:
//
//   [if m1 is not a system message:]
//   <|im_start|>system\n{default system prompt}<|im_end|>\n
//   <|im_start|>{role}\n{content}<|im_end|>\n        (for each message)
//   <|im_start|>assistant\n                          (when a reply is wanted)
//
// Rather than interpret Jinja, this recognises a ChatML template (it must contain
// "<|im_start|>" and "<|im_end|>") and renders that format; the default system
// prompt is read out of the template text — the literal between
// "<|im_start|>system\n" and the next "<|im_end|>" — so a model whose template
// has none gets none. A template that is not ChatML is refused with an error
// naming tokenizer.chat_template, never silently rendered as something else.
// The rendered text is encoded with special tokens allowed.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "activekv/result.hpp"
#include "gguf/gguf.hpp"

namespace activekv::tokenizer {

struct ChatMessage {
  std::string_view role;     // "system", "user", "assistant"
  std::string_view content;
};

class ChatTemplate {
 public:
  // From tokenizer.chat_template; a file without one gets plain ChatML with no default system prompt.
  static Result<ChatTemplate> from_gguf(const gguf::File& file);
  // From a template's text (for tests and other sources).
  static Result<ChatTemplate> from_text(std::string_view jinja, std::string_view source);

  const std::string& default_system_prompt() const noexcept { return default_system_; }

  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  // One user turn, with the default system prompt when the template has one.
  std::string render_prompt(std::string_view user, bool add_generation_prompt = true) const;

 private:
  std::string default_system_;
};

}  // namespace activekv::tokenizer
