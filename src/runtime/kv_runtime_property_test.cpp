// kv_runtime_property_test.cpp — random admit / step / finish / cancel sequences over many seeds.
//
// Each seed builds a runtime with a random device budget (between the floors
// the contexts need and all their pages), random page and tile sizes, and
// drives it with a random mix of operations: requests that are admitted or
// queued (more requests than histories), prefill chunks and decode steps over
// random subsets of the running contexts, finishes, cancels between steps and
// cancels in the middle of a step (deferred until its fences resolve). After
// every step:
//   - every output equals the reference attention (within reference_tolerance);
//   - every new row's host copy equals the row written;
//   - check(): pages conserved, floors and bursts kept, lease tables sound, no
//     device allocation after warm-up.
// In every other seed prefix reuse is on with device retention: finishing retains the history
// and its device pages (borrowed, reclaimed first when admissions and growth need pages,
// released when another context takes the history), so every sequence above also runs with
// device-resident retained pages in the pool.
// At the end every page and history comes back (retained device pages through release_retained(),
// the shutdown path). ACTIVEKV_RUNTIME_SEEDS sets the number of seeds (default 40).
#include "activekv/kv_runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "activekv/backend.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv {
namespace {

using runtime::ReferenceKv;

constexpr float reference_tolerance = 2e-5f;

struct Request {
  std::uint64_t id = 0;
  std::uint32_t tokens_max = 0;
  std::uint32_t reference = 0;  // ReferenceKv context
  ContextId handle;
  bool admitted = false;
  bool done = false;
  std::uint32_t length = 0;
};

std::uint32_t seeds_from_environment() {
  const char* text = std::getenv("ACTIVEKV_RUNTIME_SEEDS");
  const int n = text != nullptr ? std::atoi(text) : 0;
  return n > 0 ? static_cast<std::uint32_t>(n) : 40u;
}

struct Totals {
  std::uint64_t device_kept = 0, device_reclaimed_under_pressure = 0;
  std::uint64_t sparse_checked = 0;  // sparse decode outputs checked over the selected pages
  std::uint64_t sparse_pages_read = 0, sparse_pages_held = 0;
  // Sparse staging (docs/SPARSE.md "Staging"): pages not resident copied and read, by why; copied
  // unread; neither.
  std::uint64_t stage_selected = 0, stage_predicted = 0, stage_missed = 0, stage_unselected = 0, stage_skipped = 0;
  std::uint64_t steps = 0, queued = 0, admitted_later = 0, mid_step_cancels = 0, bytes_staged = 0, pages_staged = 0, passes = 0, promotions = 0;
};

// sparse: the runtime runs sparse attention (a budget drawn from the seed); every decode output
// is checked after the step against the reference over exactly the pages explain() names.
// tight (sparse only): the device pool holds little above the floors and measure mode is off, so
// most of the history is staged and the sparse steps stage selectively.
void run_seed(std::uint64_t seed, Totals& totals, bool sparse = false, bool tight = false) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {  // inclusive
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  Geometry g;
  g.dense_layers = uniform(1, 3);
  g.kv_heads = uniform(1, 2);
  g.head_dim = 8u << uniform(0, 1);
  g.dtype = uniform(0, 1) == 0 ? DType::f16 : DType::bf16;
  const std::uint32_t q_heads = g.kv_heads * uniform(1, 3);
  const std::uint32_t page_tokens = 2u << uniform(0, 2);         // 2, 4, 8
  const std::uint32_t tile_tokens = page_tokens * uniform(1, 4);
  const std::uint32_t histories = uniform(1, 3);
  const std::uint32_t max_context = 128;

  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = g;
  m.page_tokens = page_tokens;
  m.tile_tokens = tile_tokens;
  m.tiles = uniform(1, 3);
  m.max_context_tokens = max_context;
  m.max_seqs = histories;
  m.chunk_tokens = page_tokens * uniform(1, 2);
  m.host_pool_bytes = std::uint64_t{histories} * g.dense_layers * max_context * g.row_bytes();
  const std::uint64_t floor_pages = std::uint64_t{g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, page_tokens));
  const std::uint64_t all_pages = std::uint64_t{histories} * g.dense_layers * (max_context / page_tokens);
  std::uint64_t pages = floor_pages * histories + uniform(0, 40) * (all_pages - floor_pages * histories) / 100;
  if (tight) pages = floor_pages * histories + (seed % 8) * (all_pages - floor_pages * histories) / 100;
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * tile_tokens * g.row_bytes() +
                        pages * page_tokens * g.row_bytes();
  settings.q_heads = q_heads;
  settings.policy = uniform(0, 1) == 0 ? ResidencyPolicyKind::exact : ResidencyPolicyKind::hotness;
  settings.hotness_threshold = 0.02f;
  const bool retain = seed % 2 == 0;  // prefix reuse with device retention in every other seed
  settings.prefix_reuse = retain;
  settings.prefix_reuse_device = true;
  if (sparse) {
    const std::uint32_t mode = uniform(0, 2);
    settings.sparse.mode = mode == 0 ? SparseMode::pages : mode == 1 ? SparseMode::fraction : SparseMode::adaptive;
    settings.sparse.pages = uniform(3, 8);
    settings.sparse.fraction = 0.125f * static_cast<float>(uniform(1, 6));
    settings.sparse.floor_pages = uniform(3, 6);
    settings.sparse.recent_pages = uniform(1, 3);
    MemorySettings with_summaries = m;  // the summaries' own arena part, on top of the pages
    with_summaries.sparse_summaries = true;
    m.device_pool_bytes += summary_part_bytes(with_summaries);
    settings.sparse.measure = uniform(0, 1) == 1;
    const std::uint32_t score = uniform(0, 3);  // bound, moments, mixed, oracle
    settings.sparse.score = score == 0 ? SparseScore::bound
                            : score == 1 ? SparseScore::moments
                            : score == 2 ? SparseScore::mixed
                                         : SparseScore::oracle;
    // Staging: every page, predicted with misses, or after the query (by the seed, so the draws
    // above are the same sequence as before).
    settings.sparse.staging = seed % 3 == 0 ? SparseStaging::every : seed % 3 == 1 ? SparseStaging::predicted
                                                                                   : SparseStaging::selected;
    if (tight) settings.sparse.measure = false;
    // Layer budgets (fixed budgets only) in two seeds of three, by the moments in half of those;
    // from the seed, not drawn, so every other draw of a seed is what it was.
    settings.sparse.layer_budget = seed % 3 != 0;
    settings.sparse.layer_signal = (seed / 3) % 2 == 1 ? LayerSignal::moments : LayerSignal::captured;
    settings.sparse.per_head = seed % 4 == 1;  // per-query-head rankings in one seed of four
  }

