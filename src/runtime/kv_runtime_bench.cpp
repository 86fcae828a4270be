// kv_runtime_bench.cpp — what a decode step costs the runtime itself, against the attention it runs.
//
// For the smollm2-135m geometry (30 dense layers, 3 KV heads × 64, f16, 9
// query heads) it lands a prompt of 2K or 8K tokens (attend_none: the rows
// only), then times decode steps with the device pool holding 100% or 25% of
// the context's pages, on the threaded host backend. Per step it reports the
// medians of:
//   step      wall time inside the runtime's step calls (begin_step .. end_step)
//   plan      the core's planner
//   attention the host waiting for the paged kernels (the kernel's own time)
//   copies    the host waiting for staging / promotion / upload / write-back fences
//   issue     step − plan − attention − copies: encoding rows, page tables,
//             enqueueing, leases and tickets — the runtime's own overhead
// and the heap allocations inside the step calls (must be 0).
//
//   activekv_runtime_bench [--steps N] [--batch B]
//   activekv_runtime_bench --sparse [--steps N] [--only exact|group|list] [--threads T]   sparse attention
//       (docs/SPARSE.md): decode at an 8K context, exact and reading 1/8 of the pages (fixed
//       fraction), in the same run; the step and attention medians and their ratios. The runtime
//       borrows a pool of T threads (default 2, the engine's default; 1: none) for the selection's
//       bound, as it borrows the engine's.
//   activekv_runtime_bench --sparse-staging [--pool F] [--backend host|opencl] [--context N] [--steps N]
//                          [--only exact|every|predicted|selected]
//       sparse attention with a device pool holding F (default 0.25) of the context's pages, so
//       the rest is staged through the tiles (docs/SPARSE.md "Staging"): exact, and 1/8 of the
//       pages staging every page, the predicted pages (with misses) and the selected pages only,
//       in the same run, once with the same query every step and once with a fresh random query
//       every step (the prediction's worst case); bytes staged per step, step wall and CPU time.
//   activekv_runtime_bench --bounds   the sparse selection's bound alone: one decode step's page
//       bounds at 8K (30 layers × 3 KV heads × 513 pages, 3 query heads each) from the 16-bit
//       summaries, portable and vectorised, the best of 50 in thread CPU time
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/thread_pool.hpp"
#include "runtime/sparse_selection.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

struct Sample {
  double step_us, plan_us, attention_us, copies_us, issue_us;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Medians {
  double step_us = 0, attention_us = 0, pages_read = 0, pages_held = 0, cpu_us = 0;
  // Per timed step: bytes staged, pages not resident copied and read, missed (of those), copied unread.
  double staged_bytes = 0, pages_copied_read = 0, pages_missed = 0, pages_unread = 0;
};

// CPU time of the whole process (all threads): what a loaded machine distorts less than wall time.
double cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + 1e-3 * static_cast<double>(ts.tv_nsec);
}

std::uint32_t pool_threads = 2;  // --threads: the pool the runtime borrows (as the engine's)
const char* backend_name = "host";  // --backend (--sparse-staging)
bool fresh_query = false;           // a new random query every decode step
bool staging_rows = false;          // --sparse-staging: print the staging table's rows

