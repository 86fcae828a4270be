// swarm.cpp — one seed of the swarm simulation: draw, drive, check, hash.
//
// The run has two phases. In the fault phase the host backend injects the
// seed's faults; a step that reports a fault is discarded, its contexts are
// cancelled and recovered from their host histories (verified against the
// checksums of the rows written) into fresh contexts. The phase ends at a
// drawn step, or at once when the device is lost. Then the faulty runtime must
// drain — every page not quarantined and every history returned — and every
// surviving request moves, from its host history, onto a fault-free device,
// where it must run to its full length (liveness). Every buffer a step touches
// is sized before the first step, so a good step's heap allocation count is
// measured around the runtime's calls alone.
#include "reliability/swarm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/memory_plan.hpp"
#include "backends/host/host_backend.hpp"
#include "runtime/element_codec.hpp"
#include "runtime/reference_kv.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::reliability {
namespace {

constexpr float reference_tolerance = 2e-5f;
constexpr std::uint64_t steps_limit = 4000;  // a run longer than this is a liveness failure

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
std::uint64_t fnv_u64(std::uint64_t h, std::uint64_t x) { return fnv(h, &x, sizeof x); }
constexpr std::uint64_t fnv_basis = 14695981039346656037ull;

struct Request {
  std::uint64_t id = 0;          // index + 1
  std::uint32_t tokens_max = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t cancel_at = 0;   // 0 = never; else cancelled once length ≥ cancel_at
  std::uint64_t arrival_step = 0;
  enum class State : std::uint8_t { pending, queued, running, done } state = State::pending;
  bool needs_replay = false;     // recovered rows not yet in the current context
  ContextId handle;
  std::uint32_t reference = 0;   // ReferenceKv context holding exactly `length` rows
  std::uint32_t length = 0;
  std::vector<std::vector<float>> k, v;           // [layer]: length × kv elements
  std::vector<std::vector<std::uint64_t>> sums;   // [layer]: length checksums
  // Conversations (prefix reuse): a follow-up's first pre_len rows are its predecessor's rows, under
  // the predecessor's tokens; every later token is this request's own. A row is thus a function of
  // the tokens before it, as in a model, and an adopted history must hold exactly these rows.
  std::int32_t follows = -1;                      // index of the predecessor in requests_, or -1
  bool prepared = false;                          // tokens (and the prefix) drawn at first admission
  bool completed = false;                         // ran to tokens_max (a predecessor must have)
  std::vector<std::int32_t> tokens;               // tokens_max token ids
  std::uint32_t pre_len = 0;
  std::vector<std::vector<float>> pre_k, pre_v;   // [layer]: pre_len × kv elements
  std::vector<std::vector<std::uint64_t>> pre_sums;
};

struct Device {
  std::unique_ptr<host::HostBackend> backend;
  std::unique_ptr<KvRuntime> runtime;
  bool faulty = false;
};

class SeedRun {
 public:
  SeedRun(std::uint64_t seed, const SwarmHooks& hooks) : rng_(seed), hooks_(hooks) { report_.seed = seed; }

  SeedReport run() {
    draw();
    if (!violation_.empty()) return finish_report();
    drive();
    return finish_report();
  }

 private:
  std::uint32_t uniform(std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng_);
  }
  double real(double hi) { return std::uniform_real_distribution<double>(0.0, hi)(rng_); }
  bool chance(std::uint32_t percent) { return uniform(0, 99) < percent; }

  void fail(const std::string& what) {
    if (violation_.empty()) violation_ = fmt::format("step {}: {}", step_, what);
  }
  void trace(std::uint64_t x) { hash_ = fnv_u64(hash_, x); }

