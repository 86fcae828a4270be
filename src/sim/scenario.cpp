// scenario.cpp — the two built-in scenarios and their memory arithmetic.
//
// Every default here is explained in docs/SIMULATION.md ("Scenarios"); the
// comments say which are the seed's figures and which are assumptions.
#include "sim/scenario.hpp"

#include <algorithm>

#include "activekv/size.hpp"

namespace activekv::sim {

const char* variant_name(Variant variant) noexcept {
  switch (variant) {
    case Variant::stock: return "stock";
    case Variant::activekv: return "activekv";
    case Variant::activekv_headroom: return "activekv+headroom";
  }
  return "?";
}

const char* variant_label(Variant variant) noexcept {
  switch (variant) {
    case Variant::stock: return "stock (all KV on device)";
    case Variant::activekv: return "ActiveKV, no headroom";
    case Variant::activekv_headroom: return "ActiveKV with headroom";
  }
  return "?";
}

std::uint64_t Scenario::kv_bytes_per_token() const noexcept {
  return static_cast<std::uint64_t>(geometry.dense_layers) * geometry.row_bytes();
}

std::uint64_t Scenario::stock_kv_bytes() const noexcept {
  const std::uint64_t fixed = model.weight_bytes + runtime_reserve_bytes;
  return card.device_memory_bytes > fixed ? card.device_memory_bytes - fixed : 0;
}

std::uint32_t Scenario::stock_capacity(std::uint32_t length_tokens) const noexcept {
  // vLLM allocates KV in pages as a context grows; a context of L tokens holds
  // ceil(L / P) pages per dense layer, plus its recurrent state.
  const std::uint64_t pages = (length_tokens + page_tokens - 1) / page_tokens;
  const std::uint64_t per_context = pages * page_tokens * kv_bytes_per_token() + geometry.recurrent_state_bytes;
  return static_cast<std::uint32_t>(stock_kv_bytes() / per_context);
}

std::uint64_t Scenario::arena_bytes(Variant variant) const noexcept {
  return variant == Variant::activekv_headroom ? device_pool_bytes + headroom_bytes : device_pool_bytes;
}

Status Scenario::validate() const {
  if (const Status geometry_ok = geometry.validate(); !geometry_ok) return geometry_ok;
  const std::uint64_t fixed = model.weight_bytes + runtime_reserve_bytes;
  if (fixed + arena_bytes(Variant::activekv_headroom) > card.device_memory_bytes) {
    return make_error(ErrorCode::refused, "--device-pool",
                      "weights (" + format_bytes(model.weight_bytes) + ") + runtime reserve (" +
                          format_bytes(runtime_reserve_bytes) + ") + device pool (" + format_bytes(device_pool_bytes) +
                          ") + headroom (" + format_bytes(headroom_bytes) + ") exceed the card's " +
                          format_bytes(card.device_memory_bytes) + ": lower --device-pool or --headroom");
  }
  if (context_tokens.empty()) return make_error(ErrorCode::invalid_argument, "--lengths", "the sweep needs at least one context length");
  if (concurrency.empty()) return make_error(ErrorCode::invalid_argument, "--concurrency", "the sweep needs at least one concurrency");
  for (std::uint32_t length : context_tokens) {
    if (length > max_context_tokens) {
      return make_error(ErrorCode::invalid_argument, "--lengths",
                        "context length " + std::to_string(length) + " exceeds the scenario's max context " +
                            std::to_string(max_context_tokens));
    }
    if (length < warmup_steps + measure_steps + chunk_tokens) {
      return make_error(ErrorCode::invalid_argument, "--lengths",
                        "context length " + std::to_string(length) + " is shorter than one prefill chunk plus the " +
                            "warm-up and measured decode steps");
    }
  }
  for (std::uint32_t n : concurrency) {
    if (n == 0 || n > max_seqs) {
      return make_error(ErrorCode::invalid_argument, "--concurrency",
                        "concurrency " + std::to_string(n) + " must be between 1 and the scenario's max seqs " +
                            std::to_string(max_seqs));
    }
  }
  if (measure_steps == 0) return make_error(ErrorCode::invalid_argument, "--steps", "at least one decode step must be measured");
  return Status::success();
}

namespace {

Scenario hybrid_27b() {
  Scenario s;
  s.name = "hybrid-27b";
  s.description =
      "the seed's: 27B hybrid (16 dense of 64 layers), 4-bit weights, 32 GB Arc Pro class card on PCIe 4.0 x8, "
      "32,768-token contexts, 64 GiB host pool";
  s.preset = "hybrid-27b";
  s.geometry = find_preset("hybrid-27b").value().geometry;
  s.card = find_card("arc-pro-32gb").value();
  s.model = ModelCost{14 * GiB, 27e9};         // seed: 4-bit weights, about 14 GiB; 27B parameters per token
  s.runtime_reserve_bytes = 3 * GiB / 2;       // assumption: activations, workspace, driver
  s.max_context_tokens = 32768;                // seed
  s.host_pool_bytes = 64 * GiB;                // seed
  s.device_pool_bytes = 8 * GiB;               // the arena: tiles + pages + 32 recurrent slots
  s.headroom_bytes = 8 * GiB;                  // seed: "about 8 GB" of headroom
  s.page_tokens = 16;
  s.tile_tokens = 32768;                       // seed: 32K-token tiles
  s.tiles = 2;
  s.max_seqs = 32;                             // seed: concurrency 1..32
  s.chunk_tokens = 256;
  s.context_tokens = {1024, 2048, 4096, 8192, 16384, 32768};
  s.concurrency = {1, 2, 4, 8, 16, 32};
  s.warmup_steps = 3;
  s.measure_steps = 8;
  return s;
}

Scenario llama_8b_h200() {
  Scenario s;
  s.name = "llama-3.1-8b";
  s.description = "llama-3.1-8b (32 dense layers), bf16 weights, H200 on PCIe Gen5 x16, 131,072-token contexts, 512 GiB host pool";
  s.preset = "llama-3.1-8b";
  s.geometry = find_preset("llama-3.1-8b").value().geometry;
  s.card = find_card("h200").value();
  s.model = ModelCost{16'060'000'000ull, 8.03e9};  // 8.03B parameters × 2 bytes (bf16)
  s.runtime_reserve_bytes = 4 * GiB;              // assumption: activations, workspace, driver
  s.max_context_tokens = 131072;
  s.host_pool_bytes = 512 * GiB;                  // 32 histories × 16 GiB
  s.device_pool_bytes = 112 * GiB;             // with 8 GiB headroom: 120 of the 121 GiB stock gives KV
  s.headroom_bytes = 8 * GiB;
  s.page_tokens = 16;
  s.tile_tokens = 32768;
  s.tiles = 2;
  s.max_seqs = 32;
  s.chunk_tokens = 256;
  s.context_tokens = {4096, 8192, 16384, 32768, 65536, 131072};
  s.concurrency = {1, 2, 4, 8, 16, 32};
  s.warmup_steps = 3;
  s.measure_steps = 8;
  return s;
}

}  // namespace


Result<Scenario> make_scenario(std::string_view name) {
  if (name == "hybrid-27b") return hybrid_27b();
  if (name == "llama-3.1-8b") return llama_8b_h200();
  return make_error(ErrorCode::invalid_argument, "--scenario",
                    "unknown scenario '" + std::string(name) + "': choose hybrid-27b or llama-3.1-8b");
}

Scenario reduced(const Scenario& scenario, std::span<const std::uint32_t> lengths,
                 std::span<const std::uint32_t> concurrency, std::uint32_t measure_steps) {
  Scenario s = scenario;
  s.context_tokens.assign(lengths.begin(), lengths.end());
  s.concurrency.assign(concurrency.begin(), concurrency.end());
  s.measure_steps = measure_steps;
  return s;
}

}  // namespace activekv::sim
