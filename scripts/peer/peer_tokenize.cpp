// peer_tokenize.cpp — llama.cpp's tokenization of a corpus, for comparison with activekv_tokenize.
//
//   peer_tokenize MODEL.gguf CORPUS.jsonl     CORPUS: one JSON string per line
//
// Loads only the vocabulary (libllama, vocab_only) and prints, per line, {"ids": [...]}: the text
// tokenized as llama.cpp tokenizes a text it does not parse for special tokens (parse_special
// false: control-token text stays text, user-defined tokens are matched), nothing added (no BOS).
// That is `activekv_tokenize --special user` (tests/tokenizer/compare_llama_tokenize.py compares).
// Built outside the project (it needs llama.cpp's headers and library): a measurement tool.
#include <llama.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: peer_tokenize MODEL.gguf CORPUS.jsonl\n");
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "peer_tokenize: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "peer_tokenize: cannot open %s\n", argv[2]);
    return 1;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    std::vector<llama_token> ids(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                                 static_cast<int32_t>(ids.size()), /*add_special=*/false, /*parse_special=*/false);
    if (n < 0) {
      std::fprintf(stderr, "peer_tokenize: llama_tokenize failed\n");
      return 1;
    }
    ids.resize(static_cast<std::size_t>(n));
    std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
