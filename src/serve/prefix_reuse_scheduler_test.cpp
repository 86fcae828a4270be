// prefix_reuse_scheduler_test.cpp — conversations with prefix reuse on the fake engine.
//
// Every trace runs twice, prefix reuse on and off, same configuration. The
// fake engine's output is a function of every token a context holds, and an
// adopted prefix resumes from the retained history's own state, so:
//   - every request's tokens (prompt and output) must be equal, byte for byte;
//   - the prompt tokens fed must drop by exactly the tokens reused;
//   - a follow-up whose predecessor's history was still retained prefills only
//     its new text plus at most one page (and the predecessor's last token, whose
//     row a decode step never wrote);
//   - under pressure (more conversations than histories) retained histories are
//     dropped and counted, nothing is lost, and nothing waits on them.
// The default trace's sessions, 300 random conversation traces (ACTIVEKV_SERVE_SEEDS
// scales them) and a pressure trace. Follow-up TTFT is compared on the manual clock.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <sstream>

#include "serve/fake_engine.hpp"
#include "serve/run_config.hpp"
#include "serve/scheduler.hpp"
#include "serve/trace.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::serve {
namespace {

struct Run {
  ManualClock clock;
  std::unique_ptr<FakeEngine> engine;
  std::unique_ptr<Scheduler> scheduler;
  std::uint64_t heap_allocations_in_loop = 0;
};

std::unique_ptr<Run> run_all(const std::vector<TraceRequest>& trace, FakeEngineConfig engine_config,
                             const SchedulerConfig& config, bool reuse) {
  auto run = std::make_unique<Run>();
  engine_config.clock = &run->clock;
  engine_config.prefix_reuse = reuse;
  run->engine = std::make_unique<FakeEngine>(engine_config);
  auto scheduler = Scheduler::create(trace, *run->engine, run->clock, config);
  EXPECT_TRUE(scheduler) << scheduler.error().describe();
  if (!scheduler) return run;
  run->scheduler = std::move(scheduler).value();
  const std::uint64_t before = activekv::testing::heap_allocations();
  std::uint64_t iterations = 0;
  while (!run->scheduler->done()) {
    Status s = run->scheduler->advance();
    EXPECT_TRUE(s) << s.error().describe();
    if (!s || ++iterations > 10'000'000u) break;
  }
  run->heap_allocations_in_loop = activekv::testing::heap_allocations() - before;
  return run;
}

struct Comparison {
  std::uint64_t reused = 0;
  std::uint64_t reused_fed = 0;  // by requests whose prefill completed (one cancelled at admission feeds nothing either way)
  std::uint64_t follow_ups = 0, follow_ups_reusing = 0;
  double ttft_follow_ups_on_s = 0, ttft_follow_ups_off_s = 0;
};

// Runs `trace` with reuse on and off and checks everything the header lists.
Comparison compare(const std::vector<TraceRequest>& trace, const FakeEngineConfig& engine, const SchedulerConfig& config) {
  Comparison c;
  auto on = run_all(trace, engine, config, true);
  auto off = run_all(trace, engine, config, false);
  if (on->scheduler == nullptr || off->scheduler == nullptr) return c;
  const Scheduler& a = *on->scheduler;
  const Scheduler& b = *off->scheduler;
  EXPECT_TRUE(a.done());
  EXPECT_EQ(on->heap_allocations_in_loop, 0u);
  EXPECT_TRUE(on->engine->all_returned());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const RequestRecord& x = a.requests()[i];
    const RequestRecord& y = b.requests()[i];
    EXPECT_EQ(x.state, y.state) << x.id;
    EXPECT_TRUE(std::equal(x.tokens.begin(), x.tokens.end(), y.tokens.begin(), y.tokens.end()))
        << x.id << ": the output with reuse differs from the output without";
    EXPECT_EQ(y.reused_tokens, 0u);
    EXPECT_LT(x.reused_tokens, std::max(1u, x.prompt_tokens));
    EXPECT_EQ(x.reused_tokens % engine.page_tokens, 0u);
    c.reused += x.reused_tokens;
    if (x.prefilled_tokens == x.prompt_tokens) c.reused_fed += x.reused_tokens;
    if (x.previous_turn < 0 || x.state != RequestState::finished) continue;
    ++c.follow_ups;
    c.ttft_follow_ups_on_s += x.first_token_s - x.ready_s;
    c.ttft_follow_ups_off_s += y.first_token_s - y.ready_s;
    if (x.reused_tokens == 0) continue;
    ++c.follow_ups_reusing;
    const RequestRecord& prev = a.requests()[static_cast<std::size_t>(x.previous_turn)];
    const std::uint32_t held = prev.prompt_tokens + prev.output_tokens - 1;  // the last token was never fed
    const std::uint32_t own = x.prompt_tokens - (prev.prompt_tokens + prev.output_tokens);
    if (x.reused_tokens + engine.page_tokens > held) {
      EXPECT_LE(x.prompt_tokens - x.reused_tokens, own + 1 + engine.page_tokens)
          << x.id << ": a follow-up prefills only its new tokens plus at most one page";
    }
  }
  EXPECT_EQ(a.tokens_in() + c.reused_fed, b.tokens_in()) << "prompt tokens fed drop by exactly the reused amount";
  EXPECT_EQ(on->engine->counters().prefix_reused_tokens, c.reused);
  return c;
}