int run(std::uint32_t context_tokens, double fraction, std::uint32_t batch, std::uint32_t steps,
        const SparseSettings& sparse = {}, Medians* medians = nullptr) {
  const Preset preset = find_preset("smollm2-135m").value();
  const Geometry g = preset.geometry;
  const std::uint32_t q_heads = 9;
  const std::uint32_t page_tokens = 16;
  const std::uint32_t final_tokens = context_tokens + steps + 8;
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = g;
  m.page_tokens = page_tokens;
  m.tiles = 2;
  m.max_context_tokens = preset.max_context_tokens;
  m.max_seqs = batch;
  m.chunk_tokens = 256;
  m.host_pool_bytes = std::uint64_t{batch} * g.dense_layers * m.max_context_tokens * g.row_bytes();
  const std::uint64_t pages = static_cast<std::uint64_t>(
      std::ceil(fraction * batch * g.dense_layers * ((final_tokens + page_tokens - 1) / page_tokens)));
  const std::uint64_t tile_bytes = std::uint64_t{m.max_context_tokens} * g.row_bytes();
  m.device_pool_bytes = 4 * arena_alignment_bytes + m.tiles * tile_bytes + pages * page_tokens * g.row_bytes();
  settings.q_heads = q_heads;
  settings.sparse = sparse;
  if (sparse.enabled()) {
    // The summaries' arena part comes on top, so sparse holds as many pages resident as exact.
    MemorySettings with_summaries = m;
    with_summaries.sparse_summaries = true;
    m.device_pool_bytes += summary_part_bytes(with_summaries);
  }

  BackendOptions options;
  options.compute_threads = 2;
  auto backend = make_backend(backend_name, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.error().describe().c_str());
    return 1;
  }
  auto created = KvRuntime::create(settings, *backend.value());
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.error().describe().c_str());
    return 1;
  }
  KvRuntime& rt = *created.value();
  engine::ThreadPool pool(pool_threads);
  engine::RuntimeKv lender(rt);
  lender.share_threads(&pool);
  std::vector<ContextId> contexts;
  for (std::uint32_t c = 0; c < batch; ++c) {
    auto admitted = rt.open_context(c, final_tokens);
    if (!admitted.ok() || admitted->outcome != AdmitOutcome::admitted) {
      std::fprintf(stderr, "context %u not admitted: %s\n", c,
                   admitted.ok() ? reason_text(admitted->reason) : admitted.error().describe().c_str());
      return 1;
    }
    contexts.push_back(admitted->handle);
  }

  const std::size_t kv = std::size_t{g.kv_heads} * g.head_dim;
  const std::size_t qe = std::size_t{q_heads} * g.head_dim;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(std::size_t{256} * batch * kv), v(k.size()), q(std::size_t{batch} * qe), out(q.size());
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  for (auto& x : q) x = normal(rng);
  std::vector<StepEntry> entries(batch);

  auto step = [&](std::uint32_t tokens, bool attention) {
    for (std::uint32_t c = 0; c < batch; ++c) entries[c] = StepEntry{contexts[c], tokens};
    Status s = rt.begin_step(entries);
    for (std::uint32_t l = 0; s.ok() && l < g.dense_layers; ++l) {
      s = rt.write_kv(l, k.data(), v.data());
      if (s.ok()) s = attention ? rt.attend(l, q.data(), out.data()) : rt.attend_none(l);
    }
    const Status ended = rt.end_step();
    if (!s.ok() || !ended.ok()) {
      std::fprintf(stderr, "step failed: %s\n", (s.ok() ? ended : s).error().describe().c_str());
      std::exit(1);
    }
  };
  for (std::uint32_t fed = 0; fed < context_tokens; fed += 256) step(std::min(256u, context_tokens - fed), false);
  for (int i = 0; i < 3; ++i) step(1, true);  // warm the decode path

  std::vector<double> step_us, plan_us, attention_us, copies_us, issue_us;
  std::uint64_t allocations = 0;
  const KvCounters before_all = rt.counters();
  if (sparse.enabled()) rt.reset_sparse_stats();  // the timed steps only
  const double cpu_before = cpu_us();
  for (std::uint32_t i = 0; i < steps; ++i) {
    if (fresh_query) {
      for (auto& x : q) x = normal(rng);
    }
    const KvCounters before = rt.counters();
    const std::uint64_t heap_before = testing::heap_allocations();
    step(1, true);
    allocations += testing::heap_allocations() - heap_before;
    const KvCounters& after = rt.counters();
    const double s_us = static_cast<double>(after.step_ns - before.step_ns) / 1e3;
    const double p_us = static_cast<double>(after.plan_ns - before.plan_ns) / 1e3;
    const double a_us = static_cast<double>(after.attention_ns - before.attention_ns) / 1e3;
    const double c_us = static_cast<double>(after.copy_wait_ns - before.copy_wait_ns) / 1e3;
    step_us.push_back(s_us);
    plan_us.push_back(p_us);
    attention_us.push_back(a_us);
    copies_us.push_back(c_us);
    issue_us.push_back(s_us - p_us - a_us - c_us);
  }
  const double cpu_per_step = (cpu_us() - cpu_before) / steps;
  const KvCounters& end = rt.counters();
  const double staged_mib = static_cast<double>(end.bytes_staged - before_all.bytes_staged) / steps / (1024.0 * 1024.0);
  const double issue = median(issue_us), plan = median(plan_us), step_med = median(step_us);
  if (medians != nullptr) {
    const SparseStats& ss = rt.sparse_stats();
    *medians = Medians{step_med, median(attention_us), ss.pages_read_per_selection(),
                       ss.selections == 0 ? 0.0 : static_cast<double>(ss.pages_context) / static_cast<double>(ss.selections), cpu_per_step};
    medians->staged_bytes = static_cast<double>(end.bytes_staged - before_all.bytes_staged) / steps;
    medians->pages_copied_read =
        static_cast<double>(end.pages_stage_selected + end.pages_stage_predicted + end.pages_stage_missed -
                            before_all.pages_stage_selected - before_all.pages_stage_predicted - before_all.pages_stage_missed) / steps;
    medians->pages_missed = static_cast<double>(end.pages_stage_missed - before_all.pages_stage_missed) / steps;
    medians->pages_unread = static_cast<double>(end.pages_stage_unselected - before_all.pages_stage_unselected) / steps;
    if (!sparse.enabled()) medians->pages_copied_read = medians->staged_bytes / static_cast<double>(page_tokens * g.row_bytes());
    if (staging_rows) {
      const char* name = !sparse.enabled() ? "exact" : sparse_staging_name(sparse.staging);
      std::printf("| %5u | %3.0f%% | %-9s | %-5s | %8.2f | %7.1f | %6.1f | %7.1f | %9.0f | %9.0f | %9.0f | %u |\n",
                  context_tokens, fraction * 100, !sparse.enabled() ? "exact" : "1/8", !sparse.enabled() ? "every" : name,
                  medians->staged_bytes / (1024.0 * 1024.0), medians->pages_copied_read, medians->pages_missed,
                  medians->pages_unread, step_med, cpu_per_step, median(attention_us), static_cast<unsigned>(allocations));
      for (const ContextId c : contexts) rt.finish(c);
      lender.share_threads(nullptr);
      return rt.pages_free() == rt.pages_total() ? 0 : 1;
    }
    const double per_step = static_cast<double>(std::max<std::uint64_t>(1, ss.decode_steps));
    std::printf("| %5u | %-10s | %9.0f | %9.0f | %9.0f | %5.0f / %5.0f | %7.1f | %7.1f | %u |\n", context_tokens,
                !sparse.enabled() ? "exact" : sparse.per_group ? "sparse 1/8" : "1/8 1 list", step_med, cpu_per_step, median(attention_us),
                static_cast<double>(ss.select_ns) / 1e3 / per_step, static_cast<double>(ss.select_cpu_ns) / 1e3 / per_step,
                medians->pages_read, medians->pages_held, static_cast<unsigned>(allocations));
    if (sparse.enabled()) {
      std::printf("|  |  | page summaries copied into the arena: %.0f B per step |  |  |  |  |  |  |\n",
                  static_cast<double>(ss.summary_upload_bytes) / static_cast<double>(std::max<std::uint64_t>(1, ss.decode_steps)));
    }
    for (const ContextId c : contexts) rt.finish(c);
    lender.share_threads(nullptr);
    return rt.pages_free() == rt.pages_total() ? 0 : 1;
  }
  std::printf("| %5u | %4.0f%% | %5u | %9.0f | %7.1f | %9.0f | %7.0f | %7.1f | %5.1f%% | %8.2f | %u |\n", context_tokens,
              fraction * 100, batch, step_med, plan, median(attention_us), median(copies_us), issue,
              100.0 * (plan + issue) / step_med, staged_mib, static_cast<unsigned>(allocations));
  for (const ContextId c : contexts) rt.finish(c);
  lender.share_threads(nullptr);
  return rt.pages_free() == rt.pages_total() ? 0 : 1;
}

