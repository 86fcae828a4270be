// memory_plan_test.cpp — the formulas against an independent computation, the seed's figures,
// the arena's layout, and every refusal naming its setting.
#include "activekv/memory_plan.hpp"

#include <gtest/gtest.h>

#include <random>

#include "activekv/size.hpp"

namespace activekv {
namespace {

MemorySettings hybrid_settings() {
  MemorySettings s;
  s.geometry = find_preset("hybrid-27b")->geometry;
  s.max_context_tokens = 32768;
  s.host_pool_bytes = 64 * GiB;
  s.device_pool_bytes = 40 * GiB;
  s.max_seqs = 64;
  return s;
}

// Independent: the largest n with n × unit ≤ total, found by bisection (no division).
std::uint64_t largest_fitting(std::uint64_t unit, std::uint64_t total) {
  std::uint64_t lo = 0, hi = total / 1 + 1;  // n ≤ total since unit ≥ 1
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    const bool fits = mid <= total / unit;  // mid * unit <= total, without overflow
    (fits ? lo : hi) = mid;
  }
  return lo;
}

// A hybrid's prefix cache keeps state checkpoints beside its pages (docs/PREFIX_CACHE.md,
// "Recurrent state"): half its bytes, in whole states; the pages get the rest; the histories' state
// area follows the cache's states.
TEST(MemoryPlan, AHybridsPrefixCacheGivesHalfItsBytesToStateCheckpoints) {
  MemorySettings s = hybrid_settings();
  s.state_checkpoints = true;
  s.prefix_cache_bytes = 4 * GiB;
  const std::uint64_t state = find_preset("hybrid-27b")->geometry.recurrent_state_bytes;  // 153,944,064 B
  const MemoryPlan plan = make_memory_plan(s).value();
  const HostPoolPlan& h = plan.host;
  EXPECT_EQ(h.prefix_cache_page_bytes, 16u * 4096 * 16);  // 1 MiB
  EXPECT_EQ(h.prefix_cache_states, 2 * GiB / state);      // 13
  EXPECT_EQ(h.prefix_cache_states, 13u);
  EXPECT_EQ(h.prefix_cache_state_bytes, state);
  EXPECT_EQ(h.prefix_cache_pages, (4 * GiB - 13 * state) / MiB);  // 2187
  EXPECT_EQ(plan.state.offset, h.prefix_cache_offset + std::uint64_t{h.prefix_cache_pages} * MiB + 13 * state);
  EXPECT_EQ(h.used_bytes, plan.state.offset + plan.state.bytes);
  EXPECT_LE(h.used_bytes, s.host_pool_bytes);
  const std::string text = format_memory_plan(plan);
  EXPECT_NE(text.find("prefix_cache_states = floor(prefix_cache 4 GiB / 2 / state_bytes 146.81 MiB) = 13"), std::string::npos)
      << text;
  EXPECT_NE(text.find("prefix_cache      = floor((prefix_cache 4 GiB − states 1.86 GiB) / cache_page_bytes 1 MiB) = 2187 pages"),
            std::string::npos) << text;
  EXPECT_NE(memory_plan_json(plan).find("\"prefix_cache_states\": 13"), std::string::npos);
  // A cache too small for one state in its half: refused, naming prefix_cache.
  s.prefix_cache_bytes = 200 * MiB;
  Result<MemoryPlan> small = make_memory_plan(s);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().setting, "prefix_cache");
  EXPECT_NE(small.error().message.find("recurrent-state checkpoints"), std::string::npos) << small.error().message;
}

