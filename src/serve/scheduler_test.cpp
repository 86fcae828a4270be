// scheduler_test.cpp — continuous batching over the deterministic fake engine.
//
// The fake engine's output for a context is a function of every token fed to
// it, in order, so "equals the request run alone" catches any dropped,
// repeated or misrouted chunk. Property tests run many random traces and
// configurations (ACTIVEKV_SERVE_SEEDS raises the count).
#include "serve/scheduler.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "serve/fake_engine.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::serve {
namespace {

struct Run {
  ManualClock clock;
  std::unique_ptr<FakeEngine> engine;
  std::unique_ptr<Scheduler> scheduler;
  std::uint64_t heap_allocations_in_loop = 0;
};

std::unique_ptr<Run> start(const std::vector<TraceRequest>& trace, FakeEngineConfig engine_config,
                           const SchedulerConfig& config) {
  auto run = std::make_unique<Run>();
  engine_config.clock = &run->clock;
  run->engine = std::make_unique<FakeEngine>(engine_config);
  auto scheduler = Scheduler::create(trace, *run->engine, run->clock, config);
  EXPECT_TRUE(scheduler) << scheduler.error().describe();
  run->scheduler = std::move(scheduler).value();
  return run;
}

void finish(Run& run) {
  const std::uint64_t before = activekv::testing::heap_allocations();
  std::uint64_t iterations = 0;
  while (!run.scheduler->done()) {
    Status s = run.scheduler->advance();
    ASSERT_TRUE(s) << s.error().describe();
    ASSERT_LT(++iterations, 10'000'000u) << "the scheduler does not make progress";
  }
  run.heap_allocations_in_loop = activekv::testing::heap_allocations() - before;
}

std::unique_ptr<Run> run_all(const std::vector<TraceRequest>& trace, const FakeEngineConfig& engine_config,
                             const SchedulerConfig& config) {
  auto run = start(trace, engine_config, config);
  finish(*run);
  return run;
}

TraceRequest request(std::string id, double arrival_s, std::vector<std::int32_t> prompt, std::uint32_t max_tokens,
                     std::string session = "") {
  TraceRequest r;
  r.id = std::move(id);
  r.arrival_s = arrival_s;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.session = std::move(session);
  return r;
}

std::uint32_t r32(std::mt19937& rng) { return static_cast<std::uint32_t>(rng()); }

std::vector<std::int32_t> tokens(std::mt19937& rng, std::uint32_t n) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(r32(rng) % 256);
  return t;
}

// The request and its session's earlier turns, alone, all arriving at once.
std::vector<TraceRequest> chain_of(const std::vector<TraceRequest>& trace, std::size_t index) {
  std::vector<TraceRequest> chain;
  for (std::size_t i = 0; i <= index; ++i) {
    if (i == index || (!trace[index].session.empty() && trace[i].session == trace[index].session)) {
      chain.push_back(trace[i]);
      chain.back().arrival_s = 0;
      chain.back().cancel_after_tokens = -1;
    }
  }
  return chain;
}

struct Scenario {
  std::vector<TraceRequest> trace;
  FakeEngineConfig engine;
  SchedulerConfig config;
};

Scenario random_scenario(std::uint32_t seed) {
  std::mt19937 rng(seed);
  Scenario s;
  s.engine.histories = 1 + r32(rng) % 6;
  s.engine.max_seqs = 1 + r32(rng) % 8;
  s.engine.max_context_tokens = 512;
  s.engine.dense_layers = 1 + r32(rng) % 4;
  s.engine.page_tokens = 8;
  s.engine.pool_pages = s.engine.dense_layers * 2 * (1 + r32(rng) % 8) + r32(rng) % 64;
  s.engine.target_pages = s.engine.dense_layers * 2 + r32(rng) % 16;
  s.engine.burst_pages = s.engine.target_pages + r32(rng) % 32;
  s.engine.eos_token = (r32(rng) % 2) ? 7 : -1;
  s.config.max_seqs = 1 + r32(rng) % 8;
  s.config.step_tokens = s.config.max_seqs + r32(rng) % 96;
  s.config.prefill_chunk_tokens = 1 + r32(rng) % s.config.step_tokens;
  s.config.stop_at_eos = true;
  const std::uint32_t n = 1 + r32(rng) % 12;
  double arrival = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    arrival += (r32(rng) % 4) * 0.003;
    std::string session = (r32(rng) % 3 == 0) ? "s" + std::to_string(r32(rng) % 3) : "";
    s.trace.push_back(request("r" + std::to_string(i), arrival, tokens(rng, 1 + r32(rng) % 120), 1 + r32(rng) % 40, session));
  }
  return s;
}

