// run_report_test.cpp — the figures and files of a run, from a fake-engine job.
#include "serve/run_report.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "serve/fake_engine.hpp"
#include "serve/run_job.hpp"

namespace activekv::serve {
namespace {

TEST(Percentile, NearestRank) {
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 0.5), 2.0);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 0.50), 50.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 99.0);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 100.0);
}

RunConfig small_config() {
  auto config = parse_run_config(
      R"({"host_pool": "1MiB", "device_pool": "64KiB", "page_tokens": 8, "tile_tokens": 64, "tiles": 2, "max_seqs": 4,
          "step_tokens": 48, "prefill_chunk_tokens": 16, "threads": 1, "stop_at_eos": false})",
      "test");
  EXPECT_TRUE(config) << config.error().describe();
  return *config;
}

std::vector<TraceRequest> small_trace() {
  std::istringstream in(
      "{\"id\": \"a\", \"arrival_s\": 0, \"prompt\": \"The quick brown fox jumps over the lazy dog.\", \"max_tokens\": 20}\n"
      "{\"id\": \"b\", \"arrival_s\": 0.01, \"prompt\": \"Pack my box with five dozen liquor jugs, said the sphinx of black quartz.\", \"max_tokens\": 12, \"session\": \"s\"}\n"
      "{\"id\": \"c\", \"arrival_s\": 0.02, \"prompt\": \"How vexingly quick daft zebras jump!\", \"max_tokens\": 30}\n"
      "{\"id\": \"b2\", \"arrival_s\": 0.03, \"prompt\": \" And then?\", \"max_tokens\": 8, \"session\": \"s\"}\n"
      "{\"id\": \"too-long\", \"arrival_s\": 0.04, \"prompt_tokens\": [1, 2, 3], \"max_tokens\": 500}\n"
      "{\"id\": \"d\", \"arrival_s\": 0.05, \"prompt\": \"Sphinx of black quartz, judge my vow.\", \"max_tokens\": 16}\n");
  auto trace = read_trace(in, "small");
  EXPECT_TRUE(trace) << trace.error().describe();
  return *trace;
}

// A whole job on the fake engine: the plan and the lowered concurrency are
// printed, the figures hold every key the issue lists, and the files are written.
TEST(RunReport, JobFiguresAndFiles) {
  ManualClock clock;
  FakeEngineConfig fc;
  fc.histories = 2;
  fc.max_seqs = 4;
  fc.max_context_tokens = 256;
  fc.clock = &clock;
  FakeEngine engine(fc);
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  RunJobOptions options;
  options.out = out;
  ReportInputs inputs;
  inputs.model = "fake";
  inputs.trace = "small";
  inputs.config_source = "test";
  auto result = run_job(engine, clock, small_trace(), small_config(), inputs, options);
  std::fclose(out);
  const std::string printed(text, size);
  std::free(text);
  ASSERT_TRUE(result) << result.error().describe();
  EXPECT_NE(printed.find("fake engine: 2 histories"), std::string::npos) << printed;
  EXPECT_NE(printed.find("concurrency 2: the host pool holds 2 histories, below max_seqs 4"), std::string::npos) << printed;
  EXPECT_NE(printed.find("requests 6/6 done"), std::string::npos) << printed;
  EXPECT_NE(printed.find("allocations after warm-up: device 0, heap 0"), std::string::npos) << printed;

  const nlohmann::json& f = result->figures;
  EXPECT_EQ(f["requests"]["total"], 6);
  EXPECT_EQ(f["requests"]["finished"], 5);
  EXPECT_EQ(f["requests"]["rejected"], 1);
  EXPECT_EQ(f["requests"]["running_max"], 2);
  EXPECT_EQ(f["tokens"]["out"], 20 + 12 + 30 + 8 + 16);
  EXPECT_GT(f["throughput"]["output_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(f["latency"]["ttft_s"]["p50"].get<double>(), 0.0);
  EXPECT_GE(f["latency"]["ttft_s"]["p99"].get<double>(), f["latency"]["ttft_s"]["p50"].get<double>());
  EXPECT_GT(f["latency"]["inter_token_s"]["p99"].get<double>(), 0.0);
  for (const char* dir : {"h2d", "d2h", "d2d"}) {
    EXPECT_TRUE(f["copies"][dir].contains("bytes")) << dir;
    EXPECT_TRUE(f["copies"][dir].contains("count")) << dir;
  }
  EXPECT_GT(f["copies"]["d2h"]["bytes"].get<std::uint64_t>(), 0u);
  EXPECT_NEAR(f["residency"]["resident_share"].get<double>() + f["residency"]["staged_share"].get<double>(), 1.0, 1e-9);
  for (const char* key : {"promotions", "reclaimed", "quarantines", "peak", "time"}) EXPECT_TRUE(f.contains(key)) << key;
  EXPECT_EQ(f["allocations_after_warmup"]["device"], 0);
  EXPECT_EQ(f["allocations_after_warmup"]["heap"], 0);
  EXPECT_LE(f["peak"]["host_bytes"].get<std::uint64_t>(), f["peak"]["host_bytes_plan"].get<std::uint64_t>());
  EXPECT_GT(f["peak"]["host_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_LE(f["peak"]["device_bytes"].get<std::uint64_t>(), f["peak"]["device_bytes_plan"].get<std::uint64_t>());
  EXPECT_TRUE(f["all_returned"].get<bool>());
  const auto& list = f["request_list"];
  ASSERT_EQ(list.size(), 6u);
  EXPECT_EQ(list[4]["id"], "too-long");
  EXPECT_EQ(list[4]["reject_reason"], "longer_than_max_context");
  EXPECT_EQ(list[3]["previous_turn"], 1);
  EXPECT_FALSE(list[0]["output_text"].get<std::string>().empty());
  // Prefix reuse's figures (docs/PREFIX.md): the device pages promoted on a d2d copy, the follow-ups'
  // first steps and the decode tokens they held (per request and in total, which must agree), TPOT.
  const auto& reuse = f["prefix_reuse"];
  for (const char* key : {"device_pages_promoted_d2d", "follow_up_first_steps", "held_decode_tokens", "held_decode_steps"}) {
    EXPECT_TRUE(reuse.contains(key)) << key;
  }
  std::uint64_t held = 0;
  for (const auto& r : list) {
    held += r.value("decode_steps_held", 0u);
    if (r["output_tokens"].get<std::uint32_t>() > 1) {
      EXPECT_GT(r["tpot_s"].get<double>(), 0.0) << r["id"];
    }
  }
  EXPECT_EQ(reuse["held_decode_tokens"].get<std::uint64_t>(), held);
  EXPECT_LE(reuse["held_decode_steps"].get<std::uint64_t>(), reuse["follow_up_first_steps"].get<std::uint64_t>());

  const auto dir = std::filesystem::temp_directory_path() / "activekv_run_report_test";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_report(dir.string(), result->inputs, f));
  std::ifstream json_in(dir / "report.json");
  const nlohmann::json reread = nlohmann::json::parse(json_in);
  EXPECT_EQ(reread["tokens"], f["tokens"]);
  std::ifstream html_in(dir / "report.html");
  std::stringstream html;
  html << html_in.rdbuf();
  for (const char* id : {"chart-pages", "chart-latency", "chart-bytes", "chart-queue"}) {
    EXPECT_NE(html.str().find(id), std::string::npos) << id;
  }
  EXPECT_EQ(html.str().find("<script"), std::string::npos);  // self-contained, no script
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace activekv::serve