TEST(MemoryPlan, SeedFiguresForHybrid27b) {
  // Without prefix reuse no state is kept on the host: the seed's figures.
  const MemoryPlan seed = make_memory_plan(hybrid_settings()).value();
  EXPECT_EQ(seed.host.histories, 32u);
  EXPECT_EQ(seed.state.checkpoints, 0u);
  EXPECT_EQ(seed.arena.recurrent_slots, 32u);
  EXPECT_EQ(seed.arena.recurrent.size_bytes, 32 * find_preset("hybrid-27b")->geometry.recurrent_state_bytes);
  MemorySettings reuse = hybrid_settings();
  reuse.state_checkpoints = true;
  const MemoryPlan plan = make_memory_plan(reuse).value();
  EXPECT_EQ(plan.host.row_bytes, 4096u);
  EXPECT_EQ(plan.host.segment_bytes, 128 * MiB);
  EXPECT_EQ(plan.host.history_bytes, 2 * GiB);
  EXPECT_EQ(plan.host.segments, 512u);
  // Each history also keeps its state checkpoints on the host (state_plan.hpp): the newest page
  // boundary's and the prompt's, 2 × 153,944,064 B = 293.6 MiB. 64 GiB / (2 GiB + 293.6 MiB) = 27.99:
  // 27 histories, not the 32 that segments alone would give.
  const std::uint64_t state = find_preset("hybrid-27b")->geometry.recurrent_state_bytes;
  EXPECT_EQ(plan.state.checkpoints, 2u);
  EXPECT_EQ(plan.state.bytes_per_history, 2 * state);
  EXPECT_EQ(plan.host.histories, 64 * GiB / (2 * GiB + 2 * state));
  EXPECT_EQ(plan.host.histories, 27u);
  EXPECT_EQ(plan.host.leftover_segments, 512u - 27 * 16);
  EXPECT_EQ(plan.host.concurrency, 27u);  // min(max_seqs 64, histories 27)
  EXPECT_EQ(plan.arena.recurrent_slots, 27u);
  EXPECT_EQ(plan.arena.recurrent.size_bytes, 27 * state);
  EXPECT_EQ(plan.host.used_bytes, 27 * (2 * GiB + 2 * state));
}

TEST(MemoryPlan, PresetsMatchAnIndependentComputation) {
  for (const Preset& preset : presets()) {
    MemorySettings s;
    s.geometry = preset.geometry;
    s.max_context_tokens = 8192;
    s.host_pool_bytes = 100 * GiB + 12345;
    s.device_pool_bytes = 80 * GiB;
    s.max_seqs = 1000;
    s.state_checkpoints = true;
    const MemoryPlan plan = make_memory_plan(s).value();
    const std::uint64_t row = 2ull * preset.geometry.kv_heads * preset.geometry.head_dim * dtype_bytes(preset.geometry.dtype);
    const std::uint64_t segment = 8192 * row;
    EXPECT_EQ(plan.host.segment_bytes, segment) << preset.name;
    EXPECT_EQ(plan.host.segments, largest_fitting(segment, s.host_pool_bytes)) << preset.name;
    // A hybrid's history also holds its state checkpoints (state_plan.hpp); a window layer's share
    // is a ring of (ceil(W / P) + 1) × P tokens (Gemma 3: 512 + 16, 1,024 + 16).
    const std::uint32_t window = preset.geometry.kinds.window_tokens;
    const std::uint64_t ring = window == 0 ? 0 : std::min<std::uint64_t>(8192, ((window + 15) / 16 + 1) * 16) * row;
    const std::uint32_t windows = preset.geometry.window_layers();
    const std::uint64_t history = segment * (preset.geometry.dense_layers - windows) + ring * windows;
    EXPECT_EQ(plan.host.history_bytes, history) << preset.name;
    EXPECT_EQ(plan.host.histories, largest_fitting(history + state_bytes_per_history(s), s.host_pool_bytes)) << preset.name;
    if (windows == 0) {
      EXPECT_EQ(plan.host.leftover_segments, plan.host.segments - plan.host.histories * preset.geometry.dense_layers);
    } else {
      EXPECT_EQ(plan.host.leftover_segments, (s.host_pool_bytes - plan.host.histories * history) / segment) << preset.name;
    }
    EXPECT_EQ(plan.host.concurrency, std::min<std::uint64_t>(1000, plan.host.histories));
  }
}