// Property: under random traces and budgets, every request ends, each finished
// output equals the request run alone, the concurrency cap and the step budget
// hold, nothing allocates in the loop, and every context is returned.
TEST(Scheduler, RandomTracesMatchRunAlone) {
  const char* env = std::getenv("ACTIVEKV_SERVE_SEEDS");
  const std::uint32_t seeds = env != nullptr ? static_cast<std::uint32_t>(std::atoi(env)) : 500;
  std::uint64_t compared = 0, mixed_steps = 0;
  for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE(seed);
    const Scenario s = random_scenario(seed);
    auto run = run_all(s.trace, s.engine, s.config);
    const Scheduler& sch = *run->scheduler;
    EXPECT_EQ(run->heap_allocations_in_loop, 0u);
    EXPECT_TRUE(run->engine->all_returned());
    EXPECT_LE(sch.running_max(), std::min(s.config.max_seqs, std::min(s.engine.max_seqs, s.engine.histories)));
    for (const StepSample& step : sch.steps()) {
      EXPECT_LE(step.decode_tokens + step.prefill_tokens, s.config.step_tokens);
      EXPECT_GT(step.decode_tokens + step.prefill_tokens, 0u);
      mixed_steps += step.decode_tokens > 0 && step.prefill_tokens > 0;
    }
    for (std::size_t i = 0; i < s.trace.size(); ++i) {
      const RequestRecord& r = sch.requests()[i];
      ASSERT_TRUE(r.ended());
      if (r.state == RequestState::rejected) {
        // Only what can never fit is rejected.
        EXPECT_TRUE(r.reject_reason == RejectReason::longer_than_max_context ||
                    r.reject_reason == RejectReason::previous_turn_rejected ||
                    r.reject_reason == RejectReason::never_admissible);
        if (r.reject_reason == RejectReason::longer_than_max_context) {
          EXPECT_GT(r.prompt_tokens + r.max_tokens, s.engine.max_context_tokens);
        }
        continue;
      }
      ASSERT_EQ(r.state, RequestState::finished);
      EXPECT_GE(r.first_token_s, r.ready_s);
      EXPECT_TRUE(r.output_tokens == r.max_tokens || r.output().back() == s.engine.eos_token);
      auto alone = run_all(chain_of(s.trace, i), s.engine, s.config);
      const RequestRecord& a = alone->scheduler->requests().back();
      ASSERT_EQ(a.state, RequestState::finished);
      ASSERT_EQ(a.prompt_tokens, r.prompt_tokens);
      EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), a.tokens.begin(), a.tokens.end())) << r.id;
      ++compared;
    }
  }
  // The property is not vacuous: most requests finish and are compared, and batches mix work.
  EXPECT_GT(compared, seeds * 3u);
  EXPECT_GT(mixed_steps, seeds);
}

