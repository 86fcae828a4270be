// engine_logits.cpp — the engine's logits on given token ids, written to a file, for comparisons
// against another implementation on the same GGUF (scripts/peer-logits.sh: llama.cpp's).
//
//   engine_logits --model FILE.gguf --ids IDS.i32 --out OUT.f32 [--chunk C] [--threads T]
//                 [--prefill N] [--top K] [--activations q16|q8]
//
// IDS.i32: little-endian int32 token ids, fed as given, positions 0…n−1 of one context whose KV
// lives in the ActiveKV runtime on the host backend (the whole history on the device). The prompt
// goes in steps of C tokens (default 1: one decode step per token, so every position has logits);
// each step asks the logits of its last token. OUT.f32: one row of vocab floats per step, in
// order (rows for positions C−1, 2C−1, …, n−1). --prefill N: the first N ids go first in steps of
// up to 256 tokens whose logits are not written, then the rest as above (as `activekv eval` scores
// a window: prefill, then one decode step per scored token). --top K: each row is the K highest
// logits instead of all, K pairs of (int32 id, f32 logit), highest first, ties to the lower id
// (an 8K-token comparison would otherwise write 8 GiB). What it owns: nothing beyond this program; the
// forward pass, the runtime and the loader are the engine's own.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/memory_plan.hpp"
#include "engine/engine.hpp"
#include "engine/runtime_kv.hpp"

using namespace activekv;
using namespace activekv::engine;