  BackendOptions options;
  options.deterministic = true;
  options.seed = seed;
  auto backend = make_backend("host", options);
  ASSERT_TRUE(backend.ok()) << backend.error().describe();
  auto created = KvRuntime::create(settings, *backend.value());
  ASSERT_TRUE(created.ok()) << "seed " << seed << ": " << created.error().describe();
  KvRuntime& rt = *created.value();

  ReferenceKv reference(g, q_heads, page_tokens);
  std::vector<Request> requests;
  std::vector<AdmitResult> admitted(8);
  auto sync_admitted = [&]() {
    const std::uint32_t n = rt.take_admitted(admitted);
    for (std::uint32_t i = 0; i < n; ++i) {
      for (Request& r : requests) {
        if (r.id == admitted[i].request_id) {
          r.admitted = true;
          r.handle = admitted[i].handle;
          ++totals.admitted_later;
        }
      }
    }
  };
  // Finishing: with reuse on, the history is retained under token ids unique to the request (no
  // later prompt matches them, so nothing is adopted here: prefix_reuse_test covers adoption).
  std::vector<std::int32_t> ids;
  auto finish = [&](const Request& r) {
    if (!retain) {
      rt.finish(r.handle);
      return;
    }
    ids.resize(r.length);
    for (std::uint32_t t = 0; t < r.length; ++t) ids[t] = static_cast<std::int32_t>(r.id * 1000 + t);
    rt.finish_retaining(r.handle, ids);
  };
  const std::size_t kv = std::size_t{g.kv_heads} * g.head_dim;
  const std::size_t qe = std::size_t{q_heads} * g.head_dim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k, v, q, out, expected;
  std::vector<StepEntry> entries;
  std::vector<std::uint32_t> chosen;
  std::vector<std::vector<float>> step_q, step_out;  // sparse: each layer's q and out, checked after the step
  std::vector<std::uint32_t> pages_read;  // per page, the KV heads that read it