// The host pool holds 2 histories while 4 sequences are asked for: at most 2
// run, the rest wait with the reason recorded, and all complete.
TEST(Scheduler, HostPoolOversubscriptionQueuesAndCompletes) {
  FakeEngineConfig engine;
  engine.histories = 2;
  engine.max_seqs = 4;
  SchedulerConfig config;
  config.max_seqs = 4;
  std::mt19937 rng(7);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 7; ++i) trace.push_back(request("r" + std::to_string(i), 0.0, tokens(rng, 100), 20));
  auto run = run_all(trace, engine, config);
  const Scheduler& sch = *run->scheduler;
  EXPECT_EQ(run->engine->plan().concurrency, 2u);
  EXPECT_EQ(sch.running_max(), 2u);
  std::uint32_t waited_for_history = 0;
  for (const RequestRecord& r : sch.requests()) {
    EXPECT_EQ(r.state, RequestState::finished) << r.id;
    EXPECT_EQ(r.output_tokens, 20u);
    waited_for_history += r.wait_steps[static_cast<std::size_t>(WaitReason::no_free_history)] > 0;
  }
  EXPECT_GE(waited_for_history, 1u);
  EXPECT_EQ(sch.requests()[2].first_wait_reason, WaitReason::no_free_history);  // the head when 0 and 1 ran
  EXPECT_EQ(sch.requests()[3].first_wait_reason, WaitReason::behind_queue_head);
  EXPECT_TRUE(run->engine->all_returned());
}

// The scheduler's own cap, below the plan's concurrency, is reported as max_seqs.
TEST(Scheduler, MaxSeqsCapIsAWaitReason) {
  FakeEngineConfig engine;
  engine.histories = 8;
  SchedulerConfig config;
  config.max_seqs = 1;
  std::mt19937 rng(3);
  auto run = run_all({request("a", 0, tokens(rng, 10), 5), request("b", 0, tokens(rng, 10), 5)}, engine, config);
  EXPECT_EQ(run->scheduler->running_max(), 1u);
  EXPECT_EQ(run->scheduler->requests()[1].first_wait_reason, WaitReason::max_seqs);
  EXPECT_EQ(run->scheduler->requests()[1].state, RequestState::finished);
}

// A KV tier lookup in flight (the engine says tier_pending) keeps the queue head waiting in
// admission, never the step path: the running request steps on meanwhile; with nothing running the
// engine is asked to wait (no spin, no rejection). Outputs equal the run without a tier.
TEST(Scheduler, ATierLookupWaitsInAdmissionWhileOthersStep) {
  FakeEngineConfig plain;
  FakeEngineConfig tier = plain;
  tier.tier_pending_admits = 6;
  SchedulerConfig config;
  std::mt19937 rng(11);
  const std::vector<TraceRequest> trace = {request("a", 0, tokens(rng, 10), 30), request("b", 0.01, tokens(rng, 12), 5)};
  auto with = run_all(trace, tier, config);
  auto without = run_all(trace, plain, config);
  const auto& r = with->scheduler->requests();
  EXPECT_GT(with->engine->tier_waits(), 0u);  // "a" waited with nothing running
  EXPECT_EQ(r[1].first_wait_reason, WaitReason::kv_tier);
  EXPECT_GE(r[1].wait_steps[static_cast<std::size_t>(WaitReason::kv_tier)], 5u);  // "a" stepped each time
  for (std::size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(r[i].state, RequestState::finished);
    EXPECT_EQ(r[i].tokens, without->scheduler->requests()[i].tokens) << trace[i].id;
  }
  EXPECT_STREQ(wait_reason_name(WaitReason::kv_tier), "kv_tier");
}

// Queued requests are asked to prefetch (the KV tier's lookup) while they wait, each once, not
// when they reach the head; one cancelled while queued has its prefetch dropped.
TEST(Scheduler, QueuedRequestsPrefetchWhileTheyWaitAndACancelDropsIt) {
  SchedulerConfig config;
  config.max_seqs = 1;
  std::mt19937 rng(12);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 4; ++i) trace.push_back(request("r" + std::to_string(i), 0.001 * i, tokens(rng, 20), 8));
  auto run = start(trace, FakeEngineConfig{}, config);
  for (int i = 0; i < 200 && run->scheduler->requests()[3].state != RequestState::queued; ++i) {
    ASSERT_TRUE(run->scheduler->advance());
  }
  ASSERT_EQ(run->scheduler->requests()[3].state, RequestState::queued);
  ASSERT_TRUE(run->scheduler->advance());  // the next admission pass asks the newcomer
  EXPECT_EQ(run->engine->prefetches(), 4u);  // every request, while r0 (at most) runs
  EXPECT_EQ(run->engine->prefetch_running_max(), 1u);
  EXPECT_TRUE(run->scheduler->requests()[3].prefetched);
  run->scheduler->cancel(3);
  EXPECT_EQ(run->engine->prefetch_drops(), 1u);
  finish(*run);
  EXPECT_EQ(run->heap_allocations_in_loop, 0u);
  EXPECT_EQ(run->engine->prefetches(), 4u);  // none asked twice
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run->scheduler->requests()[i].state, RequestState::finished);
  EXPECT_EQ(run->scheduler->requests()[3].state, RequestState::cancelled);
}