FakeEngineConfig default_like() {
  FakeEngineConfig e;  // the default configuration's shape: 4 histories, max_seqs 6, 8K contexts
  e.histories = 4;
  e.max_seqs = 6;
  e.max_context_tokens = 8192;
  e.page_tokens = 16;
  e.pool_pages = 512;
  return e;
}

TEST(PrefixReuseScheduler, DefaultTraceSessionsReuseTheirHistoryAndMatchByteForByte) {
  std::istringstream in{std::string(default_trace_text())};
  auto trace = read_trace(in, "default_trace.jsonl");
  ASSERT_TRUE(trace) << trace.error().describe();
  SchedulerConfig config;
  config.max_seqs = 6;
  config.step_tokens = 256;
  config.prefill_chunk_tokens = 128;
  config.stop_at_eos = false;
  const Comparison c = compare(*trace, default_like(), config);
  std::printf("default trace: %llu prompt tokens reused; %llu follow-ups, %llu reusing; follow-up TTFT %.4f s with reuse, "
              "%.4f s without (manual clock)\n",
              static_cast<unsigned long long>(c.reused), static_cast<unsigned long long>(c.follow_ups),
              static_cast<unsigned long long>(c.follow_ups_reusing), c.ttft_follow_ups_on_s, c.ttft_follow_ups_off_s);
  EXPECT_GT(c.follow_ups, 0u);
  EXPECT_EQ(c.follow_ups_reusing, c.follow_ups) << "every follow-up adopts at least the shared dictionary preamble";
  EXPECT_LT(c.ttft_follow_ups_on_s, c.ttft_follow_ups_off_s);
}