double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

int bounds_only() {
  const std::uint32_t pages = 8192 / 16 + 1, kv = 3, d = 64, group = 3, layers = 30;
  runtime::PageSummaries table(runtime::SummaryShape{1, layers, pages, kv, d, runtime::SummaryFormat::f16});
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::uint16_t> key(std::size_t{kv} * d);
  for (std::uint32_t l = 0; l < layers; ++l) {
    for (std::uint32_t p = 0; p < pages; ++p) {
      table.clear(0, l, p);
      for (int r = 0; r < 16; ++r) {
        for (std::uint16_t& x : key) x = runtime::summary_round_down(runtime::SummaryFormat::f16, normal(rng));
        table.add_stored(0, l, p, reinterpret_cast<const std::byte*>(key.data()));
      }
    }
  }
  std::vector<float> q(std::size_t{kv} * group * d), qp(q.size()), qn(q.size()), out(std::size_t{kv} * pages);
  for (float& x : q) x = normal(rng);
  runtime::split_query(q.data(), static_cast<std::uint32_t>(q.size()), qp.data(), qn.data());
  std::printf("the bound of one decode step at 8K: 30 layers x 3 KV heads x %u pages, 3 query heads each, f16 summaries "
              "(%llu B per layer and KV head); best of 50, thread CPU time\n\n", pages,
              static_cast<unsigned long long>(std::uint64_t{pages} * table.shape().page_bytes() / kv));
  for (const runtime::BoundIsa isa : {runtime::BoundIsa::portable, runtime::BoundIsa::best}) {
    double best = 1e30;
    for (int rep = 0; rep < 50; ++rep) {
      const double t0 = thread_cpu_us();
      for (std::uint32_t l = 0; l < layers; ++l) {
        for (std::uint32_t kh = 0; kh < kv; ++kh) {
          runtime::page_bounds(runtime::SummaryFormat::f16, qp.data() + std::size_t{kh} * group * d,
                               qn.data() + std::size_t{kh} * group * d, group,
                               table.page(0, l, 0) + std::size_t{kh} * 2 * d, table.shape().page_stride(), pages, d,
                               out.data() + std::size_t{kh} * pages, isa);
        }
      }
      best = std::min(best, thread_cpu_us() - t0);
    }
    std::printf("%-10s %8.0f us per step\n",
                isa == runtime::BoundIsa::portable ? "portable" : (runtime::page_bounds_vectorised(d) ? "avx2+f16c" : "portable*"),
                best);
  }
  return 0;
}

}  // namespace
}  // namespace activekv