TEST(Scheduler, TooLongRequestIsRejectedWhileOthersRun) {
  FakeEngineConfig engine;
  engine.max_context_tokens = 256;
  SchedulerConfig config;
  std::mt19937 rng(11);
  auto run = run_all({request("ok1", 0, tokens(rng, 100), 10), request("long", 0.001, tokens(rng, 250), 10),
                      request("ok2", 0.002, tokens(rng, 100), 10)},
                     engine, config);
  const auto& r = run->scheduler->requests();
  EXPECT_EQ(r[0].state, RequestState::finished);
  EXPECT_EQ(r[1].state, RequestState::rejected);
  EXPECT_EQ(r[1].reject_reason, RejectReason::longer_than_max_context);
  EXPECT_EQ(r[2].state, RequestState::finished);
  EXPECT_EQ(run->engine->finishes(), 2u);
}

TEST(Scheduler, FloorThatCanNeverFitIsRejected) {
  FakeEngineConfig engine;
  engine.dense_layers = 4;
  engine.pool_pages = 6;  // one floor is 8 pages
  std::mt19937 rng(5);
  auto run = run_all({request("a", 0, tokens(rng, 10), 5)}, engine, SchedulerConfig{});
  EXPECT_EQ(run->scheduler->requests()[0].reject_reason, RejectReason::never_admissible);
}

// Prefill is chunked and interleaved with decode under the step budget.
TEST(Scheduler, ChunkedPrefillInterleavesWithDecode) {
  FakeEngineConfig engine;
  SchedulerConfig config;
  config.step_tokens = 40;
  config.prefill_chunk_tokens = 16;
  std::mt19937 rng(9);
  auto run = run_all({request("short", 0, tokens(rng, 8), 50), request("long", 0.01, tokens(rng, 300), 4)}, engine, config);
  bool mixed = false;
  for (const StepSample& step : run->scheduler->steps()) {
    EXPECT_LE(step.prefill_tokens, 16u);  // one prefilling context: at most one chunk
    mixed |= step.decode_tokens > 0 && step.prefill_tokens > 0;
  }
  EXPECT_TRUE(mixed);
  // The short request kept generating while the long one prefilled: its tokens
  // never waited for the long prompt as a whole (300 tokens at 0.1 ms each = 30 ms).
  for (const TokenSample& t : run->scheduler->token_samples()) {
    if (t.request == 0 && !t.first) {
      EXPECT_LT(t.latency_s, 0.0101);
    }
  }
}