// The default trace with the default configuration's retained-history allowance
// (configs/default.json: retained_histories), the fake engine paced like the real
// model on 2 cores (about 1 ms per prompt byte, 20 ms per step), so that four long
// contexts run while the sessions' first turns finish and strangers take histories:
// the pressure docs/PREFIX.md describes. With the allowance both follow-ups (r07,
// r09) adopt their predecessor's whole history; the outputs equal reuse off.
TEST(PrefixReuseScheduler, DefaultTraceWithTheRetainedHistoryAllowanceBothFollowUpsReuseTheirHistory) {
  std::istringstream in{std::string(default_trace_text())};
  auto trace = read_trace(in, "default_trace.jsonl");
  ASSERT_TRUE(trace) << trace.error().describe();
  auto defaults = parse_run_config(default_config_text(), "configs/default.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  ASSERT_GT(defaults->retained_histories, 0u) << "configs/default.json keeps an allowance of retained histories";
  SchedulerConfig config;
  config.max_seqs = defaults->max_seqs;
  config.step_tokens = defaults->step_tokens;
  config.prefill_chunk_tokens = defaults->prefill_chunk_tokens;
  config.stop_at_eos = false;
  auto follow_ups = [&](std::uint32_t retained, Comparison& c) {
    FakeEngineConfig e = default_like();
    e.retained_histories = retained;
    e.step_cost_s = 0.02;
    e.token_cost_s = 0.001;
    c = compare(*trace, e, config);
    auto on = run_all(*trace, e, config, true);
    std::vector<std::pair<std::string, bool>> whole;  // follow-up id, adopted its predecessor's whole history
    for (const RequestRecord& x : on->scheduler->requests()) {
      if (x.previous_turn < 0) continue;
      const RequestRecord& prev = on->scheduler->requests()[static_cast<std::size_t>(x.previous_turn)];
      const std::uint32_t held = prev.prompt_tokens + prev.output_tokens - 1;  // rows the predecessor holds
      whole.emplace_back(x.id, x.reused_tokens + e.page_tokens > held);
      std::printf("retained_histories %u: %s prompt %u, reused %u, prefilled %u; dropped %llu\n", retained, x.id.c_str(),
                  x.prompt_tokens, x.reused_tokens, x.prompt_tokens - x.reused_tokens,
                  static_cast<unsigned long long>(on->engine->counters().retained_dropped));
    }
    return whole;
  };
  Comparison with{}, without{};
  const auto allowed = follow_ups(defaults->retained_histories, with);
  if (HasFailure()) return;
  ASSERT_EQ(allowed.size(), 2u);
  for (const auto& [id, reused_whole] : allowed) EXPECT_TRUE(reused_whole) << id << " adopts its predecessor's history";
  const auto none = follow_ups(0, without);
  std::size_t whole_without = 0;
  for (const auto& [id, reused_whole] : none) whole_without += reused_whole ? 1 : 0;
  EXPECT_LT(whole_without, 2u) << "without the allowance the pressure drops a follow-up's history (the gap it closes)";
  EXPECT_GT(with.reused, without.reused);
}

// One draw below n (the generator's 32-bit result, narrowed explicitly).
std::uint32_t draw(std::mt19937& rng, std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); }

std::vector<std::int32_t> bytes(std::mt19937& rng, std::uint32_t n) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(rng() % 256);
  return t;
}

