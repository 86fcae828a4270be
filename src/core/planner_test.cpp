// planner_test.cpp — the step plan is executable and right: an emulated device (byte arrays for
// the arena and the host pool) carries out every plan — new rows into tail pages, staging copies
// pass by pass, promotions, write-backs — and after each step every page of every scheduled
// context's history is found, byte for byte, where the plan says it is (pool page or tile).
#include "activekv/planner.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "activekv/explain.hpp"

namespace activekv {
namespace {

std::uint8_t expected_byte(std::uint64_t request, std::uint32_t layer, std::uint32_t token, std::uint32_t i) {
  std::uint64_t x = request * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(layer) << 40) ^
                    (static_cast<std::uint64_t>(token) << 8) ^ i;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint8_t>(x);
}

struct Emulator {
  const MemoryPlan& plan;
  const BudgetManager& budgets;
  std::vector<std::uint8_t> host;
  std::vector<std::uint8_t> device;

  Emulator(const MemoryPlan& p, const BudgetManager& b)
      : plan(p), budgets(b), host(p.host.used_bytes, 0), device(p.arena.used_bytes, 0) {}

  void fill_row(std::uint8_t* at, std::uint64_t request, std::uint32_t layer, std::uint32_t token) {
    for (std::uint32_t i = 0; i < plan.host.row_bytes; ++i) at[i] = expected_byte(request, layer, token, i);
  }
  // Rows [first_token, end_token) of (request, layer) at `at`; returns false on a mismatch.
  bool rows_match(const std::uint8_t* at, std::uint64_t request, std::uint32_t layer, std::uint32_t first_token,
                  std::uint32_t end_token) const {
    for (std::uint32_t t = first_token; t < end_token; ++t) {
      for (std::uint32_t i = 0; i < plan.host.row_bytes; ++i) {
        if (at[(t - first_token) * plan.host.row_bytes + i] != expected_byte(request, layer, t, i)) return false;
      }
    }
    return true;
  }