// Cancellation anywhere returns the context at once; the others are unaffected.
TEST(Scheduler, CancellationAtAnyPoint) {
  FakeEngineConfig engine;
  engine.histories = 2;
  SchedulerConfig config;
  config.step_tokens = 32;
  config.prefill_chunk_tokens = 16;
  std::mt19937 rng(13);
  std::vector<TraceRequest> trace = {request("at-admission", 0, tokens(rng, 50), 20),
                                     request("mid-decode", 0, tokens(rng, 50), 20),
                                     request("mid-prefill", 0, tokens(rng, 200), 20),
                                     request("queued", 0, tokens(rng, 50), 20),
                                     request("runs", 0, tokens(rng, 50), 20)};
  trace[0].cancel_after_tokens = 0;
  trace[1].cancel_after_tokens = 5;
  auto run = start(trace, engine, config);
  Scheduler& sch = *run->scheduler;
  bool cancelled_mid_prefill = false, cancelled_queued = false;
  while (!sch.done()) {
    ASSERT_TRUE(sch.advance());
    const RequestRecord& p = sch.requests()[2];
    if (!cancelled_mid_prefill && p.state == RequestState::prefill && p.prefilled_tokens > 0) {
      EXPECT_LT(p.prefilled_tokens, p.prompt_tokens);
      sch.cancel(2);
      cancelled_mid_prefill = true;
    }
    if (!cancelled_queued && sch.requests()[3].state == RequestState::queued) {
      sch.cancel(3);
      cancelled_queued = true;
    }
  }
  EXPECT_TRUE(cancelled_mid_prefill);
  EXPECT_TRUE(cancelled_queued);
  const auto& r = sch.requests();
  EXPECT_EQ(r[0].state, RequestState::cancelled);
  EXPECT_EQ(r[0].output_tokens, 0u);
  EXPECT_EQ(r[1].state, RequestState::cancelled);
  EXPECT_EQ(r[1].output_tokens, 5u);
  EXPECT_EQ(r[2].state, RequestState::cancelled);
  EXPECT_EQ(r[3].state, RequestState::cancelled);
  EXPECT_EQ(r[4].state, RequestState::finished);
  EXPECT_EQ(run->engine->cancels(), 3u);  // queued one never held a context
  EXPECT_TRUE(run->engine->all_returned());
  auto alone = run_all(chain_of(trace, 4), engine, config);
  EXPECT_EQ(alone->scheduler->requests()[0].tokens, r[4].tokens);
}

// A follow-up turn waits for its session's previous turn and extends its sequence.
TEST(Scheduler, SessionFollowUpExtendsThePreviousTurn) {
  FakeEngineConfig engine;
  SchedulerConfig config;
  std::mt19937 rng(17);
  std::vector<TraceRequest> trace = {request("t1", 0, tokens(rng, 30), 12, "s"), request("other", 0, tokens(rng, 30), 12),
                                     request("t2", 0.0001, tokens(rng, 5), 8, "s")};
  auto run = run_all(trace, engine, config);
  const auto& r = run->scheduler->requests();
  ASSERT_EQ(r[2].state, RequestState::finished);
  EXPECT_EQ(r[0].next_turn, 2);
  EXPECT_EQ(r[2].previous_turn, 0);
  EXPECT_EQ(r[2].prompt_tokens, 30u + 12u + 5u);
  EXPECT_TRUE(std::equal(r[0].tokens.begin(), r[0].tokens.end(), r[2].tokens.begin()));
  EXPECT_TRUE(std::equal(trace[2].prompt_tokens.begin(), trace[2].prompt_tokens.end(), r[2].tokens.begin() + 42));
  EXPECT_GT(r[2].wait_steps[static_cast<std::size_t>(WaitReason::session_turn)], 0u);
  EXPECT_GE(r[2].ready_s, r[0].ended_s);
}

// Arrivals in the future are waited for (the manual clock jumps), not busy-looped.
TEST(Scheduler, WaitsForLateArrivals) {
  FakeEngineConfig engine;
  SchedulerConfig config;
  config.arrival_scale = 2.0;
  std::mt19937 rng(19);
  auto run = run_all({request("a", 0, tokens(rng, 10), 3), request("b", 5.0, tokens(rng, 10), 3)}, engine, config);
  const auto& r = run->scheduler->requests();
  EXPECT_DOUBLE_EQ(r[1].arrival_s, 10.0);
  EXPECT_DOUBLE_EQ(r[1].ready_s, 10.0);
  EXPECT_GE(r[1].admitted_s, 10.0);
  EXPECT_LT(run->scheduler->steps().size(), 20u);
}