// The follow-up's first step (docs/PREFIX.md): a follow-up that adopted its predecessor's history
// and has at most one chunk left feeds it in the step right after its admission, and that step
// carries no other context's prefill and holds the other contexts' decode tokens: it is exactly the
// suffix. On the default trace with the allowance, paced like the real model (20 ms a step plus 1 ms
// a token), each follow-up's TTFT from admission is then one step's fixed cost plus its own suffix,
// and beyond that fixed cost it falls by at least the reused share. Paced per token only (no fixed
// cost) it falls by at least the reused share outright; with the hold off, the decodes in that step
// keep it short of the share. Outputs stay equal to reuse off (compare()).
TEST(PrefixReuseScheduler, AFollowUpsSuffixRunsFirstAloneSoItsTtftFallsByTheReusedShare) {
  std::istringstream in{std::string(default_trace_text())};
  auto trace = read_trace(in, "default_trace.jsonl");
  ASSERT_TRUE(trace) << trace.error().describe();
  auto defaults = parse_run_config(default_config_text(), "configs/default.json");
  ASSERT_TRUE(defaults) << defaults.error().describe();
  SchedulerConfig config;
  config.max_seqs = defaults->max_seqs;
  config.step_tokens = defaults->step_tokens;
  config.prefill_chunk_tokens = defaults->prefill_chunk_tokens;
  config.stop_at_eos = false;
  ASSERT_TRUE(config.hold_decodes_for_follow_ups) << "the hold is on by default";
  struct Fall {
    std::string id;
    double on_s = 0, off_s = 0, share = 0;
    std::uint32_t decodes_in_step = 0, held = 0;
  };
  auto follow_ups = [&](double step_cost_s, bool hold) {
    FakeEngineConfig e = default_like();
    e.retained_histories = defaults->retained_histories;
    e.step_cost_s = step_cost_s;
    e.token_cost_s = 0.001;
    SchedulerConfig c = config;
    c.hold_decodes_for_follow_ups = hold;
    std::vector<Fall> falls;
    compare(*trace, e, c);
    if (HasFailure()) return falls;
    auto on = run_all(*trace, e, c, true);
    auto off = run_all(*trace, e, c, false);
    const Scheduler& a = *on->scheduler;
    std::uint64_t held_by_requests = 0;
    for (std::size_t i = 0; i < trace->size(); ++i) {
      const RequestRecord& x = a.requests()[i];
      const RequestRecord& y = off->scheduler->requests()[i];
      held_by_requests += x.decode_steps_held;
      if (x.previous_turn < 0) continue;
      EXPECT_GT(x.reused_tokens, 0u) << x.id;
      const std::uint32_t suffix = x.prompt_tokens - x.reused_tokens;
      EXPECT_LE(suffix, c.prefill_chunk_tokens) << x.id;
      // The step that gave the first token: the first one after admission, with only this suffix as prefill.
      const StepSample* first = nullptr;
      for (const StepSample& st : a.steps()) {
        if (st.start_s >= x.admitted_s) {
          first = &st;
          break;
        }
      }
      if (first == nullptr) {
        ADD_FAILURE() << x.id << ": no step after its admission";
        continue;
      }
      EXPECT_EQ(first->end_s, x.first_token_s) << x.id << ": the first token comes from the first step after admission";
      EXPECT_TRUE(first->follow_up_first) << x.id;
      EXPECT_EQ(first->prefill_tokens, suffix) << x.id << ": that step carries no other context's prefill";
      if (hold) {
        EXPECT_EQ(first->decode_tokens, 0u) << x.id << ": the others' decode tokens are held: the step is the suffix";
        EXPECT_EQ(first->batch_entries, 1u) << x.id;
      } else {
        EXPECT_EQ(first->held_decode_tokens, 0u) << x.id;
      }
      const double on_s = x.first_token_s - x.admitted_s;
      // One step: its fixed cost, the suffix and the decodes it carries (the manual clock advances by the cost).
      EXPECT_NEAR(on_s, e.step_cost_s + e.token_cost_s * (first->decode_tokens + suffix), 1e-9) << x.id;
      falls.push_back(Fall{x.id, on_s, y.first_token_s - y.admitted_s,
                           static_cast<double>(x.reused_tokens) / x.prompt_tokens, first->decode_tokens,
                           first->held_decode_tokens});
    }
    EXPECT_EQ(falls.size(), 2u);
    EXPECT_EQ(a.follow_up_first_steps(), 2u) << "one such step per follow-up";
    EXPECT_EQ(off->scheduler->follow_up_first_steps(), 0u) << "nothing adopts with reuse off";
    EXPECT_EQ(off->scheduler->held_decode_tokens(), 0u);
    EXPECT_EQ(a.held_decode_tokens(), held_by_requests) << "held tokens are counted per request and in total";
    if (!hold) {
      EXPECT_EQ(a.held_decode_tokens(), 0u);
    }
    for (const Fall& f : falls) {
      std::printf("step cost %.0f ms, hold %s: %s reused %.1f%%, first step %u decodes (%u held), TTFT from admission "
                  "%.3f s on, %.3f s off (fall %.1f%%)\n",
                  1e3 * step_cost_s, hold ? "on" : "off", f.id.c_str(), 100 * f.share, f.decodes_in_step, f.held, f.on_s,
                  f.off_s, 100 * (1 - f.on_s / f.off_s));
    }
    return falls;
  };
  // Paced like the real model: beyond the one step's fixed cost the fall is at least the reused share.
  for (const Fall& f : follow_ups(0.02, true)) {
    EXPECT_LE(f.on_s - 0.02, (1 - f.share) * f.off_s) << f.id;
    EXPECT_LT(f.on_s, 0.25 * f.off_s) << f.id;
  }
  // Per token only: the fall is at least the reused share.
  std::uint32_t held = 0;
  for (const Fall& f : follow_ups(0.0, true)) {
    EXPECT_GE(1 - f.on_s / f.off_s, f.share) << f.id << ": TTFT from admission falls by at least the reused share";
    held += f.held;
  }
  EXPECT_GT(held, 0u) << "the trace's follow-ups come while others decode: the hold is exercised";
  // Without the hold the decodes ride in that step and a follow-up falls short of the share.
  std::uint32_t short_of_share = 0;
  for (const Fall& f : follow_ups(0.0, false)) short_of_share += 1 - f.on_s / f.off_s < f.share ? 1 : 0;
  EXPECT_GT(short_of_share, 0u);
}

