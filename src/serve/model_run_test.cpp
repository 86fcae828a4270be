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

#include "activekv/size.hpp"
#include "engine/model_path.hpp"
#include "serve/engine_step_engine.hpp"
#include "serve/run_job.hpp"

namespace activekv::serve {
namespace {

RunConfig config(const char* host_pool = "24MiB", bool reuse = true) {
  auto c = parse_run_config(
      R"({"host_pool": "24MiB", "device_pool": "4MiB", "page_tokens": 16, "tile_tokens": 64, "tiles": 2,
          "max_context": 512, "max_seqs": 3, "step_tokens": 64, "prefill_chunk_tokens": 32, "threads": 2,
          "stop_at_eos": false, "arrival_scale": 0})",
      "model_run_test");
  EXPECT_TRUE(c) << c.error().describe();
  auto bytes = parse_size(host_pool, "host_pool");
  EXPECT_TRUE(bytes);
  c->host_pool_bytes = *bytes;
  c->prefix_reuse = reuse;
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

Outcome run(const std::vector<TraceRequest>& requests, const std::string& model, const RunConfig& cfg = config()) {
  Outcome o;
  auto engine = EngineStepEngine::create(EngineStepEngineSettings{cfg, model, "host"});
  EXPECT_TRUE(engine) << engine.error().describe();
  if (!engine) return o;
  o.engine = std::move(engine).value();
  WallClock clock;
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  RunJobOptions options;
  options.out = out;
  auto result = run_job(*o.engine, clock, requests, cfg, ReportInputs{}, options);
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

// Two conversations of three turns each, run with prefix reuse and without: every token equal,
// every follow-up adopts its predecessor's history, and the prompt tokens fed drop by exactly the
// tokens reused. 3 histories for 2 conversations: no pressure, so no follow-up loses its history.
TEST(ModelRun, ConversationsWithReuseMatchWithout) {
  auto model = engine::find_default_model();
  ASSERT_TRUE(model) << model.error().describe();
  std::istringstream in(
      "{\"id\": \"a1\", \"arrival_s\": 0, \"prompt\": \"The capital of France is Paris. The capital of Italy is\", "
      "\"max_tokens\": 6, \"session\": \"a\"}\n"
      "{\"id\": \"b1\", \"arrival_s\": 0, \"prompt\": \"ABSURDITY, n. A statement or belief manifestly inconsistent "
      "with one's own opinion.\\n\\nACCIDENT, n.\", \"max_tokens\": 8, \"session\": \"b\"}\n"
      "{\"id\": \"a2\", \"arrival_s\": 0, \"prompt\": \" The capital of Spain is\", \"max_tokens\": 5, \"session\": \"a\"}\n"
      "{\"id\": \"b2\", \"arrival_s\": 0, \"prompt\": \"\\n\\nACADEME, n.\", \"max_tokens\": 8, \"session\": \"b\"}\n"
      "{\"id\": \"a3\", \"arrival_s\": 0, \"prompt\": \" And of Germany,\", \"max_tokens\": 5, \"session\": \"a\"}\n"
      "{\"id\": \"b3\", \"arrival_s\": 0, \"prompt\": \"\\n\\nADAGE, n.\", \"max_tokens\": 6, \"session\": \"b\"}\n");
  auto requests = read_trace(in, "conversations");
  ASSERT_TRUE(requests) << requests.error().describe();
  Outcome on = run(*requests, *model, config("36MiB", true));
  Outcome off = run(*requests, *model, config("36MiB", false));
  ASSERT_NE(on.result.scheduler, nullptr);
  ASSERT_NE(off.result.scheduler, nullptr);
  const Scheduler& a = *on.result.scheduler;
  const Scheduler& b = *off.result.scheduler;
  std::uint64_t reused = 0;
  for (std::size_t i = 0; i < requests->size(); ++i) {
    const RequestRecord& x = a.requests()[i];
    const RequestRecord& y = b.requests()[i];
    SCOPED_TRACE(x.id);
    ASSERT_EQ(x.state, RequestState::finished);
    EXPECT_EQ(x.tokens, y.tokens) << "the output with reuse differs from the output without";
    EXPECT_EQ(y.reused_tokens, 0u);
    if (x.previous_turn >= 0) {
      const RequestRecord& prev = a.requests()[static_cast<std::size_t>(x.previous_turn)];
      const std::uint32_t own = x.prompt_tokens - (prev.prompt_tokens + prev.output_tokens);
      EXPECT_GT(x.reused_tokens, 0u);
      EXPECT_LE(x.prompt_tokens - x.reused_tokens, own + 1 + 16) << "only the new tokens plus at most one page";
    }
    reused += x.reused_tokens;
  }
  EXPECT_EQ(a.tokens_in() + reused, b.tokens_in());
  EXPECT_EQ(on.result.figures["prefix_reuse"]["reused_tokens"].get<std::uint64_t>(), reused);
  EXPECT_GT(on.result.figures["prefix_reuse"]["retained_kept"].get<std::uint64_t>(), 0u);
  EXPECT_TRUE(on.result.figures["all_returned"].get<bool>());
  EXPECT_EQ(on.result.figures["allocations_after_warmup"]["heap"], 0) << on.printed;
  std::printf("conversations: %llu prompt tokens fed with reuse, %llu without (%llu reused)\n",
              static_cast<unsigned long long>(a.tokens_in()), static_cast<unsigned long long>(b.tokens_in()),
              static_cast<unsigned long long>(reused));
}

// A follow-up that waits for admission must still adopt its history: the engine offers a request
// to the runtime only when the runtime would admit it now (KvRuntime::may_admit_now), so it is
// admitted through the path that adopts, never later from the runtime's own queue (which adopts
// nothing). The trace: a1 runs while x1 and a2 (a1's follow-up) wait, FIFO; a1 finishes and is
// retained; x1 takes the empty history; a2 is admitted when x1 ends and adopts every full page a1
// held. Every output equals reuse off byte for byte. Returns the run with reuse.
Outcome expect_a_waiting_follow_up_adopts(const RunConfig& cfg_on) {
  auto model = engine::find_default_model();
  EXPECT_TRUE(model) << model.error().describe();
  std::istringstream in(
      "{\"id\": \"a1\", \"arrival_s\": 0, \"prompt\": \"The capital of France is Paris. The capital of Germany is "
      "Berlin. The capital of Italy is\", \"max_tokens\": 4, \"session\": \"a\"}\n"
      "{\"id\": \"x1\", \"arrival_s\": 0, \"prompt\": \"One, two, three, four,\", \"max_tokens\": 4}\n"
      "{\"id\": \"a2\", \"arrival_s\": 0, \"prompt\": \" The capital of Spain is\", \"max_tokens\": 4, \"session\": \"a\"}\n");
  auto requests = read_trace(in, "admission");
  EXPECT_TRUE(requests) << requests.error().describe();
  if (!model || !requests) return {};
  RunConfig cfg_off = cfg_on;
  cfg_off.prefix_reuse = false;
  Outcome on = run(*requests, *model, cfg_on);
  Outcome off = run(*requests, *model, cfg_off);
  EXPECT_NE(on.result.scheduler, nullptr);
  EXPECT_NE(off.result.scheduler, nullptr);
  if (on.result.scheduler == nullptr || off.result.scheduler == nullptr) return on;
  const Scheduler& a = *on.result.scheduler;
  const Scheduler& b = *off.result.scheduler;
  for (std::size_t i = 0; i < requests->size(); ++i) {
    const RequestRecord& x = a.requests()[i];
    const RequestRecord& y = b.requests()[i];
    SCOPED_TRACE(x.id);
    EXPECT_EQ(x.state, RequestState::finished);
    EXPECT_EQ(y.state, RequestState::finished);
    EXPECT_EQ(x.tokens, y.tokens) << "the output with reuse differs from the output without";
  }
  const RequestRecord& a1 = a.requests()[0];
  const RequestRecord& x1 = a.requests()[1];
  const RequestRecord& a2 = a.requests()[2];
  EXPECT_TRUE(x1.waited && a2.waited) << "both wait: one context runs at a time";
  EXPECT_GE(a2.admitted_s, x1.ended_s) << "a2 is admitted after x1 (FIFO, one runs at a time)";
  const std::uint32_t held = a1.prompt_tokens + a1.output_tokens - 1;  // rows a1 holds (its last token never fed)
  EXPECT_EQ(a2.reused_tokens, held / 16 * 16) << "a2 adopts every full page of a1's history";
  EXPECT_GT(a2.reused_tokens, 0u);
  EXPECT_EQ(on.result.figures["prefix_reuse"]["reused_tokens"].get<std::uint64_t>(), a2.reused_tokens);
  EXPECT_TRUE(on.result.figures["all_returned"].get<bool>());
  std::printf("admission: a2 reused %u of %u prompt tokens after waiting behind x1\n", a2.reused_tokens,
              a2.prompt_tokens);
  return on;
}

// Waiting for the concurrency: the host pool holds 2 histories, one kept only for retained
// prefixes (retained_histories 1), so one context runs while max_seqs 3 lets the scheduler ask for
// more.
TEST(ModelRun, AFollowUpQueuedBeyondTheConcurrencyStillAdoptsItsHistory) {
  RunConfig cfg = config("24MiB", true);
  cfg.retained_histories = 1;
  const Outcome on = expect_a_waiting_follow_up_adopts(cfg);
  ASSERT_NE(on.engine, nullptr);
  EXPECT_EQ(on.engine->plan().concurrency, 1u) << on.printed;
  ASSERT_NE(on.result.scheduler, nullptr);
  EXPECT_EQ(on.result.scheduler->running_max(), 1u);
}

// Waiting for the device arena: 2 host histories (so a host concurrency of 2), but a 2.5 MiB device
// pool holds one context's floor (120 pages of 12 KiB for a 32-token chunk), so while a context runs
// the next waits on floor_does_not_fit with a history free. Offered to the runtime then (the
// scheduler asks up to max_seqs), a2 was queued there and later admitted adopting nothing.
TEST(ModelRun, AFollowUpWaitingForRoomForItsFloorStillAdoptsItsHistory) {
  RunConfig cfg = config("24MiB", true);
  cfg.retained_histories = 0;
  cfg.device_pool_bytes = 2560 * 1024;
  const Outcome on = expect_a_waiting_follow_up_adopts(cfg);
  ASSERT_NE(on.engine, nullptr);
  EXPECT_EQ(on.engine->plan().histories, 2u) << on.printed;
  EXPECT_EQ(on.engine->plan().concurrency, 1u) << "the floors that fit lower it: " << on.printed;
  ASSERT_NE(on.result.scheduler, nullptr);
  const RequestRecord& a2 = on.result.scheduler->requests()[2];
  EXPECT_GT(a2.wait_steps[static_cast<std::size_t>(WaitReason::floor_does_not_fit)], 0u)
      << "a2 waits for room for its floor, with a history free";
}

}  // namespace
}  // namespace activekv::serve
