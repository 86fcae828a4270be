// serve_core_test.cpp — live submission over the fake engine: outputs, back-pressure, cancellation, no allocation.
#include "server/serve_core.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "serve/fake_engine.hpp"
#include "serve/scheduler.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::server {
namespace {

using namespace std::chrono_literals;

serve::RunConfig config() {
  serve::RunConfig c;
  c.max_seqs = 2;
  c.step_tokens = 64;
  c.prefill_chunk_tokens = 16;
  c.stop_at_eos = false;
  return c;
}

serve::FakeEngineConfig fake() {
  serve::FakeEngineConfig f;
  f.histories = 2;
  f.max_seqs = 2;
  f.max_context_tokens = 256;
  return f;
}

// The test's thread plays the HTTP threads' part (it allocates while the engine thread
// steps), so it is marked like them and left out of the step path's count.
class ServeCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { activekv::testing::mark_io_thread(); }
};

std::vector<std::int32_t> run_to_end(ServeCore& core, const Ticket& t, Progress* p) {
  std::vector<std::int32_t> out;
  do {
    *p = core.wait(t, &out, 1000ms);
  } while (!p->ended);
  core.release(t);
  return out;
}

TEST_F(ServeCoreTest, LiveOutputsEqualTheSameRequestsReplayedFromATrace) {
  // The reference: the trace path over the same fake engine.
  serve::FakeEngine ref_engine(fake());
  serve::ManualClock ref_clock;
  std::vector<serve::TraceRequest> trace(3);
  std::vector<std::vector<std::int32_t>> prompts = {{1, 2, 3}, std::vector<std::int32_t>(40, 7), {9}};
  for (std::size_t i = 0; i < trace.size(); ++i) {
    trace[i].id = std::to_string(i);
    trace[i].prompt_tokens = prompts[i];
    trace[i].max_tokens = 10 + static_cast<std::uint32_t>(i);
  }
  serve::SchedulerConfig sc;
  sc.max_seqs = 2;
  sc.step_tokens = 64;
  sc.prefill_chunk_tokens = 16;
  sc.stop_at_eos = false;
  auto ref = serve::Scheduler::create(trace, ref_engine, ref_clock, sc);
  ASSERT_TRUE(ref.ok());
  while (!(*ref)->done()) ASSERT_TRUE((*ref)->advance().ok());

  serve::FakeEngine engine(fake());
  serve::WallClock clock;
  auto core = ServeCore::create(engine, clock, ServeCoreSettings{config(), 4});
  ASSERT_TRUE(core.ok());
  (*core)->start();
  std::vector<Ticket> tickets;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto t = (*core)->submit(SubmitSpec{prompts[i], 10 + static_cast<std::uint32_t>(i), {}, serve::no_stop_tokens});
    ASSERT_TRUE(t.ok()) << t.error().describe();
    tickets.push_back(*t);
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Progress p;
    const auto out = run_to_end(**core, tickets[i], &p);
    EXPECT_EQ(p.state, serve::RequestState::finished);
    EXPECT_EQ(p.prompt_tokens, prompts[i].size());
    EXPECT_EQ(p.cached_tokens, 0u);
    const auto expected = (*ref)->requests()[i].output();
    EXPECT_EQ(out, std::vector<std::int32_t>(expected.begin(), expected.end())) << "request " << i;
  }
  (*core)->drain(1.0);
  EXPECT_TRUE(engine.all_returned());
  const MetricsSnapshot m = (*core)->metrics();
  EXPECT_EQ(m.finished, 3u);
  EXPECT_EQ(m.heap_allocations_after_warmup, 0u);
  EXPECT_EQ(m.generation_tokens, 10u + 11u + 12u);
}