// Many conversations whose follow-ups come back to back: a follow-up's first step holds the other
// contexts' decode tokens, but never one context two steps in a row, so no context starves however
// many follow-ups come (one-token turns bring their session's next turn in the very next step):
// consecutive output tokens of a context are at most two steps apart, and two
// apart only across a step that held it. Outputs equal reuse off (compare()).
TEST(PrefixReuseScheduler, HoldingForFollowUpsNeverHoldsAContextTwiceInARow) {
  std::mt19937 rng(11);
  std::vector<TraceRequest> trace;
  for (std::uint32_t turn = 0; turn < 8; ++turn) {
    for (std::uint32_t s = 0; s < 10; ++s) {
      TraceRequest r;
      r.id = "s" + std::to_string(s) + "t" + std::to_string(turn);
      r.session = "s" + std::to_string(s);
      r.arrival_s = 0.001 * s;
      r.prompt_tokens = bytes(rng, turn == 0 ? 8 + draw(rng, 40) : 1 + draw(rng, 12));
      // A one-token turn ends in its first step, so its session's next turn comes in the step after.
      r.max_tokens = draw(rng, 3) == 0 ? 1 : 2 + draw(rng, 12);
      trace.push_back(r);
    }
  }
  FakeEngineConfig e;
  e.histories = 6;
  e.retained_histories = 6;
  e.max_seqs = 6;
  e.max_context_tokens = 1024;
  e.page_tokens = 4;
  e.pool_pages = 256;
  SchedulerConfig config;
  config.max_seqs = 6;
  config.step_tokens = 64;
  config.prefill_chunk_tokens = 32;
  config.stop_at_eos = false;
  compare(trace, e, config);
  if (HasFailure()) return;
  auto on = run_all(trace, e, config, true);
  const Scheduler& a = *on->scheduler;
  ASSERT_EQ(a.steps_dropped(), 0u);
  std::map<double, std::size_t> step_of;  // a step's end time -> its index (the manual clock only moves forward)
  for (std::size_t k = 0; k < a.steps().size(); ++k) step_of[a.steps()[k].end_s] = k;
  std::vector<std::size_t> last_step(trace.size(), SIZE_MAX);
  std::vector<std::uint32_t> gaps_of_two(trace.size(), 0);
  for (const TokenSample& t : a.token_samples()) {
    const std::size_t k = step_of.at(t.time_s);
    if (!t.first) {
      const std::size_t gap = k - last_step[t.request];
      EXPECT_TRUE(gap == 1 || gap == 2) << a.requests()[t.request].id << ": tokens " << gap << " steps apart";
      if (gap == 2) {
        ++gaps_of_two[t.request];
        EXPECT_GT(a.steps()[k - 1].held_decode_tokens, 0u) << "only a held step is skipped";
      }
    }
    last_step[t.request] = k;
  }
  std::uint64_t held = 0;
  std::uint32_t reusing = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const RequestRecord& r = a.requests()[i];
    EXPECT_EQ(r.state, RequestState::finished) << r.id;
    EXPECT_EQ(gaps_of_two[i], r.decode_steps_held) << r.id << ": each hold delays it exactly one step";
    held += r.decode_steps_held;
    reusing += r.previous_turn >= 0 && r.reused_tokens > 0 ? 1 : 0;
  }
  std::uint32_t back_to_back = 0, hold_steps = 0;
  for (std::size_t k = 0; k < a.steps().size(); ++k) {
    const StepSample& st = a.steps()[k];
    hold_steps += st.held_decode_tokens > 0 ? 1 : 0;
    if (st.held_decode_tokens > 0) {
      EXPECT_TRUE(st.follow_up_first) << "step " << k << ": only a follow-up's first step holds decode tokens";
    }
    if (k > 0 && st.follow_up_first && a.steps()[k - 1].held_decode_tokens > 0) {
      ++back_to_back;
      EXPECT_GT(st.decode_tokens, 0u) << "step " << k << ": the contexts held in the step before decode in this one";
    }
  }
  std::printf("%zu requests, %u follow-ups reusing, %u follow-up first steps, %u back to back; %llu decode tokens held "
              "in %u steps\n",
              trace.size(), reusing, a.follow_up_first_steps(), back_to_back, static_cast<unsigned long long>(held),
              hold_steps);
  EXPECT_EQ(a.held_decode_tokens(), held);
  EXPECT_EQ(a.held_decode_steps(), hold_steps);
  EXPECT_LE(a.follow_up_first_steps(), reusing) << "at most one first step per follow-up";
  EXPECT_GT(held, 0u);
  EXPECT_GT(back_to_back, 0u) << "the trace brings follow-ups in consecutive steps: the rule is exercised";
}

