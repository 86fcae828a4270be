// run_overrides.hpp — the run configuration and its command-line overrides, shared by `run` and `serve`.
//
// Both commands take the same configuration (configs/default.json built in, or
// --config FILE) and the same overrides (--model, --engine, --backend,
// --host-pool, --device-pool, --max-seqs, --threads, --step-tokens,
// --prefill-chunk, --no-prefix-reuse, --activations), with the same bounds and the same
// messages: this file is the one place they are declared, checked and applied,
// and the one place the fake engine is sized from a configuration.
//
// Invariant: a given override is either applied or refused with a one-line
// error naming the flag (a given 0, NaN or negative is refused, never taken for
// "not given"); the configuration returned has passed RunConfig::validate.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "activekv/kv_runtime.hpp"
#include "activekv/result.hpp"
#include "serve/fake_engine.hpp"
#include "serve/run_config.hpp"

namespace activekv::cli {

// Bounds of the overrides: what the engine and the scheduler can be sized for.
constexpr std::uint32_t threads_max = 64;           // the host backend's compute threads
constexpr std::uint32_t count_flag_max = 1u << 24;  // as in the configuration file (run_config.cpp)

// True when the option was given on the command line.
bool given(const CLI::Option* option);
// A count flag, if given: 1 to hi, else an error naming the flag.
Status count_flag(const CLI::Option* option, const char* flag, std::uint32_t value, std::uint32_t hi);

// Sparse attention's flags (docs/SPARSE.md), shared by generate, run and serve:
// --sparse-pages N, --sparse-fraction F, --sparse-adaptive (one of them), --sparse-measure,
// --sparse-score bound|moments|mixed, --sparse-layer-budget (a fixed budget spread over the
// layers), --sparse-layer-signal captured|moments (what spreads it).
constexpr std::uint32_t sparse_pages_max = 1u << 24;
struct SparseFlags {
  std::uint32_t pages = 0;
  double fraction = 0.0;
  bool adaptive = false;
  bool measure = false;
  std::string score;
  bool layer_budget = false;
  std::string layer_signal;
  CLI::Option* pages_given = nullptr;
  CLI::Option* fraction_given = nullptr;
  CLI::Option* score_given = nullptr;
  CLI::Option* signal_given = nullptr;

  void add_to(CLI::App& sub);
  bool any() const;
  const char* flag_name() const;  // the first given, for messages
  // Applies the given flags over `sparse` (the configuration's), or a one-line error naming the flag.
  Status apply(SparseSettings& sparse) const;
  Status apply_choices(SparseSettings& sparse) const;
};

struct RunOverrides {
  std::string config;
  std::string model;
  std::string engine = "model";
  std::string backend = "host";
  std::string host_pool;
  std::string device_pool;
  std::string prefix_cache;  // --prefix-cache: the host prefix cache's part of the host pool (docs/PREFIX.md)
  std::uint32_t max_seqs = 0;
  std::uint32_t threads = 0;
  std::uint32_t step_tokens = 0;
  std::uint32_t prefill_chunk_tokens = 0;
  bool no_prefix_reuse = false;
  std::string kv_tier;  // --kv-tier: the shared KV tier, redis://host:port (docs/TIER.md)
  std::string activations;  // --activations: q16 or q8 (configuration key activations); empty: not given
  CLI::Option* max_seqs_given = nullptr;
  CLI::Option* threads_given = nullptr;
  CLI::Option* step_tokens_given = nullptr;
  CLI::Option* prefill_chunk_given = nullptr;
  SparseFlags sparse;

  // Declares the shared flags on the subcommand.
  void add_to(CLI::App& sub);
  // "configs/default.json" or the --config file: what a setting from the configuration is named by.
  std::string config_source() const;
};

// The configuration: the file (or the built-in default), then each override;
// `more` applies a command's own overrides (run: --arrival-scale; serve:
// --max-queue, --grace) before the bounds are checked and the result validated.
Result<serve::RunConfig> load_run_config(const RunOverrides& o,
                                         const std::function<Status(serve::RunConfig&)>& more = {});

// The real engine allocates both pools on this machine (the host backend
// emulates the device arena in host memory): refuse a size the machine cannot
// have, naming the flag or the configuration key it came from.
Status check_pools_fit_machine(const RunOverrides& o, const serve::RunConfig& c);

// The fake engine sized from the configuration, in checked 64-bit arithmetic:
// a history slot per 64 MiB of host pool (at most max_seqs), pages of 768-byte rows.
Result<serve::FakeEngineConfig> fake_engine_config(const serve::RunConfig& c);

// The model file the real engine loads: the configuration's (or --model's), else the default model.
Result<std::string> model_path(const serve::RunConfig& c);

}  // namespace activekv::cli
