// model_run_test.cpp — a short trace end to end on the real model (SmolLM2-135M).
//
// Four requests (one a session follow-up) run with continuous batching over the
// KV runtime, with a host pool that holds only 2 histories while 3 sequences
// are asked for, and a device pool far below the contexts' KV so history is
// staged. Checks: every request completes; each output equals the same request
// run alone (greedy); the concurrency is lowered as printed and the rest queue
// and complete; zero heap and device allocations after warm-up; every page and
// history is returned at the end.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "engine/model_path.hpp"
#include "serve/engine_step_engine.hpp"
#include "serve/run_job.hpp"

namespace activekv::serve {
namespace {

RunConfig config() {
  auto c = parse_run_config(
      R"({"host_pool": "24MiB", "device_pool": "4MiB", "page_tokens": 16, "tile_tokens": 64, "tiles": 2,
          "max_context": 512, "max_seqs": 3, "step_tokens": 64, "prefill_chunk_tokens": 32, "threads": 2,
          "stop_at_eos": false, "arrival_scale": 0})",
      "model_run_test");
  EXPECT_TRUE(c) << c.error().describe();
  return *c;
}

const char* const trace_text =
    "{\"id\": \"capital\", \"arrival_s\": 0, \"prompt\": \"The capital of France is\", \"max_tokens\": 12, \"session\": \"s\"}\n"
    "{\"id\": \"devil\", \"arrival_s\": 0, \"prompt\": \"ABSURDITY, n. A statement or belief manifestly inconsistent with "
    "one's own opinion.\\n\\nACADEME, n. An ancient school where morality and philosophy were taught.\\n\\nACCIDENT, n.\", "
    "\"max_tokens\": 16}\n"
    "{\"id\": \"count\", \"arrival_s\": 0, \"prompt\": \"One, two, three, four, five, six,\", \"max_tokens\": 10}\n"
    "{\"id\": \"follow-up\", \"arrival_s\": 0, \"prompt\": \" Its population is\", \"max_tokens\": 8, \"session\": \"s\"}\n"
    "{\"id\": \"too-long\", \"arrival_s\": 0, \"prompt\": \"Far too long.\", \"max_tokens\": 600}\n";

std::vector<TraceRequest> trace() {
  std::istringstream in(trace_text);
  auto t = read_trace(in, "model_run_test");
  EXPECT_TRUE(t) << t.error().describe();
  return *t;
}

struct Outcome {
  std::unique_ptr<EngineStepEngine> engine;
  RunJobResult result;
  std::string printed;
};

Outcome run(const std::vector<TraceRequest>& requests, const std::string& model) {
  Outcome o;
  auto engine = EngineStepEngine::create(EngineStepEngineSettings{config(), model, "host"});
  EXPECT_TRUE(engine) << engine.error().describe();
  if (!engine) return o;
  o.engine = std::move(engine).value();
  WallClock clock;
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  RunJobOptions options;
  options.out = out;
  auto result = run_job(*o.engine, clock, requests, config(), ReportInputs{}, options);
  std::fclose(out);
  o.printed.assign(text, size);
  std::free(text);
  EXPECT_TRUE(result) << result.error().describe();
  if (result) o.result = std::move(result).value();
  return o;
}

TEST(ModelRun, ShortTraceEndToEnd) {
  auto model = engine::find_default_model();
  ASSERT_TRUE(model) << model.error().describe();
  const std::vector<TraceRequest> requests = trace();
  Outcome batched = run(requests, *model);
  ASSERT_NE(batched.result.scheduler, nullptr);
  const Scheduler& s = *batched.result.scheduler;
  const nlohmann::json& f = batched.result.figures;

  // Host pool: 24 MiB holds 2 histories of 11.25 MiB (512 tokens x 30 layers x 768 B); max_seqs 3 is lowered.
  EXPECT_EQ(batched.engine->plan().histories, 2u);
  EXPECT_NE(batched.printed.find("concurrency 2: the host pool holds 2 histories, below max_seqs 3"), std::string::npos)
      << batched.printed;
  EXPECT_EQ(s.running_max(), 2u);
  std::uint32_t waited = 0;
  for (const RequestRecord& r : s.requests()) waited += r.waited;
  EXPECT_GE(waited, 1u);

  EXPECT_EQ(f["requests"]["finished"], 4);
  EXPECT_EQ(f["requests"]["rejected"], 1);
  EXPECT_EQ(s.requests()[4].reject_reason, RejectReason::longer_than_max_context);
  EXPECT_EQ(f["allocations_after_warmup"]["heap"], 0) << batched.printed;
  EXPECT_EQ(f["allocations_after_warmup"]["device"], 0);
  EXPECT_TRUE(f["all_returned"].get<bool>());
  EXPECT_GT(f["copies"]["h2d"]["bytes"].get<std::uint64_t>(), 0u);
  EXPECT_GT(f["copies"]["d2h"]["bytes"].get<std::uint64_t>(), 0u);

  // Greedy answers make sense (the model is real) ...
  const std::string capital = f["request_list"][0]["output_text"].get<std::string>();
  EXPECT_NE(capital.find("Paris"), std::string::npos) << capital;
  // ... and each equals the same request run alone (with its session's earlier turn).
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(requests[i].id);
    std::vector<TraceRequest> alone;
    if (i == 3) alone.push_back(requests[0]);
    alone.push_back(requests[i]);
    Outcome single = run(alone, *model);
    ASSERT_NE(single.result.scheduler, nullptr);
    const RequestRecord& a = single.result.scheduler->requests().back();
    const RequestRecord& b = s.requests()[i];
    ASSERT_EQ(a.state, RequestState::finished);
    ASSERT_EQ(b.state, RequestState::finished);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_TRUE(single.result.figures["all_returned"].get<bool>());
  }
}

}  // namespace
}  // namespace activekv::serve
