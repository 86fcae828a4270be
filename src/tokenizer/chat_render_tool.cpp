// chat_render_tool.cpp — activekv_chat_render: renders conversations with ChatTemplate.
//
// The comparison test (tests/tokenizer/compare_chat_templates.py) renders the
// same conversations with the `jinja2` package and compares the text exactly.
// Input: one JSON object per line,
//   {"template": "...", "bos": "<s>", "eos": "</s>", "messages": [{"role": ..., "content": ...}],
//    "add_generation_prompt": true}
// Output: one JSON object per line,
//   {"family": "chatml", "accepted": true, "error": "", "text": "..."}.
#include <fmt/core.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/chat_template.hpp"

int main() {
  using namespace activekv::tokenizer;
  std::string line;
  std::size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    const nlohmann::json in = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!in.is_object() || !in.contains("template") || !in["template"].is_string() || !in.contains("messages") ||
        !in["messages"].is_array()) {
      fmt::print(stderr, "activekv_chat_render: line {} is not a request object\n", line_number);
      return 1;
    }
    std::vector<std::string> roles, contents;
    for (const nlohmann::json& m : in["messages"]) {
      roles.push_back(m.value("role", ""));
      contents.push_back(m.value("content", ""));
    }
    std::vector<ChatMessage> messages;
    for (std::size_t i = 0; i < roles.size(); ++i) messages.push_back(ChatMessage{roles[i], contents[i]});
    const ChatTemplate t = ChatTemplate::recognise_text(in["template"].get<std::string>(), in.value("bos", ""),
                                                        in.value("eos", ""), "template");
    const activekv::Status ok = t.accepts(messages);
    nlohmann::json out{{"family", std::string(chat_family_name(t.family()))},
                       {"accepted", ok.ok()},
                       {"error", ok.ok() ? std::string() : ok.error().describe()},
                       {"text", ok.ok() ? t.render(messages, in.value("add_generation_prompt", true)) : std::string()}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  return 0;
}