TEST(Scheduler, LiveSlotsServeSubmissionsAndAreReusedWithoutAllocating) {
  // Six requests through a live scheduler with three slots, each slot used twice:
  // every output equals the same request replayed alone from a trace (the next
  // test checks that submit(), advance() and release() allocate nothing).
  FakeEngineConfig ec;
  ec.histories = 2;
  ec.max_seqs = 2;
  ec.max_context_tokens = 512;
  SchedulerConfig sc;
  sc.max_seqs = 2;
  sc.step_tokens = 32;
  sc.prefill_chunk_tokens = 8;
  sc.stop_at_eos = false;
  std::mt19937 rng(7);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(tokens(rng, 1 + r32(rng) % 60));

  ManualClock clock;
  ec.clock = &clock;
  FakeEngine engine(ec);
  auto created = Scheduler::create_live(3, engine, clock, sc);
  ASSERT_TRUE(created);
  Scheduler& s = **created;
  EXPECT_TRUE(s.live());
  std::vector<std::vector<std::int32_t>> outputs(6);
  for (int round = 0; round < 2; ++round) {
    for (std::uint32_t slot = 0; slot < 3; ++slot) {
      const auto& p = prompts[static_cast<std::size_t>(round * 3 + static_cast<int>(slot))];
      s.submit(slot, Submission{p, 5 + slot, {}, no_stop_tokens});
    }
    for (int guard = 0; s.running() + s.queued() > 0; ++guard) {
      ASSERT_TRUE(s.advance());
      ASSERT_LT(guard, 100000);
    }
    EXPECT_FALSE(s.done());  // a live scheduler is never done
    for (std::uint32_t slot = 0; slot < 3; ++slot) {
      EXPECT_EQ(s.requests()[slot].state, RequestState::finished);
      const auto out = s.requests()[slot].output();
      outputs[static_cast<std::size_t>(round * 3) + slot].assign(out.begin(), out.end());
      s.release(slot);
      EXPECT_EQ(s.requests()[slot].state, RequestState::vacant);
    }
  }
  EXPECT_TRUE(engine.all_returned());
  for (std::size_t i = 0; i < 6; ++i) {
    auto alone = run_all({request("a", 0, prompts[i], 5 + static_cast<std::uint32_t>(i % 3))}, ec, sc);
    const auto expected = alone->scheduler->requests()[0].output();
    EXPECT_EQ(outputs[i], std::vector<std::int32_t>(expected.begin(), expected.end())) << "request " << i;
  }
}

TEST(Scheduler, LiveSubmitAndAdvanceAllocateNothing) {
  FakeEngineConfig ec;
  ec.histories = 2;
  ec.max_seqs = 2;
  ec.max_context_tokens = 256;
  SchedulerConfig sc;
  sc.max_seqs = 2;
  sc.step_tokens = 32;
  sc.prefill_chunk_tokens = 8;
  ManualClock clock;
  ec.clock = &clock;
  FakeEngine engine(ec);
  auto created = Scheduler::create_live(4, engine, clock, sc);
  ASSERT_TRUE(created);
  Scheduler& s = **created;
  const std::vector<std::int32_t> prompt(100, 3), too_long(250, 4);
  const std::uint64_t before = activekv::testing::heap_allocations();
  for (int round = 0; round < 3; ++round) {
    for (std::uint32_t slot = 0; slot < 3; ++slot) s.submit(slot, Submission{prompt, 20, {}, no_stop_tokens});
    s.submit(3, Submission{too_long, 10, {}, no_stop_tokens});  // prompt + max_tokens > 256: rejected at once
    EXPECT_EQ(s.requests()[3].state, RequestState::rejected);
    EXPECT_EQ(s.requests()[3].reject_reason, RejectReason::longer_than_max_context);
    s.cancel(2);  // queued behind two running: cancelled without a context
    while (s.running() + s.queued() > 0) ASSERT_TRUE(s.advance());
    for (std::uint32_t slot = 0; slot < 4; ++slot) s.release(slot);
  }
  EXPECT_EQ(activekv::testing::heap_allocations() - before, 0u);
  EXPECT_TRUE(engine.all_returned());
}

}  // namespace
}  // namespace activekv::serve
