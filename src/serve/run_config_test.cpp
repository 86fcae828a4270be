// run_config_test.cpp — the run configuration: the default file, and refusals naming the field.
#include "serve/run_config.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "activekv/size.hpp"
#include "serve/retained_histories.hpp"

namespace activekv::serve {
namespace {

const std::string valid =
    R"({"host_pool": "720MiB", "device_pool": "24MiB", "page_tokens": 16, "tile_tokens": 1024, "tiles": 4,
        "max_seqs": 6, "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2})";

TEST(RunConfig, DefaultFileIsExplicitAndValid) {
  auto config = parse_run_config(default_config_text(), "configs/default.json");
  ASSERT_TRUE(config) << config.error().describe();
  EXPECT_GT(config->host_pool_bytes, 0u);
  EXPECT_GT(config->device_pool_bytes, 0u);
  EXPECT_LT(config->device_pool_bytes, config->host_pool_bytes);
  EXPECT_EQ(config->tile_tokens % config->page_tokens, 0u);
  EXPECT_TRUE(config->model.empty());
}

TEST(RunConfig, ParsesSizesAndCounts) {
  auto config = parse_run_config(valid, "c.json");
  ASSERT_TRUE(config) << config.error().describe();
  EXPECT_EQ(config->host_pool_bytes, 720 * MiB);
  EXPECT_EQ(config->device_pool_bytes, 24 * MiB);
  EXPECT_EQ(config->page_tokens, 16u);
  EXPECT_EQ(config->max_context_tokens, 0u);  // the model's own
  EXPECT_TRUE(config->stop_at_eos);
  EXPECT_DOUBLE_EQ(config->arrival_scale, 1.0);
}

std::string with(const std::string& key, const std::string& value) {
  std::string text = valid;
  const std::string needle = "\"" + key + "\": ";
  const auto at = text.find(needle);
  if (at == std::string::npos) return text.substr(0, text.size() - 1) + ", \"" + key + "\": " + value + "}";
  const auto end = text.find_first_of(",}", at);
  return text.substr(0, at + needle.size()) + value + text.substr(end);
}

TEST(RunConfig, BadSettingsNameTheField) {
  struct Case {
    std::string text;
    const char* field;
  };
  const Case cases[] = {
      {with("device_pool", "\"auto\""), "device_pool"},
      {with("host_pool", "\"lots\""), "host_pool"},
      {with("page_tokens", "0"), "page_tokens"},
      {with("tile_tokens", "1000"), "tile_tokens"},
      {with("prefill_chunk_tokens", "512"), "prefill_chunk_tokens"},
      {with("step_tokens", "4"), "step_tokens"},
      {with("threads", "\"two\""), "threads"},
      {with("max_sequences", "4"), "max_sequences"},
      {with("arrival_scale", "-1"), "arrival_scale"},
      {with("prefix_reuse_device", "\"yes\""), "prefix_reuse_device"},
      {R"({"device_pool": "24MiB", "page_tokens": 16, "tile_tokens": 1024, "tiles": 4, "max_seqs": 6,
           "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2})", "host_pool"},
  };
  for (const Case& c : cases) {
    auto config = parse_run_config(c.text, "c.json");
    ASSERT_FALSE(config) << c.text;
    EXPECT_NE(config.error().describe().find(c.field), std::string::npos) << config.error().describe();
    EXPECT_NE(config.error().describe().find("c.json"), std::string::npos) << config.error().describe();
  }
  auto broken = parse_run_config("{\"host_pool\": ", "c.json");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, ErrorCode::malformed);
}

TEST(RunConfig, ActivationsDefaultToQ16ParseAndRefuseOtherValuesNamingTheKey) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_EQ(defaults->activations, "q16");
  for (const char* width : {"q8", "q16"}) {
    auto set = parse_run_config(with("activations", std::string("\"") + width + "\""), "c.json");
    ASSERT_TRUE(set) << set.error().describe();
    EXPECT_EQ(set->activations, width);
  }
  for (const char* value : {"\"q4\"", "\"Q8\"", "8", "\"\""}) {
    auto bad = parse_run_config(with("activations", value), "c.json");
    ASSERT_FALSE(bad) << value;
    const std::string message = bad.error().describe();
    EXPECT_NE(message.find("c.json"), std::string::npos) << message;
    EXPECT_NE(message.find("activations"), std::string::npos) << message;
    EXPECT_NE(message.find("q16"), std::string::npos) << message;  // says what to give instead
  }
  EXPECT_TRUE(activations_known("q8"));
  EXPECT_FALSE(activations_known("int8"));
}

TEST(RunConfig, PrefixReuseDeviceDefaultsOnAndParses) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_TRUE(defaults->prefix_reuse_device) << "retained device pages are on by default";
  auto off = parse_run_config(with("prefix_reuse_device", "false"), "c.json");
  ASSERT_TRUE(off) << off.error().describe();
  EXPECT_FALSE(off->prefix_reuse_device);
}