  // ---- the seed's draw --------------------------------------------------------
  void draw() {
    Geometry& g = settings_.memory.geometry;
    g.dense_layers = uniform(1, 2);
    g.kv_heads = uniform(1, 2);
    g.head_dim = 8u << uniform(0, 1);
    g.dtype = chance(50) ? DType::f16 : DType::bf16;
    MemorySettings& m = settings_.memory;
    m.page_tokens = 2u << uniform(0, 2);
    m.tile_tokens = m.page_tokens * uniform(1, 3);
    m.tiles = uniform(1, 2);
    m.max_context_tokens = 64;
    m.max_seqs = uniform(1, 3);
    m.chunk_tokens = m.page_tokens * uniform(1, 2);
    m.host_pool_bytes = std::uint64_t{m.max_seqs} * g.dense_layers * m.max_context_tokens * g.row_bytes();
    const std::uint64_t floor_pages = std::uint64_t{g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, m.page_tokens));
    const std::uint64_t all_pages = std::uint64_t{m.max_seqs} * g.dense_layers * (m.max_context_tokens / m.page_tokens);
    const std::uint64_t pages = floor_pages * m.max_seqs + uniform(0, 60) * (all_pages - floor_pages * m.max_seqs) / 100;
    // Exactly `pages` pool pages: the page pool starts at the tiles' end rounded up to the arena
    // alignment (slack beyond that would become more pages, and every history would fit).
    const std::uint64_t tiles_bytes = std::uint64_t{m.tiles} * m.tile_tokens * g.row_bytes();
    m.device_pool_bytes = (tiles_bytes + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes +
                          pages * m.page_tokens * g.row_bytes();
    settings_.q_heads = g.kv_heads * uniform(1, 2);
    settings_.policy = chance(50) ? ResidencyPolicyKind::exact : ResidencyPolicyKind::hotness;
    settings_.hotness_threshold = 0.02f;

    // Fault rates: each class present in about two seeds of three.
    faults_.failed_copy = chance(67) ? real(0.10) : 0.0;
    faults_.failed_fence = chance(67) ? real(0.02) : 0.0;
    faults_.unknown_fence = chance(67) ? real(0.02) : 0.0;
    faults_.late_fence = chance(67) ? real(0.30) : 0.0;
    faults_.late_ticks = uniform(1, 5000);
    reorder_ = chance(75);
    fault_phase_steps_ = uniform(0, 40);
    lose_device_at_ = chance(20) ? uniform(1, std::max(1u, static_cast<std::uint32_t>(fault_phase_steps_))) : 0;
    lose_device_layer_ = uniform(0, g.dense_layers - 1);
    refuse_warmup_ = chance(10);
    // Sparse attention (docs/SPARSE.md) in about one seed of three, from its own generator so that
    // every other draw of the seed is what it was before sparse existed.
    std::mt19937_64 sparse_rng(report_.seed ^ 0x5BA75E5EEDull);
    auto sparse_pick = [&](std::uint32_t lo, std::uint32_t hi) {
      return std::uniform_int_distribution<std::uint32_t>(lo, hi)(sparse_rng);
    };
    if (sparse_pick(0, 2) == 0) {
      SparseSettings& sp = settings_.sparse;
      const std::uint32_t mode = sparse_pick(0, 2);
      sp.mode = mode == 0 ? SparseMode::pages : mode == 1 ? SparseMode::fraction : SparseMode::adaptive;
      sp.pages = sparse_pick(3, 6);
      sp.fraction = 0.25f * static_cast<float>(sparse_pick(1, 3));
      sp.floor_pages = sparse_pick(3, 6);
      sp.recent_pages = sparse_pick(1, 2);
      sp.measure = sparse_pick(0, 1) == 1;
    }
    settings_.prefix_reuse = chance(67);
    // A retained-history allowance (docs/PREFIX.md) in about two reuse seeds of three, from its own
    // generator so that every other draw of the seed is what it was before: host histories that
    // never run a context, only keep retained prefixes.
    if (settings_.prefix_reuse) {
      std::mt19937_64 retain_rng(report_.seed ^ 0x2E7A1AEDull);
      m.retained_histories = std::uniform_int_distribution<std::uint32_t>(0, 2)(retain_rng);
      m.host_pool_bytes += std::uint64_t{m.retained_histories} * g.dense_layers * m.max_context_tokens * g.row_bytes();
    }
    if (settings_.sparse.enabled()) {
      // The summaries' own arena part after the pages, one per history slot (the retained
      // allowance included): the page pool's end rounded up to the alignment, then the part (so
      // the pool keeps at least its `pages`).
      MemorySettings with_summaries = m;
      with_summaries.sparse_summaries = true;
      m.device_pool_bytes += arena_alignment_bytes + summary_part_bytes(with_summaries);
    }

    // The workload.
    const std::uint32_t n = uniform(2, 8);
    requests_.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      Request& r = requests_[i];
      r.id = i + 1;
      r.tokens_max = uniform(4, m.max_context_tokens);
      r.prompt_tokens = uniform(1, r.tokens_max);
      r.cancel_at = chance(15) ? uniform(1, r.tokens_max) : 0;
      r.arrival_step = uniform(0, 30);
      if (i > 0 && chance(40)) {  // a follow-up turn: arrives after its predecessor, extends its history
        r.follows = static_cast<std::int32_t>(uniform(0, i - 1));
        r.arrival_step = requests_[static_cast<std::size_t>(r.follows)].arrival_step + uniform(5, 60);
      }
      r.k.resize(g.dense_layers);
      r.v.resize(g.dense_layers);
      r.sums.resize(g.dense_layers);
    }
    report_.requests = n;
    trace(g.dense_layers), trace(g.kv_heads), trace(g.head_dim), trace(m.page_tokens), trace(m.tile_tokens);
    trace(m.max_seqs), trace(m.device_pool_bytes), trace(n);
  }

  // ---- devices ------------------------------------------------------------------
  bool open_device(bool faulty) {
    device_exhausted_ = false;
    BackendOptions options;
    options.deterministic = true;
    options.seed = report_.seed * 2 + (faulty ? 0 : 1);
    options.reorder = reorder_;
    if (faulty) options.faults = faults_;
    auto backend = std::make_unique<host::HostBackend>(options);
    if (refuse_warmup_) {  // an operator's first try: a device pool far too small
      refuse_warmup_ = false;
      KvRuntimeSettings small = settings_;
      small.memory.device_pool_bytes = arena_alignment_bytes;
      auto refused = KvRuntime::create(small, *backend);
      if (refused.ok() || refused.error().setting.empty()) {
        fail("a device pool too small for warm-up was not refused with the setting to change");
        return false;
      }
      ++report_.faults.warmup_refusals;
      backend = std::make_unique<host::HostBackend>(options);
    }
    auto created = KvRuntime::create(settings_, *backend);
    if (!created.ok()) {
      fail("warm-up refused a sound configuration: " + created.error().describe());
      return false;
    }
    device_.backend = std::move(backend);
    device_.runtime = std::move(created.value());
    device_.faulty = faulty;
    if (buffers_k_.empty()) size_buffers();
    return true;
  }

  void size_buffers() {
    const Geometry& g = settings_.memory.geometry;
    const KvRuntime& rt = *device_.runtime;
    const std::uint32_t entries_max = rt.plan().budget.concurrency;
    tokens_max_ = entries_max * settings_.memory.chunk_tokens;
    kv_ = std::size_t{g.kv_heads} * g.head_dim;
    qe_ = std::size_t{settings_.q_heads} * g.head_dim;
    buffers_k_.assign(g.dense_layers, std::vector<float>(tokens_max_ * kv_));
    buffers_v_.assign(g.dense_layers, std::vector<float>(tokens_max_ * kv_));
    buffers_q_.assign(g.dense_layers, std::vector<float>(tokens_max_ * qe_));
    buffers_out_.assign(g.dense_layers, std::vector<float>(tokens_max_ * qe_));
    expected_.resize(tokens_max_ * qe_);
    row_.resize(g.row_bytes());
    entries_.reserve(entries_max);
    chosen_.reserve(entries_max);
  }

  // Retires a device: every context is gone, so every page not quarantined and
  // every history must be back (liveness on the faulty device), and its faults
  // are tallied.
  void close_device() {
    KvRuntime& rt = *device_.runtime;
    if (const char* broken = rt.check()) fail(std::string("at teardown: ") + broken);
    // Shutdown: retained histories' device pages (prefix reuse) go back to the pool through the
    // runtime, after the device copies in flight resolve; then every page must be free or quarantined.
    report_.device_pages_handed_over += rt.counters().retained_device_pages_adopted;
    report_.device_pages_copied += rt.counters().prefix_device_pages_copied;
    rt.release_retained();
    if (const char* broken = rt.check()) fail(std::string("after releasing retained pages: ") + broken);
    if (rt.pages_free() + rt.pages_quarantined() != rt.pages_total())
      fail(fmt::format("pages did not drain: {} free + {} quarantined of {} ({} histories free of {})", rt.pages_free(),
                       rt.pages_quarantined(), rt.pages_total(), rt.histories_free(), rt.plan().host.history_slots));
    if (rt.histories_free() + rt.histories_retired() != rt.plan().host.history_slots) fail("histories did not drain");
    if (!device_.faulty && rt.histories_retired() != 0) fail("a fault-free device retired a host history");
    if (!device_.faulty && rt.pages_quarantined() != 0) fail("a fault-free device quarantined pages");
    if (rt.counters().device_allocations_after_warmup != 0) fail("a device allocation after warm-up");
    report_.pages_quarantined += rt.pages_quarantined();
    report_.pages_staged += rt.counters().pages_staged;
    report_.tiles_retired += rt.counters().tiles_retired;
    report_.histories_retired += rt.histories_retired();
    trace(rt.pages_quarantined()), trace(rt.counters().steps), trace(rt.counters().quarantines);
    const auto& f = device_.backend->faults_injected();
    report_.faults.late += f.late;
    report_.faults.failed_fences += f.failed_fences;
    report_.faults.unknown_fences += f.unknown_fences;
    report_.faults.failed_copies += f.failed_copies;
    report_.faults.torn_copies += f.torn_copies;
    report_.faults.poisoned += f.poisoned;
    device_.runtime.reset();
    device_.backend.reset();
  }

  // ---- rows and checksums ----------------------------------------------------------
  std::uint64_t row_sum(const float* k, const float* v) {
    const Geometry& g = settings_.memory.geometry;
    const std::size_t half = g.row_bytes() / 2;
    runtime::encode_elements(g.dtype, k, kv_, row_.data());
    runtime::encode_elements(g.dtype, v, kv_, row_.data() + half);
    return fnv(fnv_basis, row_.data(), row_.size());
  }

  // Compares host rows [first, last) of every layer with their checksums.
  bool verify_rows(Request& r, std::uint32_t first, std::uint32_t last) {
    const Geometry& g = settings_.memory.geometry;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      for (std::uint32_t t = first; t < last; ++t) {
        const auto host = device_.runtime->host_row(r.handle, l, t);
        ++report_.rows_verified;
        if (fnv(fnv_basis, host.data(), host.size()) != r.sums[l][t]) return false;
      }
    }
    return true;
  }

  // ---- conversations ------------------------------------------------------------------
  // At its first admission: a follow-up whose predecessor completed inherits its rows and tokens
  // as its prompt's start; every request draws its own tokens for the rest.
  void prepare(Request& r) {
    r.prepared = true;
    const Geometry& g = settings_.memory.geometry;
    const std::uint32_t max_context = settings_.memory.max_context_tokens;
    if (r.follows >= 0) {
      const Request& p = requests_[static_cast<std::size_t>(r.follows)];
      if (p.completed && p.length + 2 <= max_context) {
        r.pre_len = p.length;
        r.pre_k = p.k;
        r.pre_v = p.v;
        r.pre_sums = p.sums;
        r.tokens.assign(p.tokens.begin(), p.tokens.begin() + p.length);
        r.tokens_max = uniform(r.pre_len + 2, max_context);
        r.prompt_tokens = uniform(r.pre_len + 1, r.tokens_max);
        if (r.cancel_at > r.tokens_max) r.cancel_at = r.tokens_max;
        ++report_.follow_ups;
      }
    }
    r.tokens.resize(r.tokens_max);
    for (std::uint32_t t = r.pre_len; t < r.tokens_max; ++t) {
      r.tokens[t] = static_cast<std::int32_t>(fnv_u64(fnv_u64(fnv_basis, report_.seed * 4096 + r.id), t) & 0x7fffffff);
    }
    (void)g;
    trace(r.pre_len), trace(r.tokens_max);
  }

  // The context adopted `reused` tokens of a retained history: they must be exactly the
  // conversation's rows (checked against the checksums), and they become the request's rows.
  void adopted(Request& r, std::uint32_t reused) {
    const Geometry& g = settings_.memory.geometry;
    if (reused > r.pre_len) {
      ++report_.corrupted;
      return fail(fmt::format("request {}: adopted {} tokens, beyond its conversation's {}", r.id, reused, r.pre_len));
    }
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      r.k[l].assign(r.pre_k[l].begin(), r.pre_k[l].begin() + static_cast<std::ptrdiff_t>(reused * kv_));
      r.v[l].assign(r.pre_v[l].begin(), r.pre_v[l].begin() + static_cast<std::ptrdiff_t>(reused * kv_));
      r.sums[l].assign(r.pre_sums[l].begin(), r.pre_sums[l].begin() + reused);
      reference_->append(r.reference, l, r.k[l].data(), r.v[l].data(), reused);
    }
    r.length = reused;
    if (!verify_rows(r, 0, reused)) {
      ++report_.corrupted;
      return fail(fmt::format("request {}: an adopted row differs from its conversation's row", r.id));
    }
    ++report_.adoptions;
    report_.tokens_reused += reused;
    trace(0xADD0), trace(reused);
  }

  // ---- admission -----------------------------------------------------------------------
  void opened(Request& r, ContextId handle) {
    r.state = Request::State::running;
    r.handle = handle;
    trace(r.id), trace(handle.slot);
  }

  void open(Request& r) {
    const bool fresh = !r.needs_replay && r.length == 0;
    if (fresh && !r.prepared) prepare(r);
    std::uint32_t reused = 0;
    // A replay starts from row 0 (its rows come from its own recovered history): it adopts nothing.
    const std::span<const std::int32_t> prompt =
        fresh ? std::span<const std::int32_t>(r.tokens).first(r.prompt_tokens) : std::span<const std::int32_t>();
    auto result = device_.runtime->open_context(next_request_id_++ * 64 + r.id, r.tokens_max, prompt, reused);
    if (!result.ok()) {
      // A faulty device whose every history was retired (failed copies quarantined part of each
      // host range) can run nothing more: its fault phase ends here, the request waits for the next device.
      if (exhausted()) {
        device_exhausted_ = true;
        --next_request_id_;
        return;
      }
      return fail("open_context refused a request within --max-context: " + result.error().describe());
    }
    request_of_.push_back(static_cast<std::uint32_t>(&r - requests_.data()));
    if (result->outcome == AdmitOutcome::admitted) {
      opened(r, result->handle);
      if (reused > 0) adopted(r, reused);
    } else {
      r.state = Request::State::queued;
    }
  }

  void sync_admitted() {
    AdmitResult admitted[8];
    for (;;) {
      const std::uint32_t n = device_.runtime->take_admitted(admitted);
      for (std::uint32_t i = 0; i < n; ++i) {
        const std::uint64_t key = admitted[i].request_id / 64 - 1;
        if (key >= request_of_.size()) return fail("take_admitted returned an unknown request");
        opened(requests_[request_of_[key]], admitted[i].handle);
      }
      if (n < 8) return;
    }
  }

  // A context leaves the runtime; queued requests may be admitted.
  void release(Request& r, bool finished) {
    if (finished) {
      // With prefix reuse the history stays retained under the tokens of its rows.
      device_.runtime->finish_retaining(r.handle, std::span<const std::int32_t>(r.tokens).first(r.length));
    } else {
      device_.runtime->cancel(r.handle);
    }
    sync_admitted();
  }

  // A faulty device whose failed copies quarantined every staging tile, or part of every host
  // history, can run nothing more: its fault phase ends there (the runtime refuses, by name).
  bool exhausted() const {
    const KvRuntime& rt = *device_.runtime;
    return device_.faulty && (rt.tiles_usable() == 0 || rt.histories_retired() == rt.plan().host.history_slots);
  }

  // ---- recovery ---------------------------------------------------------------------
  // The context's step failed (or its device is going away): its host history
  // [0, length) is verified against the checksums and becomes the rows the
  // request is replayed from; a history that fails is reported lost.
  void recover(Request& r) {
    const Geometry& g = settings_.memory.geometry;
    const bool intact = verify_rows(r, 0, r.length);
    trace(intact ? 1 : 2);
    if (intact) {
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        for (std::uint32_t t = 0; t < r.length; ++t) {
          const auto host = device_.runtime->host_row(r.handle, l, t);
          runtime::decode_elements(g.dtype, host.data(), kv_, r.k[l].data() + t * kv_);
          runtime::decode_elements(g.dtype, host.data() + host.size() / 2, kv_, r.v[l].data() + t * kv_);
        }
      }
      r.needs_replay = r.length > 0;
      ++report_.contexts_recovered;
    } else {
      ++report_.contexts_lost;  // reported, never used
    }
    release(r, false);
    if (!intact) {
      r.state = Request::State::done;
      return;
    }
    r.state = Request::State::pending;  // opened again in this step's admission pass
  }

  // Writes the recovered rows into the request's new context, chunk by chunk,
  // without attention; on success the rows are verified on the host.
  bool replay(Request& r) {
    const Geometry& g = settings_.memory.geometry;
    KvRuntime& rt = *device_.runtime;
    runtime::ReferenceKv* ref = reference_.get();
    r.reference = ref->open();
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) ref->append(r.reference, l, r.k[l].data(), r.v[l].data(), r.length);
    for (std::uint32_t done = 0; done < r.length;) {
      const std::uint32_t n = std::min(settings_.memory.chunk_tokens, r.length - done);
      const StepEntry entry{r.handle, n};
      if (exhausted()) {  // replayed on the next device instead
        device_exhausted_ = true;
        release(r, false);
        r.state = Request::State::pending;
        return false;
      }
      Status s = rt.begin_step({&entry, 1});
      if (!s.ok()) {
        fail("a replay step was refused: " + s.error().describe());
        return false;
      }
      for (std::uint32_t l = 0; s.ok() && l < g.dense_layers; ++l) {
        s = rt.write_kv(l, r.k[l].data() + done * kv_, r.v[l].data() + done * kv_);
        const Status none = rt.attend_none(l);
        if (s.ok()) s = none;
      }
      const Status ended = rt.end_step();
      if (s.ok() && !ended.ok()) s = ended;
      ++report_.steps;
      trace(s.ok() ? 3 : 4);
      if (!s.ok()) {
        ++report_.steps_failed;
        if (!device_.faulty) {
          fail("a replay step failed on a fault-free device: " + s.error().describe());
          return false;
        }
        if (s.error().setting == "--fence-timeout" && !rt.faulted(r.handle)) {
          fail("a replay step stalled: " + s.error().describe());
          return false;
        }
        // The replayed rows are still those the request holds: cancel and try again later.
        release(r, false);
        r.state = Request::State::pending;
        return false;
      }
      done += n;
    }
    if (!verify_rows(r, 0, r.length)) {
      ++report_.corrupted;
      fail(fmt::format("request {}: a replayed row reads back different from the row written", r.id));
      return false;
    }
    r.needs_replay = false;
    return true;
  }

  // ---- one step of the workload ------------------------------------------------------
  // Returns false when the device was lost (the caller migrates).
  bool step_once() {
    const Geometry& g = settings_.memory.geometry;
    KvRuntime& rt = *device_.runtime;
    entries_.clear();
    chosen_.clear();
    for (std::uint32_t i = 0; i < requests_.size(); ++i) {
      Request& r = requests_[i];
      if (r.state != Request::State::running || r.needs_replay || r.length >= r.tokens_max) continue;
      if (!chance(75)) continue;
      const std::uint32_t room = r.tokens_max - r.length;
      const std::uint32_t n = r.length < r.prompt_tokens
                                  ? std::min({room, r.prompt_tokens - r.length, uniform(1, settings_.memory.chunk_tokens)})
                                  : 1u;
      entries_.push_back(StepEntry{r.handle, n});
      chosen_.push_back(i);
    }
    if (entries_.empty()) return true;
    std::uint32_t total = 0;
    for (const StepEntry& e : entries_) total += e.tokens_new;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      for (std::size_t i = 0; i < total * kv_; ++i) buffers_k_[l][i] = normal(rng_);
      for (std::size_t i = 0; i < total * kv_; ++i) buffers_v_[l][i] = normal(rng_);
      for (std::size_t i = 0; i < total * qe_; ++i) buffers_q_[l][i] = normal(rng_);
    }
    // A conversation's inherited positions get its predecessor's rows (what a model would compute).
    for (std::size_t e = 0, row = 0; e < entries_.size(); row += entries_[e].tokens_new, ++e) {
      const Request& r = requests_[chosen_[e]];
      for (std::uint32_t t = r.length; t < std::min(r.pre_len, r.length + entries_[e].tokens_new); ++t) {
        for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
          std::copy_n(r.pre_k[l].data() + t * kv_, kv_, buffers_k_[l].data() + (row + t - r.length) * kv_);
          std::copy_n(r.pre_v[l].data() + t * kv_, kv_, buffers_v_[l].data() + (row + t - r.length) * kv_);
        }
      }
    }
    const bool lose = device_.faulty && lose_device_at_ != 0 && step_ >= lose_device_at_;
    // (A context cancelled mid-step is gone before its rows can be read back:
    // the damage test turns these off so that the damaged row is always read.)
    // (Sparse seeds: the output check reads the step's selection from explain(), which a context
    // cancelled in the step no longer has.)
    const bool cancel_mid_step = chance(2) && hooks_.corrupt_host_row_after_step == 0 && !settings_.sparse.enabled();
    const std::uint32_t cancel_layer = uniform(0, g.dense_layers - 1);

    if (exhausted()) {  // nothing more runs here: the fault phase ends before this step
      device_exhausted_ = true;
      return true;
    }
    const std::uint64_t heap_before = testing::heap_allocations();
    Status s = rt.begin_step(entries_);
    if (!s.ok()) {
      fail("begin_step refused a well-formed step: " + s.error().describe());
      return true;
    }
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      if (lose && l == lose_device_layer_) {
        device_.backend->lose_device();
        lose_device_at_ = 0;
        ++report_.faults.device_losses;
      }
      const Status written = rt.write_kv(l, buffers_k_[l].data(), buffers_v_[l].data());
      const Status attended = rt.attend(l, buffers_q_[l].data(), buffers_out_[l].data());
      if (s.ok() && !written.ok()) s = written;
      if (s.ok() && !attended.ok()) s = attended;
      if (!s.ok()) break;
      if (cancel_mid_step && l == cancel_layer) rt.cancel(entries_[0].context);  // deferred to end_step
    }
    const Status ended = rt.end_step();
    const std::uint64_t heap_after = testing::heap_allocations();
    if (s.ok() && !ended.ok()) s = ended;
    ++report_.steps;
    trace(0xC0FFEE), trace(total), trace(s.ok() ? 0 : 1 + static_cast<std::uint64_t>(s.error().code));
    const bool device_lost = lose && lose_device_at_ == 0;

    if (!s.ok()) {
      ++report_.steps_failed;
      if (!device_.faulty) fail("a step failed on a fault-free device: " + s.error().describe());
      if (s.error().setting == "--fence-timeout") fail("a step stalled: " + s.error().describe());
      if (cancel_mid_step && !rt.running(entries_[0].context)) {  // the deferred cancel took effect
        requests_[chosen_[0]].state = Request::State::done;
        ++report_.requests_cancelled;
        sync_admitted();
      }
      // Every context the step touched is recovered from its host history.
      for (const std::uint32_t i : chosen_) {
        Request& r = requests_[i];
        if (r.state != Request::State::running) continue;
        if (!rt.faulted(r.handle) && !device_lost) {
          // A context the fault did not reach may not be marked; it is recovered all the same.
          trace(5);
        }
        recover(r);
      }
      return !device_lost;
    }
    if (device_lost) fail("a step reported good across a device loss");
    if (heap_counter_ && heap_after != heap_before)
      fail(fmt::format("{} heap allocations inside a good step", heap_after - heap_before));

    // A good step: every output equals the reference, every new row reads back.
    const std::uint32_t all_heads = (1u << settings_.memory.geometry.kv_heads) - 1u;  // every KV head reads the page
    std::uint32_t row = 0;
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      Request& r = requests_[chosen_[e]];
      const std::uint32_t n = entries_[e].tokens_new;
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        const float* k = buffers_k_[l].data() + row * kv_;
        const float* v = buffers_v_[l].data() + row * kv_;
        reference_->append(r.reference, l, k, v, n);
        // Sparse decode: the reference reads the pages the runtime's selection named (explain).
        std::span<const std::uint32_t> pages_read;
        if (settings_.sparse.enabled() && n == 1) {
          if (l == 0) sparse_explanation_ = rt.explain(r.handle);
          pages_read_.assign((r.length + n + settings_.memory.page_tokens - 1) / settings_.memory.page_tokens, 0);
          std::uint32_t picked = 0;
          for (const SparsePick& pick : sparse_explanation_.sparse_picks) {
            if (pick.layer != l) continue;
            if (pick.logical >= pages_read_.size()) {
              fail(fmt::format("request {} layer {}: the selection names page {} past the context", r.id, l, pick.logical));
              return true;
            }
            pages_read_[pick.logical] |= pick.group == UINT32_MAX ? all_heads : 1u << pick.group;
            ++picked;
          }
          if (picked == 0 || pages_read_.front() != all_heads || pages_read_.back() != all_heads) {
            fail(fmt::format("request {} layer {}: a sparse selection without the sink or the newest page", r.id, l));
            return true;
          }
          pages_read = pages_read_;
          ++report_.sparse_selections_verified;
        }
        reference_->attend(r.reference, l, buffers_q_[l].data() + row * qe_, n, r.length, expected_.data(), pages_read);
        const float* out = buffers_out_[l].data() + row * qe_;
        for (std::size_t i = 0; i < n * qe_; ++i) {
          if (!(std::fabs(out[i] - expected_[i]) <= reference_tolerance)) {
            ++report_.corrupted;
            fail(fmt::format("request {} layer {}: a good step's output differs from the reference ({} vs {})", r.id, l,
                             out[i], expected_[i]));
            return true;
          }
        }
        hash_ = fnv(hash_, out, n * qe_ * sizeof(float));
        report_.outputs_verified += n;
        r.k[l].insert(r.k[l].end(), k, k + n * kv_);
        r.v[l].insert(r.v[l].end(), v, v + n * kv_);
        for (std::uint32_t t = 0; t < n; ++t) r.sums[l].push_back(row_sum(k + t * kv_, v + t * kv_));
      }
      r.length += n;
      row += n;
      const bool cancelled = cancel_mid_step && e == 0;
      if (cancelled) {
        if (rt.running(r.handle)) fail("a cancel during a step did not take effect at its end");
        r.state = Request::State::done;
        ++report_.requests_cancelled;
        sync_admitted();
        continue;
      }
      if (!verify_rows(r, r.length - n, r.length)) {
        ++report_.corrupted;
        fail(fmt::format("request {}: a good step left a wrong row on the host", r.id));
        return true;
      }
    }
    ++good_steps_;
    if (hooks_.corrupt_host_row_after_step == good_steps_) {
      Request& r = requests_[chosen_.back()];
      if (r.state == Request::State::running) {
        auto host = rt.host_row(r.handle, 0, r.length - 1);
        const_cast<std::byte&>(host[0]) ^= std::byte{1};
      }
    }
    return true;
  }

  // Between steps: arrivals, recoveries' re-admissions, replays, cancellations, completions.
  void between_steps() {
    KvRuntime& rt = *device_.runtime;
    for (Request& r : requests_) {
      if (r.state == Request::State::pending && r.arrival_step <= step_) {
        if (!r.needs_replay && r.length == 0) r.reference = reference_->open();
        open(r);
      }
    }
    for (Request& r : requests_) {
      if (r.state == Request::State::running && r.needs_replay) replay(r);
      if (!violation_.empty()) return;
    }
    for (Request& r : requests_) {
      if (r.state != Request::State::running || r.needs_replay) continue;
      if (r.cancel_at != 0 && r.length >= r.cancel_at) {
        if (!verify_rows(r, 0, r.length)) {  // a cancelled history is still checked before it goes
          ++report_.corrupted;
          return fail(fmt::format("request {}: its cancelled history differs from the rows written", r.id));
        }
        r.state = Request::State::done;
        ++report_.requests_cancelled;
        release(r, false);
      } else if (r.length == r.tokens_max) {
        if (!verify_rows(r, 0, r.length)) {
          ++report_.corrupted;
          return fail(fmt::format("request {}: its finished history differs from the rows written", r.id));
        }
        r.state = Request::State::done;
        r.completed = true;
        ++report_.requests_completed;
        trace(r.id * 1000 + r.length);
        release(r, true);
      }
    }
    if (const char* broken = rt.check()) fail(broken);
  }

  // The fault phase is over (or the device is gone): recover every context from
  // its host history, retire the device, continue on a fault-free one.
  void migrate() {
    // Releasing one context may admit a queued one: repeat until none runs.
    for (bool again = true; again && violation_.empty();) {
      again = false;
      for (Request& r : requests_) {
        if (r.state != Request::State::running) continue;
        again = true;
        if (r.needs_replay || r.length == 0) {  // nothing on this device to recover
          release(r, false);
          r.state = Request::State::pending;
        } else {
          recover(r);
        }
      }
    }
    for (Request& r : requests_) {
      if (r.state == Request::State::queued) r.state = Request::State::pending;
    }
    close_device();
    if (!violation_.empty()) return;
    request_of_.clear();
    next_request_id_ = 1;
    open_device(false);
  }

  void drive() {
    heap_counter_ = testing::heap_counter_linked();
    reference_ = std::make_unique<runtime::ReferenceKv>(settings_.memory.geometry, settings_.q_heads,
                                                        settings_.memory.page_tokens);
    if (!open_device(fault_phase_steps_ > 0)) return;
    for (step_ = 0; step_ < steps_limit && violation_.empty(); ++step_) {
      if (device_.faulty && (step_ >= fault_phase_steps_ || device_exhausted_)) migrate();
      if (!violation_.empty()) break;
      between_steps();
      if (!violation_.empty()) break;
      const bool all_done = std::all_of(requests_.begin(), requests_.end(),
                                        [](const Request& r) { return r.state == Request::State::done; });
      if (all_done) break;
      if (!step_once()) migrate();  // the device was lost
    }
    if (violation_.empty() && step_ >= steps_limit) fail("liveness: requests did not drain on a fault-free device");
    if (violation_.empty() && device_.runtime) close_device();
  }

  SeedReport finish_report() {
    report_.violation = violation_;
    for (const Request& r : requests_) trace(r.length);
    trace(report_.steps), trace(report_.steps_failed), trace(report_.contexts_recovered), trace(report_.contexts_lost);
    report_.trace_hash = hash_;
    return report_;
  }

  std::mt19937_64 rng_;
  SwarmHooks hooks_;
  SeedReport report_;
  std::string violation_;
  std::uint64_t hash_ = fnv_basis;
  std::uint64_t step_ = 0;
  std::uint64_t good_steps_ = 0;
  bool heap_counter_ = false;

  KvRuntimeSettings settings_;
  FaultRates faults_;
  bool reorder_ = true;
  std::uint64_t fault_phase_steps_ = 0;
  bool device_exhausted_ = false;  // the faulty device can run nothing more (see exhausted())
  std::uint64_t lose_device_at_ = 0;
  std::uint32_t lose_device_layer_ = 0;
  bool refuse_warmup_ = false;

  std::vector<Request> requests_;
  std::vector<std::uint32_t> request_of_;  // runtime request key − 1 → index in requests_
  std::uint64_t next_request_id_ = 1;
  Device device_;
  std::unique_ptr<runtime::ReferenceKv> reference_;
  Explanation sparse_explanation_;       // sparse seeds: the step's selection of the entry checked
  std::vector<std::uint32_t> pages_read_;  // per page, the KV heads that read it

  std::uint32_t tokens_max_ = 0;
  std::size_t kv_ = 0, qe_ = 0;
  std::vector<std::vector<float>> buffers_k_, buffers_v_, buffers_q_, buffers_out_;
  std::vector<float> expected_;
  std::vector<std::byte> row_;
  std::vector<StepEntry> entries_;
  std::vector<std::uint32_t> chosen_;
};

}  // namespace