// Conversations: several sessions of several turns, a few strangers, some sharing a system prompt.
std::vector<TraceRequest> conversations(std::mt19937& rng, std::uint32_t sessions, std::uint32_t turns_max) {
  std::vector<TraceRequest> trace;
  const std::vector<std::int32_t> system = bytes(rng, 20 + draw(rng, 40));
  double t = 0;
  for (std::uint32_t turn = 0; turn < turns_max; ++turn) {
    for (std::uint32_t s = 0; s < sessions; ++s) {
      if (turn > 0 && draw(rng, 4) == 0) continue;
      TraceRequest r;
      r.id = "s" + std::to_string(s) + "t" + std::to_string(turn);
      r.session = "s" + std::to_string(s);
      r.arrival_s = t;
      t += draw(rng, 100) / 1000.0;
      r.prompt_tokens = bytes(rng, 1 + draw(rng, 60));
      if (turn == 0 && draw(rng, 2) == 0) r.prompt_tokens.insert(r.prompt_tokens.begin(), system.begin(), system.end());
      r.max_tokens = 1 + draw(rng, 24);
      if (draw(rng, 25) == 0) r.cancel_after_tokens = draw(rng, 4);
      trace.push_back(r);
    }
    if (draw(rng, 2) == 0) {
      TraceRequest r;
      r.id = "x" + std::to_string(turn);
      r.arrival_s = t;
      r.prompt_tokens = system;
      const auto more = bytes(rng, 1 + draw(rng, 30));
      r.prompt_tokens.insert(r.prompt_tokens.end(), more.begin(), more.end());
      r.max_tokens = 1 + draw(rng, 8);
      trace.push_back(r);
    }
  }
  return trace;
}

TEST(PrefixReuseScheduler, RandomConversationsMatchByteForByte) {
  const char* env = std::getenv("ACTIVEKV_SERVE_SEEDS");
  const std::uint32_t seeds = env != nullptr ? static_cast<std::uint32_t>(std::atoi(env)) : 300;
  std::uint64_t reused = 0, follow_ups = 0, reusing = 0, dropped = 0, copies_possible = 0;
  for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    FakeEngineConfig e;
    e.histories = 1 + draw(rng, 5);
    e.max_seqs = 1 + draw(rng, 6);
    e.max_context_tokens = 1024;
    e.page_tokens = 4u << draw(rng, 3);
    e.dense_layers = 2;
    e.pool_pages = 4 * e.histories + draw(rng, 64);
    e.target_pages = 8;
    e.burst_pages = 16;
    e.eos_token = draw(rng, 3) == 0 ? static_cast<std::int32_t>(draw(rng, 256)) : -1;
    SchedulerConfig config;
    config.max_seqs = 1 + draw(rng, 6);
    config.step_tokens = 16 + draw(rng, 128);
    config.prefill_chunk_tokens = std::min<std::uint32_t>(config.step_tokens, 1 + draw(rng, 64));
    config.stop_at_eos = draw(rng, 2) == 0;
    const auto trace = conversations(rng, 1 + draw(rng, 5), 1 + draw(rng, 5));
    const Comparison c = compare(trace, e, config);
    if (HasFatalFailure()) return;
    reused += c.reused;
    follow_ups += c.follow_ups;
    reusing += c.follow_ups_reusing;
    auto on = run_all(trace, e, config, true);
    dropped += on->engine->counters().retained_dropped;
    copies_possible += on->engine->counters().prefix_adoptions;
  }
  std::printf("%u seeds: %llu tokens reused, %llu follow-ups (%llu reusing), %llu adoptions, %llu retained dropped\n",
              seeds, static_cast<unsigned long long>(reused), static_cast<unsigned long long>(follow_ups),
              static_cast<unsigned long long>(reusing), static_cast<unsigned long long>(copies_possible),
              static_cast<unsigned long long>(dropped));
  EXPECT_GT(reusing, follow_ups / 3) << "the mix exercises reuse";
  EXPECT_GT(dropped, 0u) << "the mix exercises drops";
}

