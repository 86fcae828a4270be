// scenario.hpp — what is simulated: a model on a card, the memory the operator states, the sweep.
//
// A Scenario is plain data. It names a geometry preset (the core's), a card
// (cost_model.hpp), the model's resident weights, the device memory the
// runtime keeps for itself, the ActiveKV settings the operator would give
// (host pool, device pool, headroom, page and tile sizes) and the grid of
// context lengths × concurrencies to sweep. Two are built in:
//
//   hybrid-27b   the seed's: a 27B hybrid (16 dense of 64 layers), 4-bit weights
//                (about 14 GiB), a 32 GB Arc Pro class card on PCIe 4.0 x8,
//                32,768-token contexts, a 64 GiB host pool, concurrency 1..32.
//   llama-3.1-8b on an H200 (PCIe Gen5 x16), bf16 weights, 131,072-token
//                contexts, a 512 GiB host pool, concurrency 1..32.
//
// The three variants every cell is run in:
//   stock                all KV on the device; concurrency limited by device memory
//   activekv             the device pool (arena) only; the rest of the free memory idle
//   activekv+headroom    the same arena plus `headroom_bytes` lent to retained history
//
// Device memory, every byte accounted:
//   stock:     weights + runtime_reserve + running × (length × kv_bytes_per_token + recurrent)
//   activekv:  weights + runtime_reserve + device_pool (+ headroom, inside the arena)
// validate() refuses a scenario whose ActiveKV arena does not fit on the card.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/geometry.hpp"
#include "activekv/result.hpp"
#include "sim/cost_model.hpp"

namespace activekv::sim {

enum class Variant : std::uint8_t { stock, activekv, activekv_headroom };
const char* variant_name(Variant variant) noexcept;   // "stock", "activekv", "activekv+headroom"
const char* variant_label(Variant variant) noexcept;  // for tables and legends

struct Scenario {
  std::string name;
  std::string description;
  std::string preset;                    // geometry preset in the core ("hybrid-27b")
  Geometry geometry;                     // from the preset
  CardSpec card;
  ModelCost model;
  std::uint64_t runtime_reserve_bytes = 0;  // activations, workspace, driver: not KV (assumption)
  std::uint32_t max_context_tokens = 0;
  std::uint64_t host_pool_bytes = 0;
  std::uint64_t device_pool_bytes = 0;   // ActiveKV arena without headroom
  std::uint64_t headroom_bytes = 0;      // added to the arena in the headroom variant
  std::uint32_t page_tokens = 0;         // P
  std::uint32_t tile_tokens = 0;         // T
  std::uint32_t tiles = 0;
  std::uint32_t max_seqs = 0;            // the arena is sized for this many contexts
  std::uint32_t chunk_tokens = 0;        // prefill chunk (the core's floor covers it)
  std::vector<std::uint32_t> context_tokens;  // sweep: lengths at which latency is measured
  std::vector<std::uint32_t> concurrency;     // sweep: contexts decoding together
  std::uint32_t warmup_steps = 0;        // decode steps before measuring (retained pages captured)
  std::uint32_t measure_steps = 0;       // decode steps measured

  // Device memory left for KV by stock after weights and the runtime's reserve.
  std::uint64_t stock_kv_bytes() const noexcept;
  // KV bytes one token adds across all dense layers: dense_layers × row_bytes.
  std::uint64_t kv_bytes_per_token() const noexcept;
  // How many contexts of `length_tokens` stock holds at once (0 when not even one fits).
  std::uint32_t stock_capacity(std::uint32_t length_tokens) const noexcept;
  // The arena the variant asks the core for (device pool plus headroom where it applies).
  std::uint64_t arena_bytes(Variant variant) const noexcept;

  // Refuses a scenario whose arena (with headroom) plus weights and reserve exceed the card,
  // an empty sweep, a length above max context, and zero step counts; names the field.
  Status validate() const;
};

// The built-in scenarios by name (an Error naming --scenario lists them).
Result<Scenario> make_scenario(std::string_view name);

// A reduced copy for tests and quick runs: the first `lengths` lengths and the given
// concurrencies, fewer steps; same card, model and memory.
Scenario reduced(const Scenario& scenario, std::span<const std::uint32_t> lengths,
                 std::span<const std::uint32_t> concurrency, std::uint32_t measure_steps);

}  // namespace activekv::sim