SeedReport run_seed(std::uint64_t seed, const SwarmHooks& hooks) { return SeedRun(seed, hooks).run(); }

void SwarmSummary::add(const SeedReport& r) {
  ++seeds;
  if (!r.ok()) {
    if (seeds_failed == 0) first_failed_seed = r.seed;
    ++seeds_failed;
  }
  steps += r.steps, steps_failed += r.steps_failed, requests += r.requests;
  requests_completed += r.requests_completed, requests_cancelled += r.requests_cancelled;
  rows_verified += r.rows_verified, outputs_verified += r.outputs_verified, pages_quarantined += r.pages_quarantined;
  sparse_selections_verified += r.sparse_selections_verified;
  pages_staged += r.pages_staged, tiles_retired += r.tiles_retired, histories_retired += r.histories_retired;
  contexts_recovered += r.contexts_recovered, contexts_lost += r.contexts_lost, corrupted += r.corrupted;
  follow_ups += r.follow_ups, adoptions += r.adoptions, tokens_reused += r.tokens_reused;
  device_pages_handed_over += r.device_pages_handed_over, device_pages_copied += r.device_pages_copied;
  faults.late += r.faults.late, faults.failed_fences += r.faults.failed_fences;
  faults.unknown_fences += r.faults.unknown_fences, faults.failed_copies += r.faults.failed_copies;
  faults.torn_copies += r.faults.torn_copies, faults.poisoned += r.faults.poisoned;
  faults.device_losses += r.faults.device_losses, faults.warmup_refusals += r.faults.warmup_refusals;
  trace_hash = fnv_u64(trace_hash == 0 ? fnv_basis : trace_hash, r.trace_hash);
}

