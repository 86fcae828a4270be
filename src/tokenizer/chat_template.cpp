// chat_template.cpp — recognising ChatML and rendering it (see chat_template.hpp).
#include "tokenizer/chat_template.hpp"

namespace activekv::tokenizer {

namespace {
constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";
constexpr std::string_view kSystemStart = "<|im_start|>system\n";
}  // namespace

Result<ChatTemplate> ChatTemplate::from_gguf(const gguf::File& file) {
  if (!file.has("tokenizer.chat_template")) return ChatTemplate{};
  Result<std::string_view> jinja = file.get_string("tokenizer.chat_template");
  if (!jinja) return jinja.error();
  return from_text(*jinja, file.name());
}

Result<ChatTemplate> ChatTemplate::from_text(std::string_view jinja, std::string_view source) {
  if (jinja.find(kStart) == std::string_view::npos || jinja.find(kEnd) == std::string_view::npos) {
    return make_error(ErrorCode::unsupported, std::string(source),
                      "tokenizer.chat_template is not a ChatML template (no <|im_start|>/<|im_end|>); "
                      "only ChatML is supported");
  }
  ChatTemplate t;
  const std::size_t system = jinja.find(kSystemStart);
  if (system != std::string_view::npos) {
    const std::size_t begin = system + kSystemStart.size();
    const std::size_t end = jinja.find(kEnd, begin);
    if (end != std::string_view::npos) {
      const std::string_view literal = jinja.substr(begin, end - begin);
      // A literal, not a Jinja expression ("{{ message['content'] }}" is no default).
      if (literal.find("{{") == std::string_view::npos && literal.find("{%") == std::string_view::npos) {
        t.default_system_ = std::string(literal);
      }
    }
  }
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && !messages.empty() && messages.front().role != "system") {
    out.append(kSystemStart).append(default_system_).append(kEnd).append("\n");
  }
  for (const ChatMessage& m : messages) {
    out.append(kStart).append(m.role).append("\n").append(m.content).append(kEnd).append("\n");
  }
  if (add_generation_prompt) out.append(kStart).append("assistant\n");
  return out;
}

std::string ChatTemplate::render_prompt(std::string_view user, bool add_generation_prompt) const {
  const ChatMessage message{"user", user};
  return render(std::span<const ChatMessage>(&message, 1), add_generation_prompt);
}

}  // namespace activekv::tokenizer