  for (std::uint32_t op = 0; op < 300; ++op) {
    const std::uint32_t dice = uniform(0, 99);
    std::vector<std::uint32_t> running;
    for (std::uint32_t i = 0; i < requests.size(); ++i) {
      if (requests[i].admitted && !requests[i].done) running.push_back(i);
    }
    if (dice < 8 && requests.size() < 12) {  // a new request
      Request r;
      r.id = requests.size() + 1;
      r.tokens_max = uniform(32, max_context);
      r.reference = reference.open();
      auto result = rt.open_context(r.id, r.tokens_max);
      ASSERT_TRUE(result.ok()) << result.error().describe();
      r.admitted = result->outcome == AdmitOutcome::admitted;
      totals.queued += r.admitted ? 0u : 1u;
      r.handle = result->handle;
      requests.push_back(r);
    } else if (dice < 11 && !running.empty()) {  // finish or cancel between steps
      Request& r = requests[running[uniform(0, static_cast<std::uint32_t>(running.size() - 1))]];
      if (dice < 10) {
        finish(r);
      } else {
        rt.cancel(r.handle);
      }
      r.done = true;
      sync_admitted();
    } else if (!running.empty()) {  // a step over a random subset
      entries.clear();
      chosen.clear();
      for (const std::uint32_t i : running) {
        Request& r = requests[i];
        if (r.length >= r.tokens_max || uniform(0, 3) == 0) continue;
        const std::uint32_t room = r.tokens_max - r.length;
        const std::uint32_t n = std::min(room, uniform(0, 1) == 0 ? 1u : uniform(1, m.chunk_tokens));
        entries.push_back(StepEntry{r.handle, n});
        chosen.push_back(i);
      }
      if (entries.empty()) continue;
      std::uint32_t total = 0;
      for (const auto& e : entries) total += e.tokens_new;
      const Status begun = rt.begin_step(entries);
      ASSERT_TRUE(begun.ok()) << "seed " << seed << " op " << op << ": " << begun.error().describe();
      const bool cancel_mid_step = uniform(0, 19) == 0;
      const std::uint32_t cancel_layer = uniform(0, g.dense_layers - 1);
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        k.resize(total * kv);
        v.resize(total * kv);
        q.resize(total * qe);
        out.assign(total * qe, 0.0f);
        for (auto& x : k) x = normal(rng);
        for (auto& x : v) x = normal(rng);
        for (auto& x : q) x = normal(rng);
        ASSERT_TRUE(rt.write_kv(l, k.data(), v.data()).ok());
        ASSERT_TRUE(rt.attend(l, q.data(), out.data()).ok());
        if (sparse) {
          step_q.resize(g.dense_layers);
          step_out.resize(g.dense_layers);
          step_q[l] = q;
          step_out[l] = out;
        }
        std::uint32_t row = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const Request& r = requests[chosen[e]];
          const std::uint32_t n = entries[e].tokens_new;
          reference.append(r.reference, l, k.data() + row * kv, v.data() + row * kv, n);
          if (sparse && n == 1) {  // checked after the step, over the selection
            row += n;
            continue;
          }
          expected.resize(n * qe);
          reference.attend(r.reference, l, q.data() + row * qe, n, r.length, expected.data());
          for (std::size_t i = 0; i < n * qe; ++i) {
            ASSERT_NEAR(out[row * qe + i], expected[i], reference_tolerance) << "seed " << seed << " op " << op;
          }
          row += n;
        }
        if (cancel_mid_step && l == cancel_layer) rt.cancel(entries[0].context);  // deferred to end_step
      }
      ASSERT_TRUE(rt.end_step().ok());
      if (sparse) {
        const std::uint32_t all_heads = (1u << g.kv_heads) - 1u;  // every KV head reads the page
        std::uint32_t row = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const Request& r = requests[chosen[e]];
          const std::uint32_t n = entries[e].tokens_new;
          const bool cancelled = cancel_mid_step && e == 0;  // gone: its selection with it
          if (n == 1 && !cancelled) {
            const Explanation ex = rt.explain(r.handle);
            for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
              pages_read.assign((r.length + 1 + page_tokens - 1) / page_tokens, 0);
              for (const SparsePick& pick : ex.sparse_picks) {
                if (pick.layer != l) continue;
                ASSERT_LT(pick.logical, pages_read.size()) << "seed " << seed << " op " << op;
                pages_read[pick.logical] |= pick.group == UINT32_MAX ? all_heads : 1u << pick.group;
              }
              ASSERT_EQ(pages_read.front(), all_heads) << "the sink page; seed " << seed << " op " << op;
              ASSERT_EQ(pages_read.back(), all_heads) << "the newest page; seed " << seed << " op " << op;
              expected.resize(qe);
              reference.attend(r.reference, l, step_q[l].data() + row * qe, 1, r.length, expected.data(), pages_read);
              for (std::size_t i = 0; i < qe; ++i) {
                ASSERT_NEAR(step_out[l][row * qe + i], expected[i], reference_tolerance)
                    << "sparse, seed " << seed << " op " << op << " layer " << l;
              }
              ++totals.sparse_checked;
            }
          }
          row += n;
        }
      }
      ++totals.steps;
      totals.mid_step_cancels += cancel_mid_step ? 1u : 0u;
      for (std::size_t e = 0; e < entries.size(); ++e) {
        Request& r = requests[chosen[e]];
        if (!(cancel_mid_step && e == 0)) {
          for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
            for (std::uint32_t t = r.length; t < r.length + entries[e].tokens_new; ++t) {
              const auto host = rt.host_row(r.handle, l, t);
              ASSERT_EQ(std::memcmp(host.data(), reference.encoded_row(r.reference, l, t).data(), host.size()), 0)
                  << "seed " << seed << " op " << op;
            }
          }
        }
        r.length += entries[e].tokens_new;
      }
      if (cancel_mid_step) {
        EXPECT_FALSE(rt.running(entries[0].context)) << "a cancel during a step takes effect at its end";
        requests[chosen[0]].done = true;
        sync_admitted();
      }
      // A context that reached its length finishes (its whole history checked first).
      for (const std::uint32_t i : chosen) {
        Request& r = requests[i];
        if (r.done || r.length < r.tokens_max) continue;
        for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
          for (std::uint32_t t = 0; t < r.length; ++t) {
            ASSERT_EQ(std::memcmp(rt.host_row(r.handle, l, t).data(), reference.encoded_row(r.reference, l, t).data(),
                                  g.row_bytes()), 0);
          }
        }
        finish(r);
        r.done = true;
        sync_admitted();
      }
    }
    const char* broken = rt.check();
    ASSERT_EQ(broken, nullptr) << "seed " << seed << " op " << op << ": " << broken;
  }
  for (Request& r : requests) {
    if (r.admitted && !r.done) finish(r);
    r.done = true;
    sync_admitted();
  }
  // Requests still queued were admitted as others finished; finish those too.
  for (Request& r : requests) {
    if (r.admitted && rt.running(r.handle)) finish(r);
  }
  ASSERT_EQ(rt.check(), nullptr) << "seed " << seed;
  const KvCounters& c = rt.counters();
  totals.device_kept += c.retained_device_pages_kept;
  totals.device_reclaimed_under_pressure += c.retained_device_pages_reclaimed;
  // Shutdown: retained device pages go back; then every page is free.
  rt.release_retained();
  EXPECT_EQ(rt.check(), nullptr) << "seed " << seed;
  EXPECT_EQ(c.retained_device_pages_kept, c.retained_device_pages_adopted + c.retained_device_pages_reclaimed)
      << "seed " << seed << ": every retained device page was handed over or released";
  if (!retain) {
    EXPECT_EQ(c.retained_device_pages_kept, 0u);
  }
  EXPECT_EQ(c.heap_allocations_in_steps, 0u) << "seed " << seed << ": invariant 7";
  totals.bytes_staged += rt.counters().bytes_staged;
  totals.pages_staged += rt.counters().pages_staged;
  totals.passes += rt.counters().passes;
  totals.promotions += rt.counters().promotions;
  totals.sparse_pages_read += rt.sparse_stats().pages_read;
  totals.sparse_pages_held += rt.sparse_stats().pages_context;
  if (sparse) {
    // Every page not resident was copied and read, copied unread, or neither; the bytes staged are
    // exactly the pages copied; a selective staging copies no page it cannot show a reason for.
    const KvCounters& kc = rt.counters();
    const std::uint64_t copied = kc.pages_stage_selected + kc.pages_stage_predicted + kc.pages_stage_missed +
                                 kc.pages_stage_unselected;
    EXPECT_EQ(copied + kc.pages_stage_skipped, kc.pages_staged) << "seed " << seed;
    EXPECT_EQ(kc.bytes_staged, copied * rt.plan().arena.page_bytes) << "seed " << seed;
    if (settings.sparse.staging == SparseStaging::every || settings.sparse.measure) {
      EXPECT_EQ(kc.pages_stage_skipped + kc.pages_stage_missed + kc.pages_stage_predicted, 0u) << "seed " << seed;
    }
    if (settings.sparse.staging == SparseStaging::selected) {
      EXPECT_EQ(kc.pages_stage_missed + kc.pages_stage_predicted, 0u) << "seed " << seed << ": nothing before the query";
    }
    totals.stage_selected += kc.pages_stage_selected;
    totals.stage_predicted += kc.pages_stage_predicted;
    totals.stage_missed += kc.pages_stage_missed;
    totals.stage_unselected += kc.pages_stage_unselected;
    totals.stage_skipped += kc.pages_stage_skipped;
  }
  EXPECT_EQ(rt.counters().heap_allocations_in_steps, 0u) << "seed " << seed;
  EXPECT_EQ(rt.pages_free(), rt.pages_total()) << "seed " << seed;
  EXPECT_EQ(rt.histories_free(), rt.plan().host.history_slots) << "seed " << seed;
  EXPECT_EQ(rt.counters().device_allocations_after_warmup, 0u);
  EXPECT_EQ(rt.counters().failed_steps, 0u);
}