  // Carries out one step's plan; returns nullptr or what was wrong.
  const char* execute(const StepPlan& p) {
    const std::uint32_t P = plan.arena.page_tokens;
    const std::uint64_t row = plan.host.row_bytes;
    // 1. The new tokens' rows go into their tail pages on the device.
    std::uint32_t rows_written = 0;
    for (const LayerPlan& lp : p.layers) {
      std::uint32_t next = lp.length_before;  // the regions cover the new rows in order, once each
      for (std::uint32_t i = 0; i < p.write_back_count(lp); ++i) {
        const WriteBack w = p.write_back(lp, i);
        if (w.slot != lp.slot || w.layer != lp.layer) return "a write-back names another context or layer";
        if (w.logical * P + w.row_first != next) return "write-backs skip or repeat a new row";
        if (w.rows == 0 || w.row_first + w.rows > P) return "a write-back's rows leave its page";
        if (w.bytes != w.rows * row) return "a write-back's byte count disagrees with its rows";
        if (w.host_offset != plan.host.row_offset(w.slot, w.layer, next)) return "a write-back's host offset is wrong";
        if (w.device_offset != plan.arena.page_offset(w.pool_page) + w.row_first * row) return "a write-back's device offset is wrong";
        const PageLocation at = p.locate(lp, w.logical);
        if (at.kind != PageLocation::Kind::pool || at.pool_page != w.pool_page) return "a write-back's page is not resident there";
        const std::uint64_t request = budgets.context(w.slot).request_id;
        for (std::uint32_t r = 0; r < w.rows; ++r) {
          fill_row(&device[w.device_offset + r * row], request, w.layer, next + r);
        }
        next += w.rows;
        rows_written += w.rows;
      }
      if (next != lp.length_tokens) return "write-backs do not reach the layer's new length";
    }
    if (static_cast<std::uint64_t>(rows_written) * row != p.counters.bytes_written_back) {
      return "the written-back byte counter disagrees with the write-backs";
    }
    // 2. Passes: copy into the tiles, check every staged page (attention reads it now), promote.
    for (std::uint32_t k = 0; k < p.passes.size(); ++k) {
      const StagePass& pass = p.passes[k];
      for (std::uint32_t c = 0; c < pass.copy_count; ++c) {
        const StageCopy& copy = p.copies[pass.copy_first + c];
        if (copy.pass != k) return "a copy is listed under another pass";
        if (copy.host_offset != plan.host.row_offset(copy.slot, copy.layer, copy.logical_first * P)) return "a copy's host offset is wrong";
        std::memcpy(&device[copy.device_offset], &host[copy.host_offset], copy.bytes);
      }
      for (std::uint32_t c = 0; c < pass.copy_count; ++c) {
        const StageCopy& copy = p.copies[pass.copy_first + c];
        const std::uint64_t request = budgets.context(copy.slot).request_id;
        if (!rows_match(&device[copy.device_offset], request, copy.layer, copy.logical_first * P,
                        (copy.logical_first + copy.pages) * P)) {
          return "a staged page's bytes in the tile differ from its history";
        }
      }
      for (const Promotion& pr : p.promotions) {
        if (pr.pass != k) continue;
        std::memcpy(&device[pr.device_offset_to], &device[pr.device_offset_from], plan.arena.page_bytes);
      }
    }
    // 3. Every page of every layer plan is where the plan says, with the right bytes.
    std::vector<int> pool_use(plan.arena.pages, 0);
    for (const LayerPlan& lp : p.layers) {
      const std::uint64_t request = budgets.context(lp.slot).request_id;
      const std::uint32_t pages = (lp.length_tokens + P - 1) / P;
      for (std::uint32_t q = 0; q < pages; ++q) {
        const PageLocation at = p.locate(lp, q);
        const std::uint32_t end = std::min(lp.length_tokens, (q + 1) * P);
        if (at.kind == PageLocation::Kind::absent) return "a page of history is neither resident nor staged";
        if (at.kind == PageLocation::Kind::pool) {
          if (++pool_use[at.pool_page] > 1) return "one pool page serves two pages in one step";
          if (!rows_match(&device[at.device_offset], request, lp.layer, q * P, end)) return "a resident page's bytes differ";
        }
      }
    }
    // 4. Write-backs: only the new rows go to the host.
    for (const LayerPlan& lp : p.layers) {
      for (std::uint32_t i = 0; i < p.write_back_count(lp); ++i) {
        const WriteBack w = p.write_back(lp, i);
        std::memcpy(&host[w.host_offset], &device[w.device_offset], w.bytes);
      }
    }
    // 5. The host copy is authoritative: every row of every scheduled context is there.
    for (const ScheduledContext& s : p.scheduled) {
      const ContextState& c = budgets.context(s.context.slot);
      for (std::uint32_t l = 0; l < plan.geometry.dense_layers; ++l) {
        if (!rows_match(&host[plan.host.row_offset(s.context.slot, l, 0)], c.request_id, l, 0, c.length_tokens)) {
          return "the host copy lost a row";
        }
      }
    }
    return nullptr;
  }
};

MemorySettings small(std::uint32_t pages, std::uint32_t histories) {
  MemorySettings s;
  s.geometry = Geometry{2, 0, 1, 4, DType::f16, 0};  // 16-byte rows
  s.page_tokens = 4;
  s.tile_tokens = 8;
  s.tiles = 2;
  s.max_context_tokens = 96;
  s.chunk_tokens = 6;
  s.max_seqs = histories;
  s.host_pool_bytes = static_cast<std::uint64_t>(histories) * 2 * 96 * 16;
  s.device_pool_bytes = 4096 + static_cast<std::uint64_t>(pages) * 64;
  s.promoted_pages_per_layer = 4;
  s.queue_max = 16;
  return s;
}

struct Rig {
  explicit Rig(const MemorySettings& s, bool hot = false)
      : plan(make_memory_plan(s).value()), arena(plan.arena), log(8192), budgets(plan, arena, log),
        hotness(0.5f, 32), planner(budgets, hot ? static_cast<ResidencyPolicy&>(hotness) : exact), emulator(plan, budgets) {}
  MemoryPlan plan;
  Arena arena;
  DecisionLog log;
  BudgetManager budgets;
  ExactPolicy exact;
  HotnessPolicy hotness;
  ResidencyPlanner planner;
  Emulator emulator;