TEST_F(ServeCoreTest, AFullQueueIsRefusedWithTheReasonAndTooLongAtOnce) {
  serve::FakeEngineConfig f = fake();
  f.wall_sleep_s = 0.002;
  serve::FakeEngine engine(f);
  serve::WallClock clock;
  auto core = ServeCore::create(engine, clock, ServeCoreSettings{config(), 1});
  ASSERT_TRUE(core.ok());
  EXPECT_EQ((*core)->slots(), 3u);  // 2 running + max_queue 1
  (*core)->start();
  const std::vector<std::int32_t> prompt(8, 3);
  std::vector<Ticket> held;
  for (int i = 0; i < 3; ++i) {
    auto t = (*core)->submit(SubmitSpec{prompt, 200, {}, serve::no_stop_tokens});
    ASSERT_TRUE(t.ok());
    held.push_back(*t);
  }
  auto refused = (*core)->submit(SubmitSpec{prompt, 10, {}, serve::no_stop_tokens});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::exhausted);
  EXPECT_NE(refused.error().message.find("host pool holds 2 histories"), std::string::npos) << refused.error().message;
  auto too_long = (*core)->submit(SubmitSpec{prompt, 250, {}, serve::no_stop_tokens});
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, ErrorCode::refused);
  EXPECT_NE(too_long.error().message.find("max context of 256"), std::string::npos);

  // Cancel all three mid-flight (two decoding, one queued): each ends cancelled and gives everything back.
  while ((*core)->metrics().running < 2 || (*core)->metrics().generation_tokens == 0) std::this_thread::sleep_for(1ms);
  for (const Ticket& t : held) (*core)->cancel(t);
  for (const Ticket& t : held) {
    Progress p;
    run_to_end(**core, t, &p);
    EXPECT_EQ(p.state, serve::RequestState::cancelled);
  }
  (*core)->drain(1.0);
  EXPECT_TRUE(engine.all_returned());
  EXPECT_EQ(engine.cancels(), 2u);  // the queued one never held a context
  const MetricsSnapshot m = (*core)->metrics();
  EXPECT_EQ(m.cancelled, 3u);
  EXPECT_EQ(m.refused_queue_full, 1u);
  EXPECT_EQ(m.heap_allocations_after_warmup, 0u);
}

TEST_F(ServeCoreTest, AStopStringEndsTheRequestAndCountsItAsFinished) {
  serve::FakeEngineConfig f = fake();
  f.wall_sleep_s = 0.002;
  serve::FakeEngine engine(f);
  serve::WallClock clock;
  auto core = ServeCore::create(engine, clock, ServeCoreSettings{config(), 1});
  ASSERT_TRUE(core.ok());
  (*core)->start();
  const std::vector<std::int32_t> prompt(8, 3);
  auto stopped = (*core)->submit(SubmitSpec{prompt, 200, {}, serve::no_stop_tokens});
  auto cancelled = (*core)->submit(SubmitSpec{prompt, 200, {}, serve::no_stop_tokens});
  ASSERT_TRUE(stopped.ok() && cancelled.ok());
  while ((*core)->metrics().generation_tokens < 4) std::this_thread::sleep_for(1ms);
  (*core)->stop_at_string(*stopped);  // what the HTTP adapter does when the text holds a stop string
  (*core)->cancel(*cancelled);        // a client that went away
  Progress p;
  run_to_end(**core, *stopped, &p);
  run_to_end(**core, *cancelled, &p);
  (*core)->drain(1.0);
  EXPECT_TRUE(engine.all_returned());  // both ended through the fenced cancel path
  const MetricsSnapshot m = (*core)->metrics();
  EXPECT_EQ(m.finished, 1u);
  EXPECT_EQ(m.cancelled, 1u);
}

TEST_F(ServeCoreTest, DrainCancelsWhatOutlivesTheGracePeriod) {
  serve::FakeEngineConfig f = fake();
  f.wall_sleep_s = 0.005;
  serve::FakeEngine engine(f);
  serve::WallClock clock;
  auto core = ServeCore::create(engine, clock, ServeCoreSettings{config(), 2});
  ASSERT_TRUE(core.ok());
  (*core)->start();
  const std::vector<std::int32_t> prompt(8, 3);
  auto t = (*core)->submit(SubmitSpec{prompt, 240, {}, serve::no_stop_tokens});  // ~1.2 s of steps
  ASSERT_TRUE(t.ok());
  std::thread drainer([&] { (*core)->drain(0.05); });
  Progress p;
  run_to_end(**core, *t, &p);
  drainer.join();
  EXPECT_EQ(p.state, serve::RequestState::cancelled);
  EXPECT_TRUE(engine.all_returned());
  auto late = (*core)->submit(SubmitSpec{prompt, 5, {}, serve::no_stop_tokens});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ErrorCode::unsupported);
}

}  // namespace
}  // namespace activekv::server
