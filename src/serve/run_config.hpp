// run_config.hpp — the settings of one `activekv run`, from a JSON file.
//
// Every size is explicit: the default file (configs/default.json) states the
// host pool, the device pool, page and tile sizes, concurrency and the token
// budget per step, so the memory decision is the operator's and is visible.
// An "auto" size is refused (core's rule: it hides the decision). Unknown keys
// are refused so a typo cannot silently leave a default in place. Command-line
// options override single fields after loading (run_command.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "activekv/kv_runtime.hpp"
#include "activekv/result.hpp"

namespace activekv::serve {

struct RunConfig {
  std::string model;                       // GGUF path; empty: the default model
  std::uint64_t host_pool_bytes = 0;       // pinned host pool holding the histories
  std::uint64_t device_pool_bytes = 0;     // device page pool (the working sets)
  std::uint32_t page_tokens = 0;           // P: rows per page
  std::uint32_t tile_tokens = 0;           // T: tokens per staging tile (P divides T)
  std::uint32_t tiles = 0;                 // staging tile slots
  std::uint32_t max_context_tokens = 0;    // 0: the model's own context length
  std::uint32_t max_seqs = 0;              // concurrency asked for (the plan may lower it)
  std::uint32_t step_tokens = 0;           // token budget per step (decode + prefill chunks)
  std::uint32_t prefill_chunk_tokens = 0;  // most prompt tokens of one context in one step
  std::uint32_t threads = 0;               // compute threads
  // The quantised products' activation width (key activations, --activations; engine/matmul_q8.hpp):
  // "q16" (exact, the default) or "q8" (llama.cpp's 8-bit arithmetic, faster). Checked by the parser.
  std::string activations = "q16";
  bool stop_at_eos = true;                 // end a request at the end-of-sequence token
  double arrival_scale = 1.0;              // multiplies every arrival time (0: all at once)
  bool prefix_reuse = true;                // a finished history stays as a retained prefix; a follow-up adopts it
  // Host histories beyond the concurrency that only keep retained prefixes (docs/PREFIX.md): the host
  // pool must hold concurrency + retained_histories. Applied with or without prefix_reuse (the same
  // concurrency either way; without reuse the extra histories stay empty).
  std::uint32_t retained_histories = 0;
  // Hybrid models (docs/RUNTIME.md "Recurrent state"): with prefix_reuse, each history also keeps a
  // checkpoint of the recurrent state every K pages (the plan's host formula counts their bytes);
  // 0: only at the newest page boundary and the prompt's last whole page. Ignored without state.
  std::uint32_t state_checkpoint_pages = 0;
  // The host prefix cache (docs/PREFIX.md): finished histories' full pages kept at their real
  // length in this part of the host pool (host_pool must hold it and the histories); 0: none.
  // Used only with prefix_reuse.
  std::uint64_t prefix_cache_bytes = 0;
  // The shared KV tier (docs/TIER.md): key kv_tier, "redis://host:port" or
  // {"url": …, "block_tokens": …, "timeout_ms": …, "write_queue": …, "lookups": …}; --kv-tier sets the url.
  std::string kv_tier;                     // empty: no tier
  std::uint32_t kv_tier_block_tokens = 256;  // tokens per stored block (a whole number of pages)
  std::uint32_t kv_tier_timeout_ms = 500;    // connect and command timeout: a slower store is a miss
  std::uint32_t kv_tier_write_queue = 8;     // blocks waiting to be written; more are dropped (counted)
  std::uint32_t kv_tier_lookups = 2;         // lookups at once: queued requests are looked up while they wait
  bool prefix_reuse_device = true;         // ... and its full device pages stay, borrowed, handed over in place
  // Sparse attention (docs/SPARSE.md): key sparse, "exact" or {"mode": "pages" | "fraction" |
  // "adaptive" | "exact", "pages": N, "fraction": F, "recent_pages": N, "floor_pages": N,
  // "measure": bool}; --sparse-pages, --sparse-fraction, --sparse-adaptive override the mode.
  SparseSettings sparse;
  // `activekv serve` only (docs/SERVE.md):
  std::uint32_t max_queue = 16;            // requests waiting beyond the running ones; more get 429
  double shutdown_grace_s = 10.0;          // SIGINT/SIGTERM: let what runs finish this long, then cancel

  // Cross-field checks (page divides tile, chunk <= step budget, ...), naming the field.
  Status validate(std::string_view source) const;
};

// Whether `text` is an activation width RunConfig::activations takes, and what a refusal says.
bool activations_known(std::string_view text);
constexpr const char* activations_refusal =
    "give \"q16\" (exact, the default) or \"q8\" (llama.cpp's 8-bit arithmetic for the K-quants and the "
    "legacy formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; faster)";

// Parses a JSON object; `source` names the file in errors.
Result<RunConfig> parse_run_config(std::string_view text, std::string_view source);
Result<RunConfig> load_run_config(const std::string& path);

// configs/default.json, embedded in the library.
std::string_view default_config_text() noexcept;

}  // namespace activekv::serve