  const char* step(std::span<const ScheduledContext> s) {
    if (planner.plan_step(s) != PlanOutcome::planned) return "refused";
    const char* broken = emulator.execute(planner.plan());
    planner.step_completed();
    return broken != nullptr ? broken : budgets.check();
  }
};

TEST(Planner, ARetiredTileIsNeverPlannedIntoAgain) {
  MemorySettings s = small(8, 1);  // exactly one floor: the history streams through the tiles
  s.tiles = 3;
  Rig rig(s);
  const ContextHandle a = rig.budgets.submit(1, 96).handle;
  auto run = [&](std::uint32_t steps, std::vector<bool> retired) {
    for (std::uint32_t i = 0; i < steps; ++i) {
      const ScheduledContext step{a, 6};
      const char* broken = rig.step({&step, 1});
      if (broken != nullptr) return broken;
      for (const StageCopy& copy : rig.planner.plan().copies) {
        if (retired[copy.tile_slot]) return "a copy was planned into a retired tile";
      }
      for (const StagePass& pass : rig.planner.plan().passes) {
        if (pass.tiles_used > rig.planner.tiles_usable()) return "a pass uses more tiles than are in rotation";
      }
    }
    return static_cast<const char*>(nullptr);
  };
  ASSERT_EQ(run(5, {false, false, false}), nullptr);
  EXPECT_EQ(rig.planner.tiles_usable(), 3u);
  EXPECT_TRUE(rig.planner.retire_tile(1));
  EXPECT_FALSE(rig.planner.retire_tile(1));  // retired once, for good
  EXPECT_EQ(rig.planner.tiles_usable(), 2u);
  ASSERT_EQ(run(4, {false, true, false}), nullptr);
  EXPECT_GT(rig.planner.plan().copies.size(), 0u) << "the steps must stage to test anything";
  EXPECT_TRUE(rig.planner.retire_tile(0));
  ASSERT_EQ(run(2, {true, true, false}), nullptr);  // one tile left: one tile per pass
  for (const StageCopy& copy : rig.planner.plan().copies) EXPECT_EQ(copy.tile_slot, 2u);
  // No tile left: every step is refused by name, and nothing changes.
  EXPECT_TRUE(rig.planner.retire_tile(2));
  const std::uint32_t length = rig.budgets.context(a.slot).length_tokens;
  const ScheduledContext step{a, 1};
  EXPECT_EQ(rig.planner.plan_step({&step, 1}), PlanOutcome::no_staging_tiles);
  EXPECT_NE(std::string(plan_outcome_text(PlanOutcome::no_staging_tiles)).find("quarantined"), std::string::npos);
  EXPECT_EQ(rig.budgets.context(a.slot).length_tokens, length);
  EXPECT_EQ(rig.budgets.check(), nullptr);
}

TEST(Planner, AtTheFloorTheRunSlidesAndHistoryStreamsInPasses) {
  MemorySettings s = small(8, 1);  // exactly one floor: 2 layers × (1 sink + 3 tail pages)
  Rig rig(s);
  const ContextHandle c = rig.budgets.submit(7, 96).handle;
  for (int i = 0; i < 90; ++i) {
    const ScheduledContext one{c, 1};
    ASSERT_EQ(rig.step({&one, 1}), nullptr) << "step " << i;
  }
  const StepPlan& p = rig.planner.plan();
  ASSERT_EQ(p.layers.size(), 2u);
  for (const LayerPlan& lp : p.layers) {
    EXPECT_EQ(lp.pages_resident(), 4u);  // sink + 3: the layer's cap
    EXPECT_EQ(lp.pages_resident() + lp.pages_staged, (90u + 3) / 4);
  }
  // 19 staged pages per layer through 2 tiles of 2 pages: ceil(19 / 4) = 5 passes per layer.
  EXPECT_EQ(p.passes.size(), 10u);
  EXPECT_EQ(p.counters.pages_staged, 38u);
  EXPECT_EQ(p.counters.bytes_written_back, 2u * 16);
  EXPECT_GT(rig.budgets.counters().pages_evicted, 0u);
}

TEST(Planner, ExactPolicyGrowsTheRunUntilNothingIsStaged) {
  Rig rig(small(64, 2));
  // B borrows most of the pool first, so A's prefill runs on a small budget and its history is staged.
  const Budget lean{8, 8, 48};
  const ContextHandle a = rig.budgets.submit(1, 96, &lean).handle;
  const ContextHandle b = rig.budgets.submit(2, 96, &lean).handle;
  EXPECT_EQ(rig.budgets.grow(b, 40), 40u);
  const ScheduledContext prefill{a, 6};
  for (int i = 0; i < 10; ++i) ASSERT_EQ(rig.step({&prefill, 1}), nullptr);
  EXPECT_GT(rig.planner.plan().counters.pages_staged, 0u);
  EXPECT_TRUE(rig.planner.plan().promotions.empty());
  rig.budgets.finish(b);  // its pages are free: A may borrow them
  std::uint64_t promoted = 0;
  for (int i = 0; i < 8; ++i) {
    const ScheduledContext one{a, 1};
    ASSERT_EQ(rig.step({&one, 1}), nullptr);
    promoted += rig.planner.plan().promotions.size();
    for (const Promotion& p : rig.planner.plan().promotions) EXPECT_EQ(p.reason, Reason::extend_run);
  }
  EXPECT_GT(promoted, 0u);
  EXPECT_EQ(rig.planner.plan().counters.pages_staged, 0u);  // 68 tokens = 17 pages per layer, all resident
  EXPECT_EQ(rig.planner.plan().copies.size(), 0u);
  EXPECT_EQ(rig.budgets.layer(a.slot, 0).run_first, 1u);  // one run from page 1 to the tail
}

TEST(Planner, HotPagesArePromotedAndStayUntilReclaimed) {
  Rig rig(small(40, 2), /*hot=*/true);
  const Budget a_budget{8, 12, 24};
  const Budget b_budget{8, 8, 24};
  const ContextHandle a = rig.budgets.submit(1, 96, &a_budget).handle;
  const ContextHandle b = rig.budgets.submit(2, 96, &b_budget).handle;
  EXPECT_EQ(rig.budgets.grow(b, 16), 16u);
  const ScheduledContext prefill{a, 6};
  for (int i = 0; i < 12; ++i) ASSERT_EQ(rig.step({&prefill, 1}), nullptr);  // 72 tokens, 18 pages per layer
  EXPECT_EQ(rig.budgets.context(a.slot).pages_held(), 16u);  // target 12 by right + 4 borrowed
  rig.budgets.finish(b);
  const PageScore hot{a.slot, 1, 5, 0.9f};
  const PageScore cold{a.slot, 1, 7, 0.1f};
  const PageScore both[] = {hot, cold};
  rig.hotness.observe(both);
  EXPECT_EQ(rig.hotness.candidates(), 1u);
  const ScheduledContext one{a, 1};
  ASSERT_EQ(rig.step({&one, 1}), nullptr);
  ASSERT_EQ(rig.planner.plan().promotions.size(), 1u);
  EXPECT_EQ(rig.planner.plan().promotions[0].reason, Reason::hot_page);
  ASSERT_EQ(rig.budgets.promoted_logical(a.slot, 1).size(), 1u);
  EXPECT_EQ(rig.budgets.promoted_logical(a.slot, 1)[0], 5u);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(rig.step({&one, 1}), nullptr);
  EXPECT_EQ(rig.budgets.promoted_logical(a.slot, 1).size(), 1u);  // it stays while the run moves on
  const Explanation e = explain(rig.budgets, a, rig.planner.step());
  bool listed = false;
  for (const ResidentRun& r : e.runs) listed = listed || (r.layer == 1 && r.logical_first == 5 && r.pages == 1);
  EXPECT_TRUE(listed);
  EXPECT_NE(explanation_text(e).find("promoted"), std::string::npos);
  EXPECT_NE(explanation_json(e).find("\"resident\""), std::string::npos);
  // Reclamation takes promoted pages first (after reserved ones).
  rig.budgets.reclaim(64, UINT32_MAX, /*down_to_floor=*/true);
  EXPECT_EQ(rig.budgets.promoted_logical(a.slot, 1).size(), 0u);
  EXPECT_EQ(rig.budgets.context(a.slot).pages_held(), 8u);  // exactly its floor
  EXPECT_EQ(rig.budgets.check(), nullptr);
}

TEST(Planner, RefusesStepsThatCannotBePlannedAndChangesNothing) {
  Rig rig(small(64, 2));
  const ContextHandle c = rig.budgets.submit(1, 10).handle;
  const ScheduledContext too_big{c, 7};
  EXPECT_EQ(rig.planner.plan_step({&too_big, 1}), PlanOutcome::chunk_too_large);
  const ScheduledContext zero{c, 0};
  EXPECT_EQ(rig.planner.plan_step({&zero, 1}), PlanOutcome::chunk_too_large);
  const ScheduledContext twice[] = {{c, 1}, {c, 1}};
  EXPECT_EQ(rig.planner.plan_step(twice), PlanOutcome::duplicate_context);
  const ScheduledContext six{c, 6};
  ASSERT_EQ(rig.step({&six, 1}), nullptr);
  const ScheduledContext five{c, 5};
  EXPECT_EQ(rig.planner.plan_step({&five, 1}), PlanOutcome::beyond_tokens_max);  // 6 + 5 > 10
  EXPECT_EQ(rig.budgets.context(c.slot).length_tokens, 6u);
  EXPECT_EQ(rig.planner.step(), 1u);
}

TEST(Planner, ExplainListsPagesWithReasonsAndTheLastStepsDecisions) {
  Rig rig(small(8, 1));
  const ContextHandle c = rig.budgets.submit(42, 96).handle;
  const ScheduledContext one{c, 1};
  for (int i = 0; i < 17; ++i) ASSERT_EQ(rig.step({&one, 1}), nullptr);  // token 16 opens page 4: the run slides
  const Explanation e = explain(rig.budgets, c, rig.planner.step());
  EXPECT_EQ(e.request_id, 42u);
  EXPECT_EQ(e.length_tokens, 17u);
  bool evicted = false;
  for (const Decision& d : e.decisions) evicted = evicted || (d.kind == DecisionKind::evict && d.reason == Reason::run_slides);
  EXPECT_TRUE(evicted);
  const std::string text = explanation_text(e);
  EXPECT_NE(text.find("sink page"), std::string::npos) << text;
  EXPECT_NE(text.find("tail page"), std::string::npos) << text;
  EXPECT_NE(text.find("the run's oldest page gives way"), std::string::npos) << text;
}

// Random schedules over many seeds: several contexts, prefill chunks and decode, finishes, both
// policies, random budgets, quarantined pages. The emulated device checks every byte after every step.
TEST(PlannerProperty, RandomSchedulesExecuteExactlyOnAnEmulatedDevice) {
  std::uint64_t quarantined = 0, cancelled = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    MemorySettings s = small(8 + static_cast<std::uint32_t>(rng() % 40), 1 + static_cast<std::uint32_t>(rng() % 4));
    s.tile_tokens = 4 * (1 + static_cast<std::uint32_t>(rng() % 4));
    s.tiles = 1 + static_cast<std::uint32_t>(rng() % 3);
    Rig rig(s, rng() % 2 == 0);
    std::vector<ContextHandle> live;
    std::vector<ScheduledContext> schedule;
    std::vector<PageScore> scores;
    AdmitResult admitted[32];
    std::uint64_t request = 1;
    std::vector<bool> retired_tiles(rig.plan.arena.tiles, false);
    for (int op = 0; op < 120; ++op) {
      if (rng() % 6 == 0) {
        const AdmitResult a = rig.budgets.submit(request++, 8 + static_cast<std::uint32_t>(rng() % 89));
        if (a.outcome == AdmitOutcome::admitted) live.push_back(a.handle);
      }
      const std::uint32_t n = rig.budgets.take_admitted(admitted);
      for (std::uint32_t i = 0; i < n; ++i) live.push_back(admitted[i].handle);
      schedule.clear();
      for (std::size_t i = 0; i < live.size();) {
        const ContextState& c = rig.budgets.context(live[i].slot);
        if (c.length_tokens == c.tokens_max) {
          rig.budgets.finish(live[i]);
          rig.planner.policy().forget(live[i].slot);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        const std::uint32_t room = std::min(6u, c.tokens_max - c.length_tokens);
        if (rng() % 4 != 0) schedule.push_back({live[i], rng() % 3 == 0 ? 1 + static_cast<std::uint32_t>(rng() % room) : 1});
        ++i;
      }
      if (rng() % 10 == 0 && !live.empty()) rig.budgets.grow(live[rng() % live.size()], rng() % 16);
      // Now and then a tile leaves the rotation (its lease was quarantined); one always stays.
      if (rng() % 40 == 0 && rig.planner.tiles_usable() > 1) {
        const auto tile = static_cast<std::uint32_t>(rng() % rig.plan.arena.tiles);
        if (rig.planner.retire_tile(tile)) retired_tiles[tile] = true;
      }
      const char* broken = rig.step(schedule);
      ASSERT_EQ(broken, nullptr) << "seed " << seed << " op " << op;
      for (const StageCopy& copy : rig.planner.plan().copies) {
        ASSERT_FALSE(retired_tiles[copy.tile_slot]) << "seed " << seed << " op " << op << ": a retired tile was planned into";
      }
      scores.clear();
      for (const StageCopy& copy : rig.planner.plan().copies) {
        scores.push_back({copy.slot, copy.layer, copy.logical_first + static_cast<std::uint32_t>(rng() % copy.pages),
                          static_cast<float>(rng() % 100) / 100.0f});
      }
      rig.planner.policy().observe(scores);
      // A failed fence now and then: quarantine one resident page of a live context. A tail page
      // cannot leave its table: the context is cancelled, as a runtime would.
      if (rng() % 8 == 0 && !live.empty()) {
        const std::size_t i = rng() % live.size();
        const std::uint32_t slot = live[i].slot;
        const std::uint32_t l = static_cast<std::uint32_t>(rng() % rig.plan.geometry.dense_layers);
        const LayerResidency& r = rig.budgets.layer(slot, l);
        std::uint32_t victim = page_none;
        const auto which = rng() % 3;
        if (which == 0) victim = r.sink_page;
        if (which == 1 && r.run_count > 0) victim = rig.budgets.run_page(slot, l, static_cast<std::uint32_t>(rng() % r.run_count));
        if (which == 2 && r.promoted_count > 0) victim = rig.budgets.promoted_pages(slot, l)[0];
        if (victim != page_none) {
          ++quarantined;
          if (!rig.budgets.quarantine(rig.arena.pages().id(victim))) {
            ++cancelled;
            rig.budgets.cancel(live[i]);
            rig.planner.policy().forget(slot);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          }
          ASSERT_EQ(rig.budgets.check(), nullptr) << "seed " << seed << " op " << op;
          const PagePool& pool = rig.arena.pages();
          ASSERT_EQ(pool.pages_free() + pool.pages_owned() + pool.pages_staging() + pool.pages_quarantined(),
                    pool.pages_total());
        }
      }
    }
  }
  EXPECT_GT(quarantined, 100u);
  EXPECT_GT(cancelled, 10u);
  EXPECT_GT(quarantined, cancelled);  // most quarantines re-stage the page and the context runs on
}

}  // namespace
}  // namespace activekv