TEST(MemoryPlan, RandomGeometriesMatchAnIndependentComputationAndLayoutHolds) {
  std::mt19937_64 rng(20261129);
  int planned = 0;
  for (int i = 0; i < 3000; ++i) {
    MemorySettings s;
    s.geometry.dense_layers = 1 + static_cast<std::uint32_t>(rng() % 96);
    s.geometry.kv_heads = 1 + static_cast<std::uint32_t>(rng() % 16);
    s.geometry.head_dim = 16u << (rng() % 4);
    s.geometry.dtype = static_cast<DType>(rng() % 3);
    if (rng() % 3 == 0) {
      s.geometry.recurrent_layers = 1 + static_cast<std::uint32_t>(rng() % 48);
      s.geometry.recurrent_state_bytes = 1 + rng() % (256 * MiB);
    }
    s.page_tokens = 1u << (rng() % 7);
    s.max_context_tokens = s.page_tokens * (1 + static_cast<std::uint32_t>(rng() % 4096));
    s.tile_tokens = s.page_tokens * (1 + static_cast<std::uint32_t>(rng() % 64));
    s.tiles = 1 + static_cast<std::uint32_t>(rng() % 4);
    s.chunk_tokens = 1 + static_cast<std::uint32_t>(rng() % std::min(512u, s.max_context_tokens));
    s.max_seqs = 1 + static_cast<std::uint32_t>(rng() % 512);
    s.host_pool_bytes = 1 + rng() % (512 * GiB);
    s.state_checkpoints = rng() % 2 == 0;
    s.state_checkpoint_pages = static_cast<std::uint32_t>(rng() % 64);
    s.device_pool_bytes = 1 + rng() % (160 * GiB);
    const Result<MemoryPlan> result = make_memory_plan(s);
    const std::uint64_t row = s.geometry.row_bytes();
    const std::uint64_t segment = static_cast<std::uint64_t>(s.max_context_tokens) * row;
    const std::uint64_t histories =
        largest_fitting(segment * s.geometry.dense_layers + state_bytes_per_history(s), s.host_pool_bytes);
    if (histories == 0) {
      ASSERT_FALSE(result.ok());
      EXPECT_EQ(result.error().setting, "--host-pool");
      continue;
    }
    if (!result.ok()) {
      // The only other refusal for these settings: the device pool cannot hold one floor.
      EXPECT_TRUE(result.error().setting == "--device-pool" || result.error().setting == "--page-tokens" ||
                  result.error().setting == "--floor-pages")
          << result.error().describe();
      continue;
    }
    ++planned;
    const MemoryPlan& p = *result;
    EXPECT_EQ(p.host.segments, largest_fitting(segment, s.host_pool_bytes));
    EXPECT_EQ(p.host.histories, histories);
    EXPECT_EQ(p.host.leftover_segments + p.host.histories * s.geometry.dense_layers, p.host.segments);
    if (s.geometry.recurrent_state_bytes == 0) {
      EXPECT_LT(p.host.leftover_segments, s.geometry.dense_layers);
    }
    EXPECT_LE(p.host.used_bytes, s.host_pool_bytes);
    EXPECT_EQ(p.host.concurrency, std::min<std::uint64_t>(s.max_seqs, histories));
    // Arena: parts in order, aligned, disjoint, inside the device pool.
    const ArenaPlan& a = p.arena;
    EXPECT_EQ(a.staging_tiles.size_bytes, static_cast<std::uint64_t>(s.tiles) * s.tile_tokens * row);
    EXPECT_EQ(a.page_pool.size_bytes, static_cast<std::uint64_t>(a.pages) * s.page_tokens * row);
    for (const ArenaPart* part : {&a.staging_tiles, &a.page_pool, &a.recurrent, &a.headroom}) {
      if (part->size_bytes != 0) {
        EXPECT_EQ(part->offset_bytes % arena_alignment_bytes, 0u);
      }
    }
    EXPECT_GE(a.page_pool.offset_bytes, a.staging_tiles.offset_bytes + a.staging_tiles.size_bytes);
    EXPECT_GE(a.recurrent.offset_bytes, a.page_pool.offset_bytes + a.page_pool.size_bytes);
    EXPECT_GE(a.headroom.offset_bytes, a.recurrent.offset_bytes + a.recurrent.size_bytes);
    EXPECT_LE(a.used_bytes, s.device_pool_bytes);
    EXPECT_EQ(a.used_bytes + a.unused_bytes, s.device_pool_bytes);
    // One more page would not fit (the layout recomputed here, part by part).
    auto used_with = [&](std::uint64_t pages) {
      auto up = [](std::uint64_t x) { return (x + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes; };
      std::uint64_t end = up(a.staging_tiles.size_bytes) + pages * a.page_bytes;
      if (a.recurrent.size_bytes != 0) end = up(end) + a.recurrent.size_bytes;
      if (a.headroom.size_bytes != 0) end = up(end) + a.headroom.size_bytes;
      return end;
    };
    EXPECT_EQ(used_with(a.pages), a.used_bytes);
    EXPECT_GT(used_with(a.pages + 1ull), s.device_pool_bytes);
    const BudgetPlan& b = p.budget;
    EXPECT_LE(b.floor_pages, b.target_pages);
    EXPECT_LE(b.target_pages, b.burst_pages);
    EXPECT_LE(b.burst_pages, a.pages);
    EXPECT_EQ(b.floor_pages_min, static_cast<std::uint64_t>(b.floor_pages_per_layer) * s.geometry.dense_layers);
    EXPECT_EQ(b.concurrency, std::min<std::uint64_t>(p.host.concurrency, a.pages / b.floor_pages));
  }
  EXPECT_GT(planned, 300);  // the generator reaches the planned path often enough to mean something
}

TEST(MemoryPlan, PagesSpannedCoversEveryAlignment) {
  for (std::uint32_t P : {1u, 2u, 16u, 64u}) {
    for (std::uint32_t tokens = 1; tokens <= 200; ++tokens) {
      std::uint32_t worst = 0;
      for (std::uint32_t start = 0; start < P; ++start) worst = std::max(worst, (start + tokens - 1) / P - start / P + 1);
      EXPECT_EQ(pages_spanned_max(tokens, P), worst) << P << " " << tokens;
    }
  }
}

TEST(MemoryPlan, HostPoolTooSmallNamesTheMinimum) {
  MemorySettings s = hybrid_settings();
  s.host_pool_bytes = 1 * GiB;
  const auto r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--host-pool");
  EXPECT_NE(r.error().message.find("host pool must be at least 2 GiB (16 segments of 128 MiB) for max context 32768"),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("lower --max-context to 16384"), std::string::npos) << r.error().message;
}

// The retained-history allowance: histories that never run a context, only keep retained
// prefixes. The concurrency leaves them out; the host pool maps them; a pool that cannot hold
// one running history besides them is refused with the formula.
TEST(MemoryPlan, RetainedHistoriesAreMappedBeyondTheConcurrencyOrRefusedWithTheFormula) {
  MemorySettings s;
  s.geometry = find_preset("smollm2-135m")->geometry;
  s.max_context_tokens = 8192;
  s.max_seqs = 6;
  s.device_pool_bytes = 24 * MiB;
  s.tile_tokens = 1024;
  s.tiles = 4;
  s.chunk_tokens = 128;            // configs/default.json's prefill chunk
  s.host_pool_bytes = 1080 * MiB;  // 6 histories of 180 MiB
  s.retained_histories = 2;
  const MemoryPlan plan = make_memory_plan(s).value();
  EXPECT_EQ(plan.host.histories, 6u);
  EXPECT_EQ(plan.host.retained_histories, 2u);
  EXPECT_EQ(plan.host.concurrency, 4u);  // min(max_seqs 6, histories 6 − retained 2)
  EXPECT_EQ(plan.host.history_slots, 6u);
  EXPECT_EQ(plan.host.used_bytes, 6 * 180 * MiB);
  EXPECT_EQ(plan.budget.concurrency, 4u) << "the device plan is the one 4 running contexts had before";
  const std::string text = format_memory_plan(plan);
  EXPECT_NE(text.find("concurrency       = min(max_seqs 6, histories 6 − retained_histories 2) = 4"), std::string::npos)
      << text;
  EXPECT_NE(text.find("history_slots     = concurrency 4 + retained_histories 2 = 6"), std::string::npos) << text;
  EXPECT_NE(text.find("pinned            = history_slots 6 × 180 MiB"), std::string::npos) << text;
  const std::string json = memory_plan_json(plan);
  EXPECT_NE(json.find("\"retained_histories\": 2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"history_slots\": 6"), std::string::npos) << json;
  // max_seqs below the histories: the allowance still comes on top of the concurrency.
  s.max_seqs = 2;
  const MemoryPlan small = make_memory_plan(s).value();
  EXPECT_EQ(small.host.concurrency, 2u);
  EXPECT_EQ(small.host.history_slots, 4u);
  // Without the allowance the plan is what it always was.
  s.max_seqs = 6;
  s.retained_histories = 0;
  s.host_pool_bytes = 720 * MiB;
  const MemoryPlan none = make_memory_plan(s).value();
  EXPECT_EQ(none.host.concurrency, 4u);
  EXPECT_EQ(none.host.history_slots, 4u);
  EXPECT_EQ(none.host.used_bytes, 720 * MiB);
  // Refused: 4 histories cannot keep 4 retained and run one.
  s.retained_histories = 4;
  const auto r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "retained_histories");
  EXPECT_NE(r.error().message.find("concurrency (at least 1) + retained_histories 4"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("raise --host-pool to at least 900 MiB"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line";
}

TEST(MemoryPlan, ThePrefixCacheIsCarvedOffTheHostPoolInWholePagesOrRefusedNamingTheSetting) {
  MemorySettings s;
  s.geometry = find_preset("smollm2-135m")->geometry;
  s.max_context_tokens = 8192;
  s.max_seqs = 6;
  s.device_pool_bytes = 24 * MiB;
  s.tile_tokens = 1024;
  s.tiles = 4;
  s.chunk_tokens = 128;
  s.host_pool_bytes = 1080 * MiB + 1024 * MiB;  // 6 histories of 180 MiB + a 1 GiB cache
  s.retained_histories = 2;
  s.prefix_cache_bytes = 1024 * MiB;
  const MemoryPlan plan = make_memory_plan(s).value();
  // A cache page is one page index across every dense layer: 16 × 768 B × 30 = 360 KiB.
  EXPECT_EQ(plan.host.prefix_cache_page_bytes, 16u * 768 * 30);
  EXPECT_EQ(plan.host.prefix_cache_pages, 1024 * MiB / (16 * 768 * 30));  // 2912 pages: 46,592 tokens
  EXPECT_EQ(plan.host.histories, 6u) << "the histories get what the cache leaves";
  EXPECT_EQ(plan.host.concurrency, 4u);
  EXPECT_EQ(plan.host.prefix_cache_offset, 6 * 180 * MiB);
  EXPECT_EQ(plan.host.used_bytes, 6 * 180 * MiB + std::uint64_t{2912} * 16 * 768 * 30);
  const std::string text = format_memory_plan(plan);
  EXPECT_NE(text.find("prefix_cache      = floor(prefix_cache 1 GiB / cache_page_bytes 360 KiB) = 2912 pages = 46592 tokens"),
            std::string::npos) << text;
  EXPECT_NE(text.find("segments          = floor((host_pool 2.05 GiB − prefix_cache 1 GiB) / segment_bytes 6 MiB) = 180"),
            std::string::npos) << text;
  EXPECT_NE(text.find("pinned            = history_slots 6 × 180 MiB + prefix cache 2912 pages × 360 KiB"), std::string::npos)
      << text;
  EXPECT_NE(memory_plan_json(plan).find("\"prefix_cache_pages\": 2912"), std::string::npos);
  // Without room for the cache and one history: refused, naming prefix_cache and both ways out.
  s.host_pool_bytes = 1024 * MiB + 100 * MiB;
  Result<MemoryPlan> tight = make_memory_plan(s);
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.error().setting, "prefix_cache");
  EXPECT_NE(tight.error().message.find("raise --host-pool to at least 1.18 GiB or lower prefix_cache to at most"),
            std::string::npos) << tight.error().message;
  // Smaller than one cache page: refused, naming the page size.
  s.host_pool_bytes = 2048 * MiB;
  s.prefix_cache_bytes = 100 * 1024;
  Result<MemoryPlan> tiny = make_memory_plan(s);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.error().setting, "prefix_cache");
  EXPECT_NE(tiny.error().message.find("holds no cache page of 360 KiB"), std::string::npos) << tiny.error().message;
  // The retained-histories refusal counts the histories in what the cache leaves.
  s.prefix_cache_bytes = 1900 * MiB;
  EXPECT_FALSE(make_memory_plan(s).ok());
}

TEST(MemoryPlan, AutomaticDeviceSizesAreRefusedWithHowToChoose) {
  const MemorySettings s = hybrid_settings();
  for (const char* text : {"auto", "AUTO", "0", "50%", "max"}) {
    const auto r = parse_device_pool(text, s);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().setting, "--device-pool");
    EXPECT_NE(r.error().message.find("would hide the decision"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("at least"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(parse_device_pool("24GiB", s).value(), 24 * GiB);
  MemorySettings zero = s;
  zero.device_pool_bytes = 0;
  const auto r = make_memory_plan(zero);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--device-pool");
}

TEST(MemoryPlan, DevicePoolTooSmallSaysWhatItNeeds) {
  MemorySettings s = hybrid_settings();
  s.device_pool_bytes = 1 * GiB;  // tiles alone are 256 MiB, recurrent slots 4.59 GiB
  const auto r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--device-pool");
  EXPECT_NE(r.error().message.find("recurrent slots"), std::string::npos);
}

TEST(MemoryPlan, PageMustDivideTile) {
  MemorySettings s = hybrid_settings();
  s.page_tokens = 48;
  s.max_context_tokens = 48 * 512;
  s.tile_tokens = 1000;
  const auto r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--tile-tokens");
  EXPECT_NE(r.error().message.find("must divide the tile size"), std::string::npos);
  EXPECT_NE(r.error().message.find("960 or 1008"), std::string::npos) << r.error().message;
}

TEST(MemoryPlan, BudgetsOutOfOrderAreRefusedByName) {
  MemorySettings s = hybrid_settings();
  const MemoryPlan base = make_memory_plan(s).value();
  s.floor_pages = base.budget.floor_pages_min * 2;
  s.target_pages = base.budget.floor_pages_min;  // target < floor
  auto r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--target-pages");
  EXPECT_NE(r.error().message.find("below the floor"), std::string::npos);

  s.target_pages = base.budget.floor_pages_min * 4;
  s.burst_pages = base.budget.floor_pages_min * 3;  // burst < target
  r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--burst-pages");

  s = hybrid_settings();
  s.floor_pages = base.budget.floor_pages_min - 1;  // below the minimum floor
  r = make_memory_plan(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--floor-pages");
  EXPECT_NE(r.error().message.find("minimum floor"), std::string::npos);
}

TEST(MemoryPlan, ZeroAndMalformedSettingsAreRefusedByName) {
  struct Case {
    void (*mutate)(MemorySettings&);
    const char* setting;
  };
  const Case cases[] = {
      {[](MemorySettings& s) { s.max_context_tokens = 0; }, "--max-context"},
      {[](MemorySettings& s) { s.max_context_tokens = 32769; }, "--max-context"},
      {[](MemorySettings& s) { s.page_tokens = 0; }, "--page-tokens"},
      {[](MemorySettings& s) { s.tiles = 0; }, "--tiles"},
      {[](MemorySettings& s) { s.max_seqs = 0; }, "--max-seqs"},
      {[](MemorySettings& s) { s.chunk_tokens = 0; }, "--chunk-tokens"},
      {[](MemorySettings& s) { s.chunk_tokens = 40000; }, "--chunk-tokens"},
      {[](MemorySettings& s) { s.host_pool_bytes = 0; }, "--host-pool"},
      {[](MemorySettings& s) { s.geometry.kv_heads = 0; }, "--kv-heads"},
      {[](MemorySettings& s) { s.geometry.dense_layers = 0; }, "--dense-layers"},
      {[](MemorySettings& s) { s.tiles = 4000000000u; s.tile_tokens = 1u << 31; }, "--tiles"},
      {[](MemorySettings& s) { s.tiles = 4000000000u; s.tile_tokens = 32768; }, "--device-pool"},
      {[](MemorySettings& s) {
         s.max_context_tokens = 4294967280u;
         s.geometry.kv_heads = 1024;
         s.geometry.head_dim = (1u << 20) - 1;
       }, "--max-context"},
  };
  for (const Case& c : cases) {
    MemorySettings s = hybrid_settings();
    c.mutate(s);
    const auto r = make_memory_plan(s);
    ASSERT_FALSE(r.ok()) << c.setting;
    EXPECT_EQ(r.error().setting, c.setting) << r.error().describe();
    EXPECT_FALSE(r.error().message.empty());
  }
  // Sizes as text: negative, malformed and overflowing values are refused by the parser, by name.
  for (const char* bad : {"-1", "12XB", "99999999999999999999", "16777216TiB", ""}) {
    const auto r = parse_device_pool(bad, hybrid_settings());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().setting, "--device-pool") << bad;
  }
}

TEST(MemoryPlan, PrintsFormulasAndJsonWithTheFormulasTerms) {
  MemorySettings s = hybrid_settings();
  s.state_checkpoints = true;  // prefix reuse on
  const MemoryPlan plan = make_memory_plan(s).value();
  const std::string text = format_memory_plan(plan);
  EXPECT_NE(text.find("segment_bytes     = max_context 32768 × row_bytes 4096 = 128 MiB"), std::string::npos) << text;
  // A hybrid's histories also hold their state checkpoints (state_plan.hpp): 27, not 32.
  EXPECT_NE(text.find("histories         = min(floor(segments 512 / dense_layers 16), floor((host_pool 64 GiB − "
                      "prefix_cache 0 B) / (history 2 GiB + state checkpoints 293.62 MiB))) = 27"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("concurrency       = min(max_seqs 64, histories 27) = 27"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoints       = newest 1 + prompt 1 + every K pages 0 (--state-checkpoint-pages 0) = 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("recurrent slots   = concurrency 27 × 146.81 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("page pool"), std::string::npos);
  const std::string json = memory_plan_json(plan);
  for (const char* key : {"\"segment_bytes\": 134217728", "\"segments\": 512", "\"histories\": 27",
                          "\"leftover_segments\": 80", "\"concurrency\": 27", "\"staging_tiles\"", "\"page_pool\"",
                          "\"checkpoints\": 2", "\"bytes_per_history\": 307888128",
                          "\"recurrent\"", "\"headroom\"", "\"floor_pages\"", "\"target_pages\"", "\"burst_pages\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << "\n" << json;
  }
}


// Sparse attention's page summaries: their own arena part (between the recurrent slots and the
// headroom, aligned), sized by the formula, taken from the page pool; none with sparse off, where
// the plan is the exact plan (same layout, no summaries line).
TEST(MemoryPlan, SparseSummariesAreAnArenaPartOfTheirOwn) {
  MemorySettings s = hybrid_settings();
  s.state_checkpoints = true;  // prefix reuse on: the hybrid's histories keep state checkpoints
  s.headroom_bytes = 1 * GiB;
  const MemoryPlan exact = make_memory_plan(s).value();
  EXPECT_EQ(exact.summaries.bytes, 0u);
  EXPECT_EQ(exact.arena.summaries.size_bytes, 0u);
  EXPECT_EQ(exact.arena.summaries.offset_bytes, exact.arena.recurrent.offset_bytes + exact.arena.recurrent.size_bytes);
  EXPECT_EQ(format_memory_plan(exact).find("page summaries"), std::string::npos);
  EXPECT_EQ(memory_plan_json(exact).find("summaries"), std::string::npos);

  s.sparse_summaries = true;
  const MemoryPlan sparse = make_memory_plan(s).value();
  const SummaryPlan& sp = sparse.summaries;
  const Geometry& g = s.geometry;
  const std::uint64_t pages = 32768 / 16 + 1;
  EXPECT_EQ(sp.histories, 27u);  // the hybrid's histories (its state checkpoints count against the pool)
  EXPECT_EQ(sp.pages_per_layer, pages);
  EXPECT_EQ(sp.page_bytes, 2ull * g.kv_heads * g.head_dim * 2);
  EXPECT_EQ(sp.bytes, 27ull * g.dense_layers * pages * sp.page_bytes);
  const ArenaPlan& a = sparse.arena;
  EXPECT_EQ(a.summaries.size_bytes, sp.bytes);
  EXPECT_EQ(a.summaries.offset_bytes % arena_alignment_bytes, 0u);
  EXPECT_GE(a.summaries.offset_bytes, a.recurrent.offset_bytes + a.recurrent.size_bytes);
  EXPECT_GE(a.headroom.offset_bytes, a.summaries.offset_bytes + a.summaries.size_bytes);
  EXPECT_LE(a.used_bytes, a.device_pool_bytes);
  EXPECT_EQ(a.headroom.size_bytes, exact.arena.headroom.size_bytes);
  // The pages give way: at most the summaries' bytes (plus alignment) fewer pages' worth.
  EXPECT_LT(a.pages, exact.arena.pages);
  EXPECT_LE((exact.arena.pages - a.pages) * a.page_bytes, sp.bytes + 2 * arena_alignment_bytes + a.page_bytes);
  const std::string text = format_memory_plan(sparse);
  EXPECT_NE(text.find("page summaries"), std::string::npos) << text;
  EXPECT_NE(text.find("histories 27 × dense_layers 16 × pages 2049 × page_bytes"), std::string::npos) << text;
  EXPECT_NE(memory_plan_json(sparse).find("\"page_summaries\""), std::string::npos);
  // A pool that fits the exact plan's floor but not the summaries too is refused, naming them.
  s.device_pool_bytes = a.staging_tiles.size_bytes + a.recurrent.size_bytes + s.headroom_bytes + 64 * MiB;
  const Result<MemoryPlan> tight = make_memory_plan(s);
  ASSERT_FALSE(tight.ok());
  EXPECT_NE(tight.error().describe().find("page summaries"), std::string::npos) << tight.error().describe();
}

}  // namespace
}  // namespace activekv

namespace activekv {
namespace {

// Gemma 3 270M at 32K (18 layers, 15 of them window layers of 512, 1 KiB rows): a history is
// 3 × 32,768 + 15 × (512 + 16) rows, and a 4 GiB pool holds 39 of them (7 with full layers).
TEST(MemoryPlan, WindowLayersReserveRingsAndTheLayoutTilesEachHistory) {
  MemorySettings s;
  s.geometry = find_preset("gemma3-270m")->geometry;
  s.max_context_tokens = 32768;
  s.host_pool_bytes = 4 * GiB;
  s.device_pool_bytes = 1 * GiB;
  s.max_seqs = 64;
  const MemoryPlan plan = make_memory_plan(s).value();
  const HostPoolPlan& h = plan.host;
  ASSERT_EQ(h.row_bytes, 1024u);
  EXPECT_EQ(h.ring_tokens, 528u);
  EXPECT_EQ(h.window_layers, 15u);
  EXPECT_EQ(h.history_bytes, (3ull * 32768 + 15ull * 528) * 1024);
  EXPECT_EQ(h.histories, 39u);
  EXPECT_EQ(4 * GiB / (18ull * 32768 * 1024), 7u);
  EXPECT_EQ(h.concurrency, 39u);
  EXPECT_EQ(h.used_bytes, 39 * h.history_bytes);
  // Each layer's share follows the previous one; the last ends where the next history starts.
  for (std::uint32_t hist = 0; hist < 2; ++hist) {
    EXPECT_EQ(h.segment_offset(hist, 0), hist * h.history_bytes);
    for (std::uint32_t l = 0; l + 1 < 18; ++l) {
      EXPECT_EQ(h.segment_offset(hist, l) + h.layer_bytes(l), h.segment_offset(hist, l + 1)) << l;
    }
    EXPECT_EQ(h.segment_offset(hist, 17) + h.layer_bytes(17), (hist + 1) * h.history_bytes);
  }
  // Layer 0 is a window layer (its ring wraps), layer 5 a full one.
  EXPECT_TRUE(h.is_ring(0));
  EXPECT_FALSE(h.is_ring(5));
  EXPECT_EQ(h.row_offset(1, 0, 528 + 7), h.row_offset(1, 0, 7));
  EXPECT_EQ(h.row_offset(1, 5, 528 + 7), h.row_offset(1, 5, 7) + 528 * 1024);
  EXPECT_TRUE(h.holds(0, 1000, 1000 - 528));
  EXPECT_FALSE(h.holds(0, 1000, 1000 - 529));
  EXPECT_TRUE(h.holds(5, 1000, 0));
  // A query at 1000 in a window layer sees (488, 1000]: pages from 489 / 16 = 30 on.
  EXPECT_EQ(h.first_page_seen(0, 1000, 16), 30u);
  EXPECT_EQ(h.first_page_seen(5, 1000, 16), 0u);
  EXPECT_NE(format_memory_plan(plan).find("history_bytes     = full_layers 3"), std::string::npos);
}

TEST(MemoryPlan, WindowLayersRefuseAChunkPastTheRingAndPlanAPrefixCache) {
  MemorySettings s;
  s.geometry = find_preset("gemma3-270m")->geometry;
  s.max_context_tokens = 32768;
  s.host_pool_bytes = 4 * GiB;
  s.device_pool_bytes = 1 * GiB;
  s.chunk_tokens = 529;
  Result<MemoryPlan> plan = make_memory_plan(s);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().describe().find("--chunk-tokens"), std::string::npos) << plan.error().describe();
  s.chunk_tokens = 256;
  // A prefix cache is planned like any other (docs/PREFIX_CACHE.md, "Window layers"): pages of every
  // layer (16 × 1 KiB × 18 = 288 KiB), carved off first; the histories by the ring formula.
  s.prefix_cache_bytes = 64 << 20;
  plan = make_memory_plan(s);
  ASSERT_TRUE(plan.ok()) << plan.error().describe();
  EXPECT_EQ(plan->host.prefix_cache_page_bytes, 16u * 1024 * 18);
  EXPECT_EQ(plan->host.prefix_cache_pages, (64u << 20) / (16u * 1024 * 18));  // 227 pages
  EXPECT_EQ(plan->host.histories, (4 * GiB - (64u << 20)) / ((3ull * 32768 + 15ull * 528) * 1024));  // 38
  EXPECT_EQ(plan->host.prefix_cache_offset, std::uint64_t{plan->host.history_slots} * plan->host.history_bytes);
  const std::string text = format_memory_plan(*plan);
  EXPECT_NE(text.find("prefix_cache      = floor(prefix_cache 64 MiB / cache_page_bytes 288 KiB) = 227 pages"),
            std::string::npos) << text;
  EXPECT_NE(text.find("(window layers 15: a cached page keeps their rows only if the finished history's ring of 528 tokens"),
            std::string::npos) << text;
}

}  // namespace
}  // namespace activekv
