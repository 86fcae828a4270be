// window_plan_test.cpp — window layers' rings against the and DESIGN.md's figures, the
// Gemma 3 presets' layer kinds, and a layer-kind table that contradicts its geometry refused.
#include "activekv/window_plan.hpp"

#include <gtest/gtest.h>

#include "activekv/size.hpp"

namespace activekv {
namespace {

MemoryPlan gemma3_plan(const char* preset, std::uint32_t context, std::uint64_t host_pool) {
  MemorySettings s;
  s.geometry = find_preset(preset)->geometry;
  s.max_context_tokens = context;
  s.host_pool_bytes = host_pool;
  s.device_pool_bytes = 2 * GiB;
  s.max_seqs = 64;
  return make_memory_plan(s).value();
}

// Gemma 3 270M at 32K: 3 × 32,768 + 15 × (512 + 16) rows of 1 KiB ≈ 103.7 MiB instead of 576 MiB.
TEST(WindowPlan, Gemma3_270mAt32kCostsAWindowNotAHistory) {
  const WindowPlan w = window_plan(gemma3_plan("gemma3-270m", 32768, 4 * GiB));
  EXPECT_EQ(w.full_layers, 3u);
  EXPECT_EQ(w.window_layers, 15u);
  EXPECT_EQ(w.window_tokens, 512u);
  EXPECT_EQ(w.ring_tokens, 528u);
  EXPECT_EQ(w.ring_bytes, 528u * KiB);
  EXPECT_EQ(w.history_bytes, (3ull * 32768 + 15ull * 528) * KiB);
  EXPECT_NEAR(static_cast<double>(w.history_bytes) / MiB, 103.73, 0.01);
  EXPECT_EQ(w.history_bytes_full, 576 * MiB);
  // A 4 GiB host pool: 39 histories with rings, 7 with every layer a segment.
  EXPECT_EQ(w.histories, 39u);
  EXPECT_EQ(w.histories_full, 7u);
  EXPECT_EQ(w.ring_pages, 33u);
  EXPECT_EQ(w.burst_pages, 3ull * 2048 + 15ull * 33);
  EXPECT_EQ(w.burst_pages_full, 18ull * 2048);
  const std::string text = format_window_plan(w);
  EXPECT_NE(text.find("3 full layers, 15 window layers of 512 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("= 528"), std::string::npos) << text;
}

TEST(WindowPlan, ARingNeverExceedsTheContextAndRoundsTheWindowUpToPages) {
  // Window 1,024 (4B) at a 1,008-token context: the ring is the context.
  EXPECT_EQ(window_plan(gemma3_plan("gemma3-4b", 1008, 8 * GiB)).ring_tokens, 1008u);
  // Window 512 with 48-token pages: ceil(512 / 48) = 11 pages + 1 = 576 tokens.
  MemorySettings s;
  s.geometry = find_preset("gemma3-1b")->geometry;
  s.max_context_tokens = 32736;  // 682 pages of 48
  s.page_tokens = 48;
  s.tile_tokens = 480;
  s.host_pool_bytes = 8 * GiB;
  s.device_pool_bytes = 2 * GiB;
  EXPECT_EQ(window_plan(make_memory_plan(s).value()).ring_tokens, 576u);
}

TEST(WindowPlan, FullLayerGeometriesHaveNoWindowFigures) {
  const MemoryPlan plan = gemma3_plan("smollm2-135m", 8192, 4 * GiB);
  const WindowPlan w = window_plan(plan);
  EXPECT_EQ(w.window_layers, 0u);
  EXPECT_EQ(w.history_bytes, w.history_bytes_full);
  EXPECT_EQ(w.history_bytes, plan.host.history_bytes);
  EXPECT_EQ(format_window_plan(w), "");
  EXPECT_EQ(format_memory_plan(plan).find("layer kinds"), std::string::npos);
}

// The presets' numbers as the published configs give them (geometry.cpp states them).
TEST(WindowPlan, Gemma3PresetsFollowTheirConfigs) {
  struct Want {
    const char* name;
    std::uint32_t layers, kv_heads, head_dim, window, window_layers, context;
  };
  const Want wants[] = {{"gemma3-270m", 18, 1, 256, 512, 15, 32768},   {"gemma3-1b", 26, 1, 256, 512, 22, 32768},
                        {"gemma3-4b", 34, 4, 256, 1024, 29, 131072},   {"gemma3-12b", 48, 8, 256, 1024, 40, 131072},
                        {"gemma3-27b", 62, 16, 128, 1024, 52, 131072}};
  for (const Want& want : wants) {
    const Preset p = find_preset(want.name).value();
    EXPECT_EQ(p.geometry.dense_layers, want.layers) << want.name;
    EXPECT_EQ(p.geometry.kv_heads, want.kv_heads) << want.name;
    EXPECT_EQ(p.geometry.head_dim, want.head_dim) << want.name;
    EXPECT_EQ(p.geometry.kinds.window_tokens, want.window) << want.name;
    EXPECT_EQ(p.geometry.window_layers(), want.window_layers) << want.name;
    EXPECT_EQ(p.max_context_tokens, want.context) << want.name;
    for (std::uint32_t l = 0; l < want.layers; ++l)  // every sixth layer (5, 11, …) is global
      EXPECT_EQ(p.geometry.kinds.is_window(l), l % 6 != 5) << want.name << " layer " << l;
    EXPECT_TRUE(p.geometry.validate().ok()) << want.name;
  }
}

TEST(WindowPlan, ALayerKindTableThatContradictsTheGeometryIsRefused) {
  Geometry g = find_preset("gemma3-270m")->geometry;
  g.kinds.window_tokens = 0;
  Status s = g.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "--window");
  g = find_preset("gemma3-270m")->geometry;
  g.kinds.set_window(20);  // past the 18 dense layers
  s = g.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "--window-layers");
}

}  // namespace
}  // namespace activekv