TEST(RunConfig, SparseScoreAndLayerBudgetsParseAndRefuseNamingTheKey) {
  auto set = parse_run_config(
      with("sparse", R"({"mode": "fraction", "fraction": 0.125, "score": "mixed", "layer_budget": true, "layer_signal": "moments"})"),
      "c.json");
  ASSERT_TRUE(set) << set.error().describe();
  EXPECT_EQ(set->sparse.score, SparseScore::mixed);
  EXPECT_TRUE(set->sparse.layer_budget);
  EXPECT_EQ(set->sparse.layer_signal, LayerSignal::moments);
  auto plain = parse_run_config(with("sparse", R"({"mode": "pages", "pages": 8})"), "c.json");
  ASSERT_TRUE(plain) << plain.error().describe();
  EXPECT_EQ(plain->sparse.score, SparseScore::bound);
  EXPECT_FALSE(plain->sparse.layer_budget);
  EXPECT_EQ(plain->sparse.layer_signal, LayerSignal::captured);
  struct Bad {
    const char* sparse;
    const char* key;
  };
  for (const Bad& b : {Bad{R"({"mode": "pages", "pages": 8, "score": "oracle"})", "sparse.score"},
                       Bad{R"({"mode": "pages", "pages": 8, "score": "best"})", "sparse.score"},
                       Bad{R"({"mode": "pages", "pages": 8, "score": 1})", "sparse.score"},
                       Bad{R"({"mode": "pages", "pages": 8, "layer_budget": "yes"})", "sparse.layer_budget"},
                       Bad{R"({"mode": "adaptive", "layer_budget": true})", "sparse.layer_budget"},
                       Bad{R"({"mode": "pages", "pages": 8, "layer_signal": "moments"})", "sparse.layer_signal"},
                       Bad{R"({"mode": "exact", "score": "mixed"})", "sparse.score"},
                       Bad{R"({"mode": "pages", "pages": 8, "layer_budget": true, "layer_signal": "x"})", "sparse.layer_signal"}}) {
    auto refused = parse_run_config(with("sparse", b.sparse), "c.json");
    ASSERT_FALSE(refused) << b.sparse;
    EXPECT_NE(refused.error().describe().find(b.key), std::string::npos) << refused.error().describe();
  }
}

TEST(RunConfig, RetainedHistoriesDefaultToNoneParseAndRefuseOutOfRange) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_EQ(defaults->retained_histories, 0u);
  auto two = parse_run_config(with("retained_histories", "2"), "c.json");
  ASSERT_TRUE(two) << two.error().describe();
  EXPECT_EQ(two->retained_histories, 2u);
  for (const char* bad : {"-1", "\"two\"", "1.5", "true"}) {
    auto r = parse_run_config(with("retained_histories", bad), "c.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().describe().find("retained_histories"), std::string::npos) << r.error().describe();
  }
  auto huge = parse_run_config(with("retained_histories", "5000"), "c.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().describe().find("retained_histories"), std::string::npos) << huge.error().describe();
  auto most = parse_run_config(with("retained_histories", "1024"), "c.json");
  ASSERT_TRUE(most) << most.error().describe();
  EXPECT_EQ(most->retained_histories, 1024u);
}

TEST(RunConfig, StateCheckpointPagesDefaultsToZeroParsesAndRefusesNamingTheKey) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_EQ(defaults->state_checkpoint_pages, 0u) << "newest and prompt checkpoints only unless stated";
  auto four = parse_run_config(with("state_checkpoint_pages", "4"), "c.json");
  ASSERT_TRUE(four) << four.error().describe();
  EXPECT_EQ(four->state_checkpoint_pages, 4u);
  for (const char* bad : {"-1", "\"4\"", "1.5"}) {
    auto r = parse_run_config(with("state_checkpoint_pages", bad), "c.json");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().describe().find("state_checkpoint_pages"), std::string::npos) << r.error().describe();
  }
}

TEST(RunConfig, PrefixCacheIsOptionalParsesSizesOrZeroAndRefusesOtherValuesNamingIt) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  EXPECT_EQ(defaults->prefix_cache_bytes, 0u) << "no cache unless stated";
  auto gib = parse_run_config(with("prefix_cache", "\"1GiB\""), "c.json");
  ASSERT_TRUE(gib) << gib.error().describe();
  EXPECT_EQ(gib->prefix_cache_bytes, 1024ull * 1024 * 1024);
  for (const char* none : {"0", "\"0\""}) {
    auto r = parse_run_config(with("prefix_cache", none), "c.json");
    ASSERT_TRUE(r) << none << ": " << r.error().describe();
    EXPECT_EQ(r->prefix_cache_bytes, 0u);
  }
  for (const char* bad : {"-1", "\"lots\"", "1.5", "true", "\"auto\""}) {
    auto r = parse_run_config(with("prefix_cache", bad), "c.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().describe().find("prefix_cache"), std::string::npos) << r.error().describe();
  }
  // configs/default.json states one, and its host pool holds it beside the six histories.
  auto shipped = parse_run_config(default_config_text(), "configs/default.json");
  ASSERT_TRUE(shipped) << shipped.error().describe();
  EXPECT_EQ(shipped->prefix_cache_bytes, 512ull * 1024 * 1024);
  EXPECT_EQ(shipped->host_pool_bytes, (512ull + 6 * 180) * 1024 * 1024);
}

