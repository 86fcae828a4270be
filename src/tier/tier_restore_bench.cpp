// tier_restore_bench.cpp — what a restore from the KV tier costs the engine thread, and how long it takes.
//
// A private redis-server holds a prompt's whole 256-token blocks for the default model's geometry
// (SmolLM2-135M: 30 dense layers × 768-byte rows; 5.9 MB a block), written here directly (random
// rows, the tier's own encoding and keys). A KV runtime on the host backend then admits the prompt
// the way the serving engine does: prepare_tier() until it says the lookup ended (waiting on the
// tier between calls, as the scheduler does with nothing else to step), then open_context(). Timed:
//   lookup wall   from the first prepare_tier() to the one that says ready (off the engine thread)
//   admission     the time spent inside open_context() on the engine thread (the restore's copy,
//                 when admission does it): what the steps of other contexts wait for, at once
//   prepare       the time spent inside all prepare_tier() calls (each between steps), and the
//                 longest single call
// Medians of `reps` admissions per size, each of a fresh prompt. Figures: docs/BENCHMARKS.md "KV tier".
//
// usage: activekv_tier_restore_bench [sizes, default 1024,4096,8192] [reps, default 5] [timeout_ms, default 5000]
// (the serving default kv_tier.timeout_ms is 500: a loaded machine can stall a read past it — a miss)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "tier/redis_fixture.hpp"
#include "tier/redis_tier.hpp"
#include "tier/tier_block.hpp"

namespace {

using namespace activekv;
using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kPage = 16, kBlock = 256, kMaxContext = 8192, kHistories = 2;
constexpr std::uint64_t kModel = 0x5eed;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::uint32_t> sizes = {1024, 4096, 8192};
  if (argc > 1) {
    sizes.clear();
    for (std::string s = argv[1]; !s.empty();) {
      const auto comma = s.find(',');
      sizes.push_back(static_cast<std::uint32_t>(std::stoul(s.substr(0, comma))));
      s = comma == std::string::npos ? "" : s.substr(comma + 1);
    }
  }
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  const std::uint32_t timeout_ms = argc > 3 ? static_cast<std::uint32_t>(std::stoul(argv[3])) : 5000;
  if (!tier::testing::RedisServer::available()) {
    std::fprintf(stderr, "activekv_tier_restore_bench: redis-server is not installed (scripts/install-deps.sh --test)\n");
    return 1;
  }
  tier::testing::RedisServer redis;
  if (!redis.start()) {
    std::fprintf(stderr, "activekv_tier_restore_bench: redis-server did not start\n");
    return 1;
  }
  Geometry g;
  g.dense_layers = 30;
  g.kv_heads = 3;
  g.head_dim = 64;
  g.dtype = DType::f16;

