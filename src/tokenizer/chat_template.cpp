// chat_template.cpp — recognising the template families and rendering them (see chat_template.hpp).
#include "tokenizer/chat_template.hpp"

#include <ctime>

namespace activekv::tokenizer {

namespace {

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

// Jinja's `trim` (Python's str.strip()) for the ASCII white space Python strips.
std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The literal default system prompt of a ChatML template: the text between
// "<|im_start|>system" + newline (real, or written "\n" inside a Jinja string)
// and the next "<|im_end|>", at the first place where that text is a plain
// literal rather than a Jinja expression.
std::string chatml_default_system(std::string_view jinja) {
  for (const std::string_view start : {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    for (std::size_t at = jinja.find(start); at != std::string_view::npos; at = jinja.find(start, at + 1)) {
      const std::size_t begin = at + start.size();
      const std::size_t end = jinja.find("<|im_end|>", begin);
      if (end == std::string_view::npos) break;
      const std::string_view literal = jinja.substr(begin, end - begin);
      if (contains(literal, "{{") || contains(literal, "{%") || contains(literal, "'") || contains(literal, "\"")) continue;
      if (start.back() == 'n') return std::string(literal);  // written with real newlines
      std::string out;  // inside a Jinja string: undo the escapes it can hold
      for (std::size_t i = 0; i < literal.size(); ++i) {
        if (literal[i] == '\\' && i + 1 < literal.size()) {
          const char e = literal[++i];
          out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        } else {
          out.push_back(literal[i]);
        }
      }
      return out;
    }
  }
  return {};
}

// The literal after `set date_string = "` in a Llama 3.1+ template, or empty.
std::string llama3_date(std::string_view jinja) {
  constexpr std::string_view kSet = "set date_string = \"";
  const std::size_t at = jinja.find(kSet);
  if (at == std::string_view::npos) return {};
  const std::size_t begin = at + kSet.size();
  const std::size_t end = jinja.find('"', begin);
  return end == std::string_view::npos ? std::string() : std::string(jinja.substr(begin, end - begin));
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

Error unsupported(const std::string& source, const std::string& what) {
  return make_error(ErrorCode::unsupported, source, what);
}

constexpr std::string_view kFamilies = "ChatML, Llama 3, Gemma, Mistral (Nemo form)";

}  // namespace

std::string_view chat_family_name(ChatFamily family) noexcept {
  switch (family) {
    case ChatFamily::chatml: return "chatml";
    case ChatFamily::llama3: return "llama3";
    case ChatFamily::gemma: return "gemma";
    case ChatFamily::mistral: return "mistral";
    case ChatFamily::unsupported: return "unsupported";
  }
  return "unsupported";
}

Result<ChatTemplate> ChatTemplate::recognise(const gguf::File& file) {
  std::string bos, eos;
  if (file.has("tokenizer.ggml.tokens")) {
    Result<std::vector<std::string_view>> tokens = file.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return tokens.error();
    for (const auto& [key, out] : {std::pair<std::string_view, std::string*>{"tokenizer.ggml.bos_token_id", &bos},
                                   std::pair<std::string_view, std::string*>{"tokenizer.ggml.eos_token_id", &eos}}) {
      if (!file.has(key)) continue;
      Result<std::uint32_t> id = file.get_u32(key);
      if (!id) return id.error();
      if (*id < tokens->size()) *out = std::string((*tokens)[*id]);
    }
  }
  if (!file.has("tokenizer.chat_template")) {
    ChatTemplate t;
    t.source_ = file.name();
    t.reason_ = file.name() + ": the file has no tokenizer.chat_template (a base model); completions work, chat needs one";
    return t;
  }
  Result<std::string_view> jinja = file.get_string("tokenizer.chat_template");
  if (!jinja) return jinja.error();
  return recognise_text(*jinja, bos, eos, file.name());
}

Result<ChatTemplate> ChatTemplate::from_gguf(const gguf::File& file) {
  if (!file.has("tokenizer.chat_template")) {  // plain ChatML with no default system prompt, as before
    ChatTemplate t;
    t.family_ = ChatFamily::chatml;
    t.source_ = file.name();
    return t;
  }
  Result<ChatTemplate> t = recognise(file);
  if (!t) return t.error();
  if (!t->supported()) return unsupported(file.name(), t->reason());
  return t;
}

Result<ChatTemplate> ChatTemplate::from_text(std::string_view jinja, std::string_view source) {
  ChatTemplate t = recognise_text(jinja, {}, {}, source);
  if (!t.supported()) return unsupported(std::string(source), t.reason());
  return t;
}

ChatTemplate ChatTemplate::recognise_text(std::string_view jinja, std::string_view bos, std::string_view eos,
                                          std::string_view source) {
  ChatTemplate t;
  t.source_ = std::string(source);
  const bool uses_bos = contains(jinja, "bos_token");
  t.bos_ = uses_bos ? std::string(bos) : std::string();
  t.eos_ = std::string(eos);
  if (contains(jinja, "<|im_start|>") && contains(jinja, "<|im_end|>")) {
    t.family_ = ChatFamily::chatml;
    t.default_system_ = chatml_default_system(jinja);
  } else if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|eot_id|>")) {
    t.family_ = ChatFamily::llama3;
    if (contains(jinja, "Cutting Knowledge Date")) {
      t.date_today_ = contains(jinja, "strftime_now");
      t.date_ = llama3_date(jinja);
      if (!t.date_today_ && t.date_.empty()) {
        t.family_ = ChatFamily::unsupported;
        t.reason_ = "a Llama 3 template with a knowledge date but no date_string ActiveKV can read";
      }
    }
  } else if (contains(jinja, "<start_of_turn>") && contains(jinja, "<end_of_turn>")) {
    t.family_ = ChatFamily::gemma;
    t.system_prefix_ = contains(jinja, "first_user_prefix");
  } else if (contains(jinja, "[INST]")) {
    if (contains(jinja, R"("[INST]" + system_message + "\n\n" + message["content"] + "[/INST]")")) {
      t.family_ = ChatFamily::mistral;
    } else {
      t.reason_ = "a Mistral-style template ([INST]) of a form other than Mistral Nemo's";
    }
  } else {
    t.reason_ = "a template of no recognised family";
  }
  if (t.family_ == ChatFamily::unsupported) {
    std::string head(jinja.substr(0, 60));
    for (char& c : head) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    t.reason_ = t.source_ + ": tokenizer.chat_template is " + t.reason_ + " (it begins '" + head +
                "'); ActiveKV renders " + std::string(kFamilies) + "; completions work, chat does not";
  }
  return t;
}

Status ChatTemplate::accepts(std::span<const ChatMessage> messages) const {
  if (!supported()) return unsupported(source_, reason_);
  const bool gemma2 = family_ == ChatFamily::gemma && !system_prefix_;
  std::size_t first = 0;
  if (!messages.empty() && messages.front().role == "system") {
    if (gemma2) return unsupported(source_, "this Gemma template refuses a system message (System role not supported)");
    first = 1;
  }
  if (family_ == ChatFamily::gemma || family_ == ChatFamily::mistral) {
    for (std::size_t i = first; i < messages.size(); ++i) {
      const bool user_turn = (i - first) % 2 == 0;
      if ((messages[i].role == "user") != user_turn || (!user_turn && messages[i].role != "assistant")) {
        return make_error(ErrorCode::invalid_argument, source_,
                          "this template needs the roles to alternate user/assistant/user/... after an optional "
                          "system message; message " + std::to_string(i) + " is '" + std::string(messages[i].role) + "'");
      }
    }
  }
  return {};
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  switch (family_) {
    case ChatFamily::chatml: return render_chatml(messages, add_generation_prompt);
    case ChatFamily::llama3: return render_llama3(messages, add_generation_prompt);
    case ChatFamily::gemma: return render_gemma(messages, add_generation_prompt);
    case ChatFamily::mistral: return render_mistral(messages);
    case ChatFamily::unsupported: break;
  }
  return render_chatml(messages, add_generation_prompt);  // unspecified text (see accepts())
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && !messages.empty() && messages.front().role != "system") {
    out.append("<|im_start|>system\n").append(default_system_).append("<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  const auto turn = [](std::string& out, std::string_view role, std::string_view content) {
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n").append(trim(content)).append("<|eot_id|>");
  };
  std::string out;
  if (date_today_ || !date_.empty()) {  // Llama 3.1+: the system header always opens the prompt
    out.append(bos_);
    std::span<const ChatMessage> rest = messages;
    std::string_view system;
    if (!rest.empty() && rest.front().role == "system") {
      system = trim(rest.front().content);
      rest = rest.subspan(1);
    }
    out.append("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ")
        .append(date_today_ ? today() : date_)
        .append("\n\n")
        .append(system)
        .append("<|eot_id|>");
    for (const ChatMessage& m : rest) turn(out, m.role, m.content);
  } else {  // Llama 3.0: BOS before the first turn
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out.append(bos_);
      turn(out, messages[i].role, messages[i].content);
    }
  }
  if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

std::string ChatTemplate::render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out = bos_;
  std::string prefix;
  std::span<const ChatMessage> rest = messages;
  if (system_prefix_ && !rest.empty() && rest.front().role == "system") {
    prefix = std::string(rest.front().content) + "\n\n";
    rest = rest.subspan(1);
  }
  for (std::size_t i = 0; i < rest.size(); ++i) {
    out.append("<start_of_turn>").append(rest[i].role == "assistant" ? std::string_view("model") : rest[i].role).append("\n");
    if (i == 0) out.append(prefix);
    out.append(trim(rest[i].content)).append("<end_of_turn>\n");
  }
  if (add_generation_prompt) out.append("<start_of_turn>model\n");
  return out;
}

std::string ChatTemplate::render_mistral(std::span<const ChatMessage> messages) const {
  std::string out = bos_;
  std::span<const ChatMessage> rest = messages;
  std::string_view system;
  bool has_system = false;
  if (!rest.empty() && rest.front().role == "system") {
    system = rest.front().content;
    has_system = true;
    rest = rest.subspan(1);
  }
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const ChatMessage& m = rest[i];
    if (m.role == "user") {
      out.append("[INST]");
      if (i + 1 == rest.size() && has_system) out.append(system).append("\n\n");
      out.append(m.content).append("[/INST]");
    } else {
      out.append(m.content).append(eos_);
    }
  }
  return out;
}

std::string ChatTemplate::render_prompt(std::string_view user, bool add_generation_prompt) const {
  const ChatMessage message{"user", user};
  return render(std::span<const ChatMessage>(&message, 1), add_generation_prompt);
}

}  // namespace activekv::tokenizer