TEST(KvRuntimeProperty, RandomOperationSequencesKeepTheInvariants) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const std::uint32_t seeds = seeds_from_environment();
  Totals totals;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    run_seed(seed, totals);
    if (HasFatalFailure()) return;
  }
  std::printf("%u seeds: %llu steps, %llu requests queued (%llu admitted later), %llu cancels mid-step, "
              "%llu bytes staged (%llu pages, %llu passes), %llu promotions\n",
              seeds, static_cast<unsigned long long>(totals.steps), static_cast<unsigned long long>(totals.queued),
              static_cast<unsigned long long>(totals.admitted_later),
              static_cast<unsigned long long>(totals.mid_step_cancels),
              static_cast<unsigned long long>(totals.bytes_staged), static_cast<unsigned long long>(totals.pages_staged),
              static_cast<unsigned long long>(totals.passes), static_cast<unsigned long long>(totals.promotions));
  // The mix must have exercised what it claims to.
  EXPECT_GT(totals.steps, 100u * seeds / 4);
  EXPECT_GT(totals.queued, 0u);
  EXPECT_GT(totals.admitted_later, 0u);
  EXPECT_GT(totals.mid_step_cancels, 0u);
  EXPECT_GT(totals.bytes_staged, 0u);
  EXPECT_GT(totals.promotions, 0u);
  std::printf("device retention (every other seed): %llu device pages retained, %llu reclaimed before shutdown\n",
              static_cast<unsigned long long>(totals.device_kept),
              static_cast<unsigned long long>(totals.device_reclaimed_under_pressure));
  EXPECT_GT(totals.device_kept, 0u);
  EXPECT_GT(totals.device_reclaimed_under_pressure, 0u) << "retained device pages gave way under pressure";
}

