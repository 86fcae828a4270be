// tokenize_tool.cpp — activekv_tokenize: encodes a corpus with the GGUF's tokenizer.
//
// The comparison test (tests/tokenizer/compare_with_hf.py) runs this and an
// independent implementation over the same strings and compares ids exactly.
// Input: one JSON string per line. Output: one JSON object per line,
// {"ids": [...], "decoded": "..."}, where decoded is decode(ids) with special
// tokens kept.
//
//   activekv_tokenize --model m.gguf --corpus in.jsonl [--special allow|plain|user]
// (user: only user-defined tokens are matched, as llama.cpp's tokenizer tests do)
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  using namespace activekv;
  CLI::App app{"Encode a corpus of JSON strings with a GGUF model's tokenizer"};
  std::string model;
  std::string corpus;
  std::string special = "allow";
  app.add_option("--model", model, "GGUF model file")->required();
  app.add_option("--corpus", corpus, "one JSON string per line")->required();
  app.add_option("--special", special, "allow: special-token text becomes control tokens; plain: it does not")
      ->check(CLI::IsMember({"allow", "plain", "user"}));
  CLI11_PARSE(app, argc, argv);

  Result<gguf::File> file = gguf::File::open(model);
  if (!file) {
    fmt::print(stderr, "activekv_tokenize: {}\n", file.error().describe());
    return 1;
  }
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(*file);
  if (!tok) {
    fmt::print(stderr, "activekv_tokenize: {}\n", tok.error().describe());
    return 1;
  }
  std::ifstream in(corpus);
  if (!in) {
    fmt::print(stderr, "activekv_tokenize: --corpus: cannot open {}\n", corpus);
    return 1;
  }
  const tokenizer::Special mode = special == "allow"  ? tokenizer::Special::allow
                                  : special == "user" ? tokenizer::Special::user_defined
                                                      : tokenizer::Special::plain;
  tokenizer::EncodeScratch scratch;
  std::vector<tokenizer::TokenId> ids;
  std::string line;
  std::size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_string()) {
      fmt::print(stderr, "activekv_tokenize: --corpus: line {} is not a JSON string\n", line_number);
      return 1;
    }
    ids.clear();
    tok->encode(parsed.get_ref<const std::string&>(), mode, scratch, ids);
    const nlohmann::json out{{"ids", ids}, {"decoded", tok->decode(ids)}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  return 0;
}