int main(int argc, char** argv) {
  std::uint32_t steps = 32;
  std::uint32_t batch = 1;
  bool sparse = false;
  const char* only = nullptr;  // --only exact|group|list: one mode of --sparse (to profile it alone)
  bool sparse_staging = false;
  double pool = 0.25;
  std::uint32_t context_asked = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sparse") == 0) sparse = true;
    if (std::strcmp(argv[i], "--sparse-staging") == 0) sparse_staging = true;
    if (std::strcmp(argv[i], "--bounds") == 0) return activekv::bounds_only();
  }
  for (int i = 1; i + 1 < argc; i += 1) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--batch") == 0) batch = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--threads") == 0) activekv::pool_threads = static_cast<std::uint32_t>(std::max(1, std::atoi(argv[i + 1])));
    if (std::strcmp(argv[i], "--backend") == 0) activekv::backend_name = argv[i + 1];
    if (std::strcmp(argv[i], "--pool") == 0) pool = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--context") == 0) context_asked = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
  }
  if (!(pool > 0.0 && pool <= 1.0)) {
    std::fprintf(stderr, "--pool: expected a fraction of the context's pages in (0, 1], got %g\n", pool);
    return 2;
  }
  // "8K": the longest prompt that leaves room for the decode steps in the model's 8,192 tokens.
  const std::uint32_t long_context = std::min(8192u - 64u, 8192u - steps - 8u);
  if (context_asked > long_context || (context_asked != 0 && context_asked < 256)) {
    std::fprintf(stderr, "--context: expected 256 to %u tokens, got %u\n", long_context, context_asked);
    return 2;
  }
  if (sparse_staging) {
    const std::uint32_t tokens = context_asked != 0 ? context_asked : long_context;
    activekv::staging_rows = true;
    std::printf("sparse staging: smollm2-135m geometry, %s backend, batch 1, %u decode steps, pool %.0f%% of the "
                "context's pages (the rest staged through two tiles), 1/8 of the pages per group; medians in us, "
                "staged figures per step\n\n", activekv::backend_name, steps, pool * 100);
    int rc = 0;
    for (const bool fresh : {false, true}) {
      activekv::fresh_query = fresh;
      std::printf("%s\n\n| context | pool | mode | staging | staged MiB | pages copied & read | missed | copied unread | "
                  "step (wall) | step (CPU, mean) | attention wait | heap allocs |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                  fresh ? "a fresh random query every step (the prediction's worst case):"
                        : "the same query every step (the selection changes only as pages are added):");
      activekv::Medians m;
      if (only == nullptr || std::strcmp(only, "exact") == 0) rc |= activekv::run(tokens, pool, 1, steps, {}, &m);
      for (const activekv::SparseStaging staging :
           {activekv::SparseStaging::every, activekv::SparseStaging::predicted, activekv::SparseStaging::selected}) {
        if (only != nullptr && std::strcmp(only, activekv::sparse_staging_name(staging)) != 0) continue;
        activekv::SparseSettings s;
        s.mode = activekv::SparseMode::fraction;
        s.fraction = 0.125f;
        s.staging = staging;
        rc |= activekv::run(tokens, pool, 1, steps, s, &m);
      }
      std::printf("\n");
    }
    return rc;
  }
  if (sparse) {
    std::printf("sparse attention: smollm2-135m geometry, host backend (threaded, 2 compute threads), batch 1, "
                "%u decode steps, pool 100%%, the selection's bound on %u borrowed threads, medians in us\n\n", steps,
                activekv::pool_threads);
    std::printf("| context | mode | step (wall) | step (CPU, mean) | attention wait | selection (mean, wall / CPU) | pages read | pages held | heap allocs |\n|---|---|---|---|---|---|---|---|---|\n");
    activekv::Medians exact, eighth;
    activekv::SparseSettings s;
    s.mode = activekv::SparseMode::fraction;
    s.fraction = 0.125f;
    activekv::SparseSettings o = s;  // the same budget with one page list for all KV heads
    o.per_group = false;
    if (only != nullptr) {
      if (std::strcmp(only, "exact") == 0) return activekv::run(long_context, 1.0, 1, steps, {}, &exact);
      if (std::strcmp(only, "group") == 0) return activekv::run(long_context, 1.0, 1, steps, s, &eighth);
      if (std::strcmp(only, "list") == 0) return activekv::run(long_context, 1.0, 1, steps, o, &eighth);
      std::fprintf(stderr, "--only: expected exact, group or list, got '%s'\n", only);
      return 2;
    }
    int rc = activekv::run(long_context, 1.0, 1, steps, {}, &exact);
    rc |= activekv::run(long_context, 1.0, 1, steps, s, &eighth);
    activekv::Medians one_list;
    rc |= activekv::run(long_context, 1.0, 1, steps, o, &one_list);
    std::printf("\nsparse 1/8 against exact: step %.2fx faster (wall medians), %.2fx (CPU time per step)\n",
                exact.step_us / eighth.step_us, exact.cpu_us / eighth.cpu_us);
    std::printf("sparse 1/8 with one list against exact: step %.2fx faster (wall medians), %.2fx (CPU time per step)\n",
                exact.step_us / one_list.step_us, exact.cpu_us / one_list.cpu_us);
    return rc;
  }
  std::printf("smollm2-135m geometry, host backend (threaded, 2 compute threads), batch %u, %u decode steps, medians in us\n\n",
              batch, steps);
  std::printf("| context | pool | batch | step | plan | attention | copies | issue | overhead | staged MiB/step | heap allocs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  int rc = 0;
  for (const std::uint32_t context : {2048u, long_context}) {
    for (const double fraction : {1.0, 0.25}) rc |= activekv::run(context, fraction, batch, steps);
  }
  return rc;
}