int main(int argc, char** argv) {
  std::string model_path, ids_path, out_path;
  std::uint32_t chunk = 1, threads = 2, prefill = 0, top = 0;
  CLI::App app{"engine_logits: the engine's logits on given token ids (see the source's opening)"};
  app.add_option("--model", model_path, "GGUF file")->required();
  app.add_option("--ids", ids_path, "little-endian int32 token ids")->required();
  app.add_option("--out", out_path, "where the logits go (f32 rows)")->required();
  app.add_option("--chunk", chunk, "tokens per step; logits of each step's last token")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1u, 64u));
  std::string activations_text = "q16";
  app.add_option("--activations", activations_text, "activation width of the quantised products (matmul_q8.hpp)")
      ->check(CLI::IsMember({"q16", "q8"}));
  app.add_option("--prefill", prefill, "ids fed first, in steps of up to 256, their logits not written");
  app.add_option("--top", top, "write the K highest logits per row, (int32 id, f32 logit) pairs")->check(CLI::Range(1u, 1024u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  std::ifstream in(ids_path, std::ios::binary);
  if (!in) return fmt::print(stderr, "--ids {}: cannot read it\n", ids_path), 2;
  std::vector<TokenId> ids;
  std::int32_t v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof v)) ids.push_back(static_cast<TokenId>(v));
  if (ids.empty()) return fmt::print(stderr, "--ids {}: holds no token ids\n", ids_path), 2;

  Result<std::unique_ptr<Model>> loaded = Model::load(model_path);
  if (!loaded) return fmt::print(stderr, "{}\n", loaded.error().describe()), 1;
  std::unique_ptr<Model> model = std::move(loaded).value();
  const ModelConfig cfg = model->config();
  for (TokenId t : ids)
    if (static_cast<std::uint64_t>(t) >= cfg.vocab)
      return fmt::print(stderr, "--ids {}: token id {} is outside the vocabulary of {}\n", ids_path, t, cfg.vocab), 2;
  chunk = std::min<std::uint32_t>(chunk, static_cast<std::uint32_t>(ids.size()));
  if (prefill >= ids.size())
    return fmt::print(stderr, "--prefill {}: leaves none of the {} ids to write logits for\n", prefill, ids.size()), 2;
  if (top > cfg.vocab) return fmt::print(stderr, "--top {}: the vocabulary has {} tokens\n", top, cfg.vocab), 2;

  const std::uint32_t page_tokens = 16;
  const auto length = static_cast<std::uint32_t>((ids.size() + page_tokens - 1) / page_tokens * page_tokens);
  const std::uint32_t prefill_chunk = std::min<std::uint32_t>(256, length);  // no step may be longer than the context
  const ForwardLimits limits{std::max(chunk, prefill > 0 ? prefill_chunk : 1u), 1, length};
  if (Status s = check_runnable(*model, limits); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 2;
  MemorySettings memory;
  memory.page_tokens = page_tokens;
  memory.tile_tokens = 1024;
  memory.tiles = 2;
  memory.max_context_tokens = length;
  memory.max_seqs = 1;
  memory.chunk_tokens = limits.step_tokens_max;
  KvRuntimeSettings settings = runtime_settings(*model, memory, limits);
  const std::uint64_t row = settings.memory.geometry.row_bytes();
  const std::uint64_t pages = std::uint64_t{cfg.layers} * (length / page_tokens);
  settings.memory.host_pool_bytes = std::uint64_t{cfg.layers} * length * row;
  settings.memory.device_pool_bytes = 4 * arena_alignment_bytes + 2ull * 1024 * row + pages * page_tokens * row;
  BackendOptions options;
  options.compute_threads = threads;
  Result<std::unique_ptr<Backend>> backend = make_backend("host", options);
  if (!backend) return fmt::print(stderr, "{}\n", backend.error().describe()), 1;
  choose_history_reads(settings, **backend);
  Result<std::unique_ptr<KvRuntime>> runtime = KvRuntime::create(settings, **backend);
  if (!runtime) return fmt::print(stderr, "{}\n", runtime.error().describe()), 1;
  Result<AdmitResult> admitted = (*runtime)->open_context(1, length);
  if (!admitted || admitted->outcome != AdmitOutcome::admitted) return fmt::print(stderr, "the context was not admitted\n"), 1;
  const ContextId ctx = admitted->handle;

  EngineSettings es;
  es.threads = threads;
  (void)parse_activations(activations_text, &es.activations);  // CLI11 checked it
  es.limits = limits;
  Result<std::unique_ptr<Engine>> created = Engine::create(std::move(model), std::make_unique<RuntimeKv>(**runtime), es);
  if (!created) return fmt::print(stderr, "{}\n", created.error().describe()), 1;
  Engine& eng = **created;

  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) return fmt::print(stderr, "--out {}: cannot write it\n", out_path), 2;
  std::size_t rows = 0;
  for (std::size_t fed = 0; fed < prefill;) {
    const std::size_t n = std::min<std::size_t>(prefill_chunk, prefill - fed);
    const StepInput step{ctx, std::span<const TokenId>(ids).subspan(fed, n), false};
    if (Status s = eng.step({&step, 1}); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
    fed += n;
  }
  std::vector<std::uint32_t> order(cfg.vocab);
  std::vector<char> top_row(std::size_t{top} * 8);
  for (std::size_t fed = prefill; fed < ids.size(); fed += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, ids.size() - fed);
    const StepInput step{ctx, std::span<const TokenId>(ids).subspan(fed, n), true};
    if (Status s = eng.step({&step, 1}); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
    const std::span<const float> logits = eng.logits(0);
    if (top == 0) {
      out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size_bytes()));
    } else {
      for (std::uint32_t i = 0; i < cfg.vocab; ++i) order[i] = i;
      std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](std::uint32_t a, std::uint32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (std::uint32_t k = 0; k < top; ++k) {
        const auto id = static_cast<std::int32_t>(order[k]);
        std::memcpy(&top_row[std::size_t{k} * 8], &id, 4);
        std::memcpy(&top_row[std::size_t{k} * 8 + 4], &logits[order[k]], 4);
      }
      out.write(top_row.data(), static_cast<std::streamsize>(top_row.size()));
    }
    ++rows;
  }
  if (!out) return fmt::print(stderr, "--out {}: writing failed\n", out_path), 1;
  fmt::print("engine_logits: {} prefilled, {} steps of up to {} tokens, {} rows × {} → {} ({})\n", prefill, rows, chunk, rows,
             top == 0 ? cfg.vocab : top, out_path, isa_name(eng.isa()));
  return 0;
}