// The same sequences with sparse attention (fixed, fractional and adaptive budgets, measure mode
// in half the seeds): the invariants hold and every decode output is the reference's over the
// pages the selection named (explain).
TEST(KvRuntimeProperty, SparseStepsKeepTheInvariants) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const std::uint32_t seeds = std::max(1u, seeds_from_environment() / 2);
  Totals totals;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    run_seed(seed + 100000, totals, true);
    if (HasFatalFailure()) return;
  }
  // And as many with the pool near the floors: sparse steps staging only what they read.
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    run_seed(seed + 200000, totals, true, true);
    if (HasFatalFailure()) return;
  }
  std::printf("%u sparse seeds (half of them with a tight pool): %llu steps, %llu sparse outputs checked (%llu of %llu pages read), %llu pages staged\n",
              2 * seeds, static_cast<unsigned long long>(totals.steps), static_cast<unsigned long long>(totals.sparse_checked),
              static_cast<unsigned long long>(totals.sparse_pages_read),
              static_cast<unsigned long long>(totals.sparse_pages_held),
              static_cast<unsigned long long>(totals.pages_staged));
  EXPECT_LT(totals.sparse_pages_read, totals.sparse_pages_held) << "the selections must leave pages out";
  EXPECT_GT(totals.sparse_checked, 0u);
  EXPECT_GT(totals.pages_staged, 0u);
  std::printf("sparse staging: pages not resident copied and read %llu (after the query %llu, predicted %llu, missed "
              "%llu), copied unread %llu, not copied %llu\n",
              static_cast<unsigned long long>(totals.stage_selected + totals.stage_predicted + totals.stage_missed),
              static_cast<unsigned long long>(totals.stage_selected),
              static_cast<unsigned long long>(totals.stage_predicted),
              static_cast<unsigned long long>(totals.stage_missed),
              static_cast<unsigned long long>(totals.stage_unselected),
              static_cast<unsigned long long>(totals.stage_skipped));
  EXPECT_GT(totals.stage_predicted, 0u);
  EXPECT_GT(totals.stage_missed, 0u) << "misses were copied in attend and the outputs still checked";
  EXPECT_GT(totals.stage_skipped, 0u);
}

}  // namespace
}  // namespace activekv