std::string replay_command(std::uint64_t seed) { return fmt::format("build/release/src/cli/activekv swarm --seed {}", seed); }

std::string format_summary(const SwarmSummary& s, double seconds) {
  std::string out;
  out += fmt::format("seeds run            {} ({} failed) in {:.1f} s\n", s.seeds, s.seeds_failed, seconds);
  out += fmt::format("steps                {} ({} reported a fault and were discarded)\n", s.steps, s.steps_failed);
  out += fmt::format("requests             {} ({} completed, {} cancelled)\n", s.requests, s.requests_completed,
                     s.requests_cancelled);
  out += fmt::format("faults injected      late {}, failed fences {}, unknown fences {}, failed copies {} "
                     "(torn {}), poisoned waits {}, device losses {}, warm-up refusals {}\n",
                     s.faults.late, s.faults.failed_fences, s.faults.unknown_fences, s.faults.failed_copies,
                     s.faults.torn_copies, s.faults.poisoned, s.faults.device_losses, s.faults.warmup_refusals);
  out += fmt::format("rows verified        {}\n", s.rows_verified);
  out += fmt::format("outputs verified     {} tokens\n", s.outputs_verified);
  out += fmt::format("sparse selections    {} (context × layer, output checked over the selected pages)\n",
                     s.sparse_selections_verified);
  out += fmt::format("pages staged         {} (read through the tiles)\n", s.pages_staged);
  out += fmt::format("pages quarantined    {}\n", s.pages_quarantined);
  out += fmt::format("retired              {} staging tiles, {} host histories (after failed copies)\n", s.tiles_retired,
                     s.histories_retired);
  out += fmt::format("contexts recovered   {} (from their host histories)\n", s.contexts_recovered);
  out += fmt::format("contexts lost        {} (reported)\n", s.contexts_lost);
  out += fmt::format("conversations        {} follow-ups, {} adopted a retained history ({} tokens, rows checked)\n",
                     s.follow_ups, s.adoptions, s.tokens_reused);
  out += fmt::format("device pages         {} handed over in place, {} copied d2d on adopt (outputs checked)\n",
                     s.device_pages_handed_over, s.device_pages_copied);
  out += fmt::format("corrupted            {}\n", s.corrupted);
  out += fmt::format("trace hash           {:016x}\n", s.trace_hash);
  return out;
}

}  // namespace activekv::reliability
