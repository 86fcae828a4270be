// chat_template.hpp — the model's conversation format, recognised from its
// tokenizer.chat_template and rendered natively.
//
// A chat template is a Jinja program. Rather than interpret Jinja, this
// recognises the common families from markers in the template's text and renders
// what their templates render for plain text messages (system, user, assistant;
// no tools), equal to the `jinja2` package's rendering of the same template
// (tests/tokenizer/compare_chat_templates.py checks each family on real templates):
//
//   chatml   "<|im_start|>" and "<|im_end|>" (SmolLM2, Qwen2.5, Qwen3):
//            [<|im_start|>system\n{default}<|im_end|>\n when the first message is
//            not a system message and the template has a literal default]
//            <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   llama3   "<|start_header_id|>" and "<|eot_id|>": {bos}; Llama 3.1+ templates (they
//            say "Cutting Knowledge Date") always open with a system header holding the
//            knowledge date, "Today Date: " + the template's date_string (or today, for
//            templates that call strftime_now) and the trimmed system message; each
//            turn <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
//   gemma    "<start_of_turn>" and "<end_of_turn>": {bos} <start_of_turn>{user|model}\n
//            {content|trim}<end_of_turn>\n ... <start_of_turn>model\n; Gemma 3's template
//            (first_user_prefix) puts the system message before the first turn's text,
//            Gemma 2's refuses a system message
//   mistral  "[INST]" with the Mistral Nemo form: {bos}[INST]{content}[/INST] per user
//            turn (the system message before the last user turn), {content}{eos} per
//            assistant turn
//
// Anything else — no template, another family, or a variant of these whose form
// is not the one above — is `unsupported` with a reason naming the template, so
// a server can answer chat requests with an error while completions still work.
// The rendered text is encoded with special tokens allowed and without adding a
// BOS: the text holds the template's own {bos} (renders_bos()).
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

enum class ChatFamily { chatml, llama3, gemma, mistral, unsupported };

std::string_view chat_family_name(ChatFamily family) noexcept;

class ChatTemplate {
 public:
  // Recognises tokenizer.chat_template; an absent or unrecognised template gives
  // family() == unsupported (with reason()), never an error. Errors are for
  // malformed metadata only.
  static Result<ChatTemplate> recognise(const gguf::File& file);
  // The same, for callers that need a renderable template: unsupported is an error naming it.
  static Result<ChatTemplate> from_gguf(const gguf::File& file);
  // From a template's text; bos/eos are the texts of the file's BOS and EOS tokens.
  static ChatTemplate recognise_text(std::string_view jinja, std::string_view bos = {}, std::string_view eos = {},
                                     std::string_view source = "tokenizer.chat_template");
  static Result<ChatTemplate> from_text(std::string_view jinja, std::string_view source);

  ChatFamily family() const noexcept { return family_; }
  bool supported() const noexcept { return family_ != ChatFamily::unsupported; }
  // Why the template is unsupported (empty when supported): names the template and the families read.
  const std::string& reason() const noexcept { return reason_; }
  const std::string& default_system_prompt() const noexcept { return default_system_; }
  bool renders_bos() const noexcept { return !bos_.empty(); }

  // What the template refuses (Gemma 2: a system message; roles that do not alternate
  // where the template checks it), or unsupported; call before render().
  Status accepts(std::span<const ChatMessage> messages) const;
  // The prompt for `messages`. For an unsupported template or messages accepts()
  // refuses, the result is unspecified text (never a crash).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  // One user turn, with the default system prompt when the template has one.
  std::string render_prompt(std::string_view user, bool add_generation_prompt = true) const;

 private:
  std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_mistral(std::span<const ChatMessage> messages) const;

  ChatFamily family_ = ChatFamily::unsupported;
  std::string reason_;
  std::string source_;
  std::string default_system_;
  std::string bos_, eos_;
  std::string date_;            // llama3: the "Today Date" (empty: no system header)
  bool date_today_ = false;     // llama3: the template takes today's date (strftime_now)
  bool system_prefix_ = false;  // gemma: the system message prefixes the first turn (Gemma 3)
};

}  // namespace activekv::tokenizer