TEST(PrefixReuseScheduler, PressureDropsRetainedHistoriesAndLosesNothing) {
  // 8 conversations of 4 turns over 2 histories: the retained histories are taken over and over.
  std::mt19937 rng(7);
  auto trace = conversations(rng, 8, 4);
  FakeEngineConfig e;
  e.histories = 2;
  e.max_seqs = 2;
  e.max_context_tokens = 1024;
  e.page_tokens = 8;
  e.pool_pages = 64;
  SchedulerConfig config;
  config.max_seqs = 2;
  config.step_tokens = 64;
  config.prefill_chunk_tokens = 32;
  config.stop_at_eos = false;
  const Comparison c = compare(trace, e, config);
  auto on = run_all(trace, e, config, true);
  const EngineCounters& k = on->engine->counters();
  std::printf("pressure: %llu retained, %llu dropped, %llu adopted, %llu tokens reused\n",
              static_cast<unsigned long long>(k.retained_kept), static_cast<unsigned long long>(k.retained_dropped),
              static_cast<unsigned long long>(k.prefix_adoptions), static_cast<unsigned long long>(k.prefix_reused_tokens));
  EXPECT_GT(k.retained_dropped, 0u);
  EXPECT_GT(k.prefix_adoptions, 0u);
  EXPECT_LE(k.retained_histories, e.histories);
  for (const RequestRecord& r : on->scheduler->requests()) {
    EXPECT_TRUE(r.state == RequestState::finished || r.state == RequestState::cancelled) << r.id << ": nothing is lost";
  }
  EXPECT_GT(c.reused, 0u);
}

// Retained histories never make admission wait: with every history retained, a stranger is
// admitted at once and the least recently used one is dropped.
TEST(PrefixReuseScheduler, RetainedHistoriesNeverBlockAdmission) {
  FakeEngineConfig e;
  e.histories = 3;
  e.max_seqs = 3;
  e.page_tokens = 4;
  e.prefix_reuse = true;
  FakeEngine engine(e);
  std::mt19937 rng(3);
  std::vector<std::vector<std::int32_t>> prompts;
  std::int32_t out[1];
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(bytes(rng, 12));
    const Admission a = engine.admit(prompts.back(), 64);
    ASSERT_EQ(a.outcome, AdmitOutcome::admitted);
    const BatchEntry b{a.context, prompts.back(), true};
    ASSERT_TRUE(engine.step({&b, 1}, out));
    engine.finish(a.context);
  }
  EXPECT_EQ(engine.counters().retained_histories, 3u);
  for (int i = 0; i < 3; ++i) {
    const auto stranger = bytes(rng, 9);
    const Admission a = engine.admit(stranger, 64);
    EXPECT_EQ(a.outcome, AdmitOutcome::admitted) << "a retained history never blocks admission";
    EXPECT_EQ(a.reused_tokens, 0u);
  }
  EXPECT_EQ(engine.counters().retained_dropped, 3u);
  EXPECT_EQ(engine.counters().retained_histories, 0u);
}

}  // namespace
}  // namespace activekv::serve