  tier::RedisTierSettings ts;
  ts.store = tier::parse_tier_url(redis.url(), "--kv-tier").value();
  ts.store.command_timeout_ms = timeout_ms;
  ts.block_tokens = kBlock;
  ts.page_tokens = kPage;
  ts.max_context_tokens = kMaxContext;
  ts.model_identity = kModel;
  ts.geometry = g;
  auto port = tier::RedisTier::create(ts);
  if (!port.ok()) {
    std::fprintf(stderr, "%s\n", port.error().describe().c_str());
    return 1;
  }
  std::unique_ptr<tier::RedisTier> tier_port = std::move(port).value();

  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = g;
  m.page_tokens = kPage;
  m.tile_tokens = 4 * kPage;
  m.tiles = 2;
  m.max_context_tokens = kMaxContext;
  m.max_seqs = kHistories;
  m.chunk_tokens = 2 * kPage;
  m.host_pool_bytes = std::uint64_t{kHistories} * g.dense_layers * kMaxContext * g.row_bytes();
  const std::uint64_t floor_pages = std::uint64_t{g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, kPage));
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * g.row_bytes() +
                        (floor_pages * kHistories + 8) * kPage * g.row_bytes();
  settings.q_heads = 9;
  settings.prefix_reuse = true;
  settings.tier = tier_port.get();
  auto backend = make_backend("host", BackendOptions{});
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.error().describe().c_str());
    return 1;
  }
  auto rt_made = KvRuntime::create(settings, *backend.value());
  if (!rt_made.ok()) {
    std::fprintf(stderr, "%s\n", rt_made.error().describe().c_str());
    return 1;
  }
  std::unique_ptr<KvRuntime> rt = std::move(rt_made).value();

  tier::TierStore store(ts.store, &const_cast<tier::TierCounters&>(tier_port->counters()));
  std::mt19937_64 rng(7);
  const std::uint64_t layer_bytes = std::uint64_t{kBlock} * g.row_bytes();
  std::vector<std::byte> rows(std::uint64_t{g.dense_layers} * layer_bytes);
  std::vector<std::byte> value(tier::tier_block_bytes(g, kBlock));
  std::vector<std::span<const std::byte>> layers(g.dense_layers);
  std::vector<std::uint64_t> chain(kMaxContext / kBlock);

  std::printf("| prompt tokens | restored tokens | MB read | lookup wall ms | admission ms | prepare ms (calls, longest) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::uint64_t id = 1;
  for (const std::uint32_t n : sizes) {
    std::vector<double> wall, admit, prepare, longest;
    std::uint32_t restored = 0, calls_last = 0;
    for (int r = 0; r < reps; ++r) {
      std::vector<std::int32_t> prompt(std::min(n, kMaxContext - 1));
      for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % 49152);
      const std::uint32_t blocks = tier::tier_block_chain(
          std::span<const std::int32_t>(prompt).first(((prompt.size() - 1) / kBlock) * kBlock), kPage, kBlock, kModel, chain);
      for (std::uint32_t b = 0; b < blocks; ++b) {
        for (auto& x : rows) x = static_cast<std::byte>(rng());
        for (std::uint32_t l = 0; l < g.dense_layers; ++l) layers[l] = std::span<const std::byte>(rows).subspan(l * layer_bytes, layer_bytes);
        tier::encode_tier_block(tier::TierBlockIdentity{kModel, g, kBlock, b, chain[b]}, layers, value);
        if (!store.put(tier::tier_block_key(kModel, g, chain[b]), value)) {
          std::fprintf(stderr, "activekv_tier_restore_bench: SET failed\n");
          return 1;
        }
      }
      auto prepare_time = Clock::duration::zero(), longest_call = Clock::duration::zero();
      const auto t0 = Clock::now();
      std::uint32_t calls = 0;
      for (;;) {
        const auto c0 = Clock::now();
        const bool ready = rt->prepare_tier(prompt);
        prepare_time += Clock::now() - c0;
        longest_call = std::max(longest_call, Clock::now() - c0);
        ++calls;
        if (ready) break;
        rt->wait_tier(20);
      }
      const auto t1 = Clock::now();
      std::uint32_t reused = 0;
      const auto a0 = Clock::now();
      auto admitted = rt->open_context(id++, kMaxContext, prompt, reused);
      const auto admit_time = Clock::now() - a0;
      if (!admitted.ok() || admitted->outcome != AdmitOutcome::admitted) {
        std::fprintf(stderr, "activekv_tier_restore_bench: not admitted\n");
        return 1;
      }
      rt->cancel(admitted->handle);
      restored = reused;
      calls_last = calls;
      wall.push_back(ms(t1 - t0));
      admit.push_back(ms(admit_time));
      prepare.push_back(ms(prepare_time));
      longest.push_back(ms(longest_call));
    }
    std::printf("| %zu | %u | %.0f | %.1f | %.2f | %.2f (%u, %.2f) |\n", static_cast<std::size_t>(std::min(n, kMaxContext - 1)),
                restored, static_cast<double>(restored) * g.dense_layers * static_cast<double>(g.row_bytes()) / 1e6, median(wall), median(admit),
                median(prepare), calls_last, median(longest));
  }
  tier_port->drain();
  return 0;
}