// The refusal names the bound it applies: 1,024 (retained_histories_max), for a value just past it and
// for one past the generic count bound alike; never the generic bound it does not apply.
TEST(RunConfig, RetainedHistoriesRefusalNamesTheBoundItApplies) {
  for (const char* bad : {"1025", "5000", "20000000"}) {
    auto r = parse_run_config(with("retained_histories", bad), "c.json");
    ASSERT_FALSE(r.ok()) << bad;
    const std::string text = r.error().describe();
    EXPECT_NE(text.find("retained_histories"), std::string::npos) << text;
    EXPECT_NE(text.find(fmt::format("from 0 to {}, got {}", retained_histories_max, bad)), std::string::npos) << text;
    EXPECT_EQ(text.find("16777216"), std::string::npos) << text;
  }
  RunConfig built = *parse_run_config(valid, "c.json");
  built.retained_histories = retained_histories_max + 1;
  Status s = built.validate("c.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().describe().find(fmt::format("from 0 to {}, got {}", retained_histories_max, retained_histories_max + 1)),
            std::string::npos)
      << s.error().describe();
}

TEST(RunConfig, DeepNestingAndFilesThatAreNoFilesAreRefused) {
  auto deep = parse_run_config("{\"comment\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "c.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().setting, "c.json");
  EXPECT_LT(deep.error().describe().size(), 300u);
  for (const char* path : {"/dev/zero", "/tmp"}) {
    auto config = load_run_config(path);
    ASSERT_FALSE(config.ok()) << path;
    EXPECT_EQ(config.error().setting, "--config") << config.error().describe();
  }
}

TEST(RunConfig, ServeKeysParseAndRefuseOutOfRange) {
  auto defaults = parse_run_config(valid, "c.json");
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->max_queue, 16u);
  EXPECT_DOUBLE_EQ(defaults->shutdown_grace_s, 10.0);
  const std::string base = valid.substr(0, valid.size() - 1);
  auto set = parse_run_config(base + R"(, "max_queue": 40, "shutdown_grace_s": 2.5})", "c.json");
  ASSERT_TRUE(set) << set.error().describe();
  EXPECT_EQ(set->max_queue, 40u);
  EXPECT_DOUBLE_EQ(set->shutdown_grace_s, 2.5);
  for (const char* bad : {R"(, "max_queue": -1})", R"(, "max_queue": "many"})", R"(, "shutdown_grace_s": -1})",
                          R"(, "shutdown_grace_s": 1e9})", R"(, "shutdown_grace_s": "soon"})"}) {
    auto refused = parse_run_config(base + bad, "c.json");
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().setting.find(std::string(bad).find("max_queue") != std::string::npos ? "max_queue"
                                                                                                  : "shutdown_grace_s"),
              std::string::npos)
        << refused.error().describe();
  }
}

TEST(RunConfig, KvTierParsesAsAUrlOrAnObjectAndRefusesOthers) {
  const std::string base = valid.substr(0, valid.size() - 1);
  auto none = parse_run_config(valid, "c.json");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->kv_tier.empty());
  auto url = parse_run_config(base + R"(, "kv_tier": "redis://127.0.0.1:7000"})", "c.json");
  ASSERT_TRUE(url) << url.error().describe();
  EXPECT_EQ(url->kv_tier, "redis://127.0.0.1:7000");
  EXPECT_EQ(url->kv_tier_block_tokens, 256u);
  auto object = parse_run_config(
      base + R"(, "kv_tier": {"url": "redis://cache:6379", "block_tokens": 512, "timeout_ms": 50, "write_queue": 3,
                      "lookups": 4}})",
      "c.json");
  ASSERT_TRUE(object) << object.error().describe();
  EXPECT_EQ(object->kv_tier, "redis://cache:6379");
  EXPECT_EQ(object->kv_tier_block_tokens, 512u);
  EXPECT_EQ(object->kv_tier_timeout_ms, 50u);
  EXPECT_EQ(object->kv_tier_write_queue, 3u);
  EXPECT_EQ(object->kv_tier_lookups, 4u);
  EXPECT_EQ(url->kv_tier_lookups, 2u);
  for (const char* bad : {R"(, "kv_tier": "http://x:1"})", R"(, "kv_tier": 5})", R"(, "kv_tier": {"block_tokens": 256}})",
                          R"(, "kv_tier": {"url": "redis://h:1", "colour": 1}})",
                          R"(, "kv_tier": {"url": "redis://h:1", "write_queue": 0}})",
                          R"(, "kv_tier": {"url": "redis://h:1", "lookups": 0}})",
                          R"(, "kv_tier": {"url": "redis://h:1", "lookups": 1000000}})",
                          R"(, "kv_tier": {"url": "redis://h:1", "write_queue": 16777216}})"}) {
    auto refused = parse_run_config(base + bad, "c.json");
    ASSERT_FALSE(refused) << bad;
    EXPECT_FALSE(refused.error().describe().empty());
  }
}

}  // namespace
}  // namespace activekv::serve
