// conformance_test.cpp — one suite, every backend present.
//
// Each test runs on every configuration in `configurations()`: the host
// backend threaded, the host backend deterministic (virtual clock, reordered
// completions), and every other backend the registry knows (opencl, cuda).
// A backend that is not built, or has no device, is skipped with the reason
// make_backend gave; nothing needs adding here when a backend lands — its
// factory is found through make_backend, and the held-DMA test uses the
// interface's hold_queue (a gated engine on the host, a user event on OpenCL).
//
// What is checked (DESIGN.md "Backends", "Fences, leases, quarantine"):
//   - batched h2d / d2d / d2h copies and upload/download round-trip byte-exact;
//   - a queue that waits on a fence (on the device) sees the copied data, and
//     does not run before it (checked with the copy engine held);
//   - the kernel matches an fp64 CPU reference within 2e-4 absolute (inputs in
//     [-1, 1]) on random page tables mixing pool pages and staged tiles, over
//     f32, f16 and bf16 and grouped-query shapes;
//   - outputs, page mass and carried state are bit-identical on one backend
//     between an all-resident layout and a mixed one, and between one call and
//     a split into passes;
//   - held DMA: its lease and its host range are refused for release and reuse,
//     and canaries prove no byte moved;
//   - fence rules: never-recorded and stale handles are never complete; the
//     compute queue cannot be synchronised from the host;
//   - after warm-up, copies, kernels and fences allocate nothing on the heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/lease.hpp"
#include "backends/host/attention_cpu.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using namespace std::chrono_literals;

struct Configuration {
  std::string label;
  std::string backend;
  BackendOptions options;
};

std::vector<Configuration> configurations() {
  std::vector<Configuration> list;
  BackendOptions threaded;
  threaded.compute_threads = 2;
  list.push_back({"host_threaded", "host", threaded});
  BackendOptions deterministic;
  deterministic.deterministic = true;
  deterministic.seed = 7;
  list.push_back({"host_deterministic", "host", deterministic});
  for (const std::string_view name : backend_names()) {
    if (name != "host") list.push_back({std::string(name), std::string(name), BackendOptions{}});
  }
  return list;
}

constexpr std::uint64_t arena_bytes = 8 * 1024 * 1024;
constexpr std::uint64_t pool_bytes = 8 * 1024 * 1024;

class Conformance : public ::testing::TestWithParam<Configuration> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Backend>> made = make_backend(GetParam().backend, GetParam().options);
    if (!made.ok()) {
      const ErrorCode code = made.error().code;
      if (code == ErrorCode::unsupported || code == ErrorCode::not_found) GTEST_SKIP() << made.error().describe();
      FAIL() << made.error().describe();
    }
    backend_ = std::move(made).value();
    MemoryRequest request;
    request.arena_bytes = arena_bytes;
    request.host_pool_bytes = pool_bytes;
    request.batch_pages_max = 4096;
    request.batch_queries_max = 256;
    request.q_heads_max = 16;
    request.head_dim_max = 128;
    const Status status = backend_->allocate(request);
    ASSERT_TRUE(status.ok()) << status.error().describe();
  }

  Backend& backend() { return *backend_; }

  // Waits on the host (the deterministic backend advances its clock) and drops the handle.
  FenceOutcome finish(Fence fence) {
    Result<FenceOutcome> outcome = backend_->wait_host(fence, 30s);
    EXPECT_TRUE(outcome.ok()) << (outcome.ok() ? "" : outcome.error().describe());
    backend_->release_fence(fence);
    return outcome.ok() ? outcome.value() : FenceOutcome::unknown;
  }

  void fill_random(std::span<std::byte> bytes, std::uint32_t seed) {
    std::mt19937 rng(seed);
    for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  }

  std::unique_ptr<Backend> backend_;
};

TEST_P(Conformance, CopiesRoundTripByteExact) {
  std::span<std::byte> pool = backend().host_pool();
  ASSERT_EQ(pool.size(), pool_bytes);
  fill_random(pool.subspan(0, 1 << 20), 11);
  // Batched h2d: 48 KiB-ish regions scattered into the arena.
  std::vector<CopyRegion> in;
  for (std::uint64_t i = 0; i < 16; ++i) in.push_back({i * 65536, (15 - i) * 131072 + 4096, 49152 + i * 8});
  Result<Fence> h2d = backend().copy(CopyDirection::h2d, in);
  ASSERT_TRUE(h2d.ok()) << h2d.error().describe();
  // d2d the whole set to a second arena area, then d2h back to pool offsets 4 MiB on.
  std::vector<CopyRegion> moved, out;
  for (const CopyRegion& r : in) {
    moved.push_back({r.dst_offset, r.dst_offset + 3 * 1024 * 1024, r.bytes});
    out.push_back({r.dst_offset + 3 * 1024 * 1024, 4 * 1024 * 1024 + r.src_offset, r.bytes});
  }
  const Fence first = h2d.value();
  Result<Fence> d2d = backend().capabilities().d2d
                          ? backend().copy(CopyDirection::d2d, moved, std::span<const Fence>(&first, 1))
                          : Result<Fence>(first);
  ASSERT_TRUE(d2d.ok()) << d2d.error().describe();
  if (!backend().capabilities().d2d) {
    // Without d2d, read straight back from where the h2d landed.
    for (CopyRegion& r : out) r.src_offset -= 3 * 1024 * 1024;
  }
  const Fence second = d2d.value();
  Result<Fence> d2h = backend().copy(CopyDirection::d2h, out, std::span<const Fence>(&second, 1));
  ASSERT_TRUE(d2h.ok()) << d2h.error().describe();
  EXPECT_EQ(finish(d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(finish(h2d.value()), FenceOutcome::signalled);
  if (backend().capabilities().d2d) {
    EXPECT_EQ(finish(d2d.value()), FenceOutcome::signalled);
  }
  for (const CopyRegion& r : in) {
    ASSERT_EQ(std::memcmp(pool.data() + r.src_offset, pool.data() + 4 * 1024 * 1024 + r.src_offset, r.bytes), 0)
        << "region at pool offset " << r.src_offset;
  }
  // upload / download from caller memory.
  std::vector<std::byte> source(100000), back(100000);
  fill_random(source, 12);
  Result<Fence> up = backend().upload(7 * 1024 * 1024 + 3, source);
  ASSERT_TRUE(up.ok());
  const Fence up_fence = up.value();
  Result<Fence> down = backend().download(7 * 1024 * 1024 + 3, back, std::span<const Fence>(&up_fence, 1));
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(finish(down.value()), FenceOutcome::signalled);
  EXPECT_EQ(finish(up_fence), FenceOutcome::signalled);
  EXPECT_EQ(source, back);
  const BackendStats stats = backend().stats();
  EXPECT_EQ(stats.copy_regions[static_cast<int>(CopyDirection::h2d)], 17u);
  EXPECT_EQ(stats.fences_failed, 0u);
}

TEST_P(Conformance, BadRequestsAreClearErrors) {
  const CopyRegion outside{0, arena_bytes - 10, 11};
  Result<Fence> r = backend().copy(CopyDirection::h2d, std::span<const CopyRegion>(&outside, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("outside"), std::string::npos) << r.error().message;
  EXPECT_FALSE(backend().copy(CopyDirection::d2h, std::span<const CopyRegion>()).ok());
  const Fence never{};
  const CopyRegion fine{0, 0, 16};
  r = backend().copy(CopyDirection::h2d, std::span<const CopyRegion>(&fine, 1), std::span<const Fence>(&never, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("never recorded"), std::string::npos);
  EXPECT_EQ(backend().query(never), FenceOutcome::unknown) << "a fence never recorded is not complete";
  EXPECT_FALSE(backend().wait_host(never, 1ms).ok());
  const Status sync = backend().synchronize(QueueKind::compute);
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.error().code, ErrorCode::refused);
  EXPECT_TRUE(backend().synchronize(QueueKind::h2d).ok());
  MemoryRequest again;
  again.arena_bytes = 1;
  again.host_pool_bytes = 1;
  EXPECT_FALSE(backend().allocate(again).ok()) << "allocation happens once";
  // A stale handle: recorded, resolved, released, slot recycled.
  Result<Fence> marker = backend().record(QueueKind::d2h);
  ASSERT_TRUE(marker.ok());
  const Fence stale = marker.value();
  EXPECT_EQ(finish(stale), FenceOutcome::signalled);
  EXPECT_EQ(backend().query(stale), FenceOutcome::unknown) << "a released fence reads unknown, never signalled";
  EXPECT_FALSE(backend().enqueue_wait(QueueKind::compute, std::span<const Fence>(&stale, 1)).ok());
}

TEST_P(Conformance, AQueueThatWaitsOnAFenceSeesTheCopiedData) {
  std::span<std::byte> pool = backend().host_pool();
  fill_random(pool.subspan(0, 262144), 21);
  std::fill(pool.begin() + 1048576, pool.begin() + 1048576 + 262144, std::byte{0});
  const bool can_hold = backend().capabilities().can_hold_queue;
  if (can_hold) {
    ASSERT_TRUE(backend().hold_queue(QueueKind::h2d).ok());
  }
  const CopyRegion in{0, 524288, 262144};
  Result<Fence> h2d = backend().copy(CopyDirection::h2d, std::span<const CopyRegion>(&in, 1));
  ASSERT_TRUE(h2d.ok());
  const Fence copied = h2d.value();
  // The d2h queue waits for the h2d fence on the device; the host does not block.
  ASSERT_TRUE(backend().enqueue_wait(QueueKind::d2h, std::span<const Fence>(&copied, 1)).ok());
  const CopyRegion out{524288, 1048576, 262144};
  Result<Fence> d2h = backend().copy(CopyDirection::d2h, std::span<const CopyRegion>(&out, 1));
  ASSERT_TRUE(d2h.ok());
  if (can_hold) {
    backend().poll();
    EXPECT_EQ(backend().query(d2h.value()), FenceOutcome::pending) << "the d2h ran before the copy it waits on";
    EXPECT_TRUE(std::all_of(pool.begin() + 1048576, pool.begin() + 1048576 + 262144, [](std::byte b) { return b == std::byte{0}; }));
    ASSERT_TRUE(backend().release_queue(QueueKind::h2d).ok());
  }
  EXPECT_EQ(finish(d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(finish(copied), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(pool.data(), pool.data() + 1048576, 262144), 0);
}

// ---- attention ------------------------------------------------------------------------

std::uint16_t to_f16(float value) {
  // Round-to-nearest-even f32 -> f16 for values in the normal range used here.
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  std::uint32_t mantissa = bits & 0x7fffffu;
  if (exponent <= 0) return static_cast<std::uint16_t>(sign);  // tiny: flush (test data avoids it)
  std::uint32_t half = (static_cast<std::uint32_t>(exponent) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

std::uint16_t to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

void store(DType dtype, float value, std::byte* at) {
  if (dtype == DType::f32) {
    std::memcpy(at, &value, 4);
  } else {
    const std::uint16_t h = dtype == DType::f16 ? to_f16(value) : to_bf16(value);
    std::memcpy(at, &h, 2);
  }
}

// One context x layer of history in the host pool, and the ways to lay it out.
struct Scenario {
  AttentionShape shape;
  std::uint32_t page_tokens = 0;   // P
  std::uint32_t tile_tokens = 0;   // T (a multiple of P)
  std::uint32_t tokens = 0;        // history length (the newest rows included)
  std::uint32_t queries = 0;       // the newest `queries` positions attend
  std::vector<float> q;            // [queries][q_heads][head_dim]
  std::vector<std::uint32_t> positions;
  std::uint64_t host_offset = 0;   // segment start in the pool
  std::uint64_t pool_pages_offset = 0;  // arena: page pool
  std::uint64_t tiles_offset = 0;       // arena: tiles

  std::uint32_t pages() const { return (tokens + page_tokens - 1) / page_tokens; }
  std::uint64_t row_bytes() const { return shape.row_bytes(); }
  std::uint64_t page_bytes() const { return row_bytes() * page_tokens; }
};

Scenario make_scenario(std::mt19937& rng, std::span<std::byte> pool) {
  Scenario s;
  const auto pick = [&rng](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  const std::uint32_t kv_heads = 1 + pick(3);
  const std::uint32_t group = 1 + pick(3);
  const std::uint32_t dims[] = {16, 32, 64, 72, 128};
  const DType dtypes[] = {DType::f16, DType::bf16, DType::f32};
  s.shape.kv_heads = kv_heads;
  s.shape.q_heads = kv_heads * group;
  s.shape.head_dim = dims[pick(5)];
  s.shape.dtype = dtypes[pick(3)];
  s.shape.scale = 1.0f / std::sqrt(static_cast<float>(s.shape.head_dim));
  const std::uint32_t ps[] = {4, 8, 16};
  s.page_tokens = ps[pick(3)];
  s.tile_tokens = s.page_tokens * (1 + pick(4));
  s.tokens = 1 + pick(400);
  s.queries = 1 + pick(std::min<std::uint32_t>(s.tokens, 6));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const std::uint64_t rows = std::uint64_t{s.pages()} * s.page_tokens;
  const std::uint32_t elements = 2 * kv_heads * s.shape.head_dim;
  const std::uint32_t element_bytes = dtype_bytes(s.shape.dtype);
  EXPECT_LE(rows * s.row_bytes(), pool.size());
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint32_t e = 0; e < elements; ++e) {
      const float value = r < s.tokens ? uniform(rng) : 0.0f;
      store(s.shape.dtype, value, pool.data() + s.host_offset + r * s.row_bytes() + e * element_bytes);
    }
  }
  s.q.resize(std::size_t{s.queries} * s.shape.q_heads * s.shape.head_dim);
  for (float& x : s.q) x = uniform(rng) * 2.0f;
  for (std::uint32_t i = 0; i < s.queries; ++i) s.positions.push_back(s.tokens - s.queries + i);
  s.pool_pages_offset = 0;
  s.tiles_offset = arena_bytes / 2;
  return s;
}

// Stages the scenario into the arena: pages with resident[k] go to a shuffled
// pool slot, runs of the others into tiles (T/P pages per tile, a tile holding
// a contiguous run of pages). Returns the page table, copies done and waited.
std::vector<AttentionPage> lay_out(Backend& backend, const Scenario& s, const std::vector<bool>& resident, std::mt19937& rng) {
  const std::uint32_t pages = s.pages();
  std::vector<std::uint32_t> slots(pages);
  std::iota(slots.begin(), slots.end(), 0u);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<AttentionPage> table(pages);
  std::vector<CopyRegion> regions;
  const std::uint32_t pages_per_tile = s.tile_tokens / s.page_tokens;
  std::uint32_t tile = 0;
  for (std::uint32_t k = 0; k < pages;) {
    const std::uint32_t valid = std::min(s.page_tokens, s.tokens - k * s.page_tokens);
    if (resident[k]) {
      const std::uint64_t offset = s.pool_pages_offset + slots[k] * s.page_bytes();
      regions.push_back({s.host_offset + k * s.page_bytes(), offset, s.page_bytes()});
      table[k] = {offset, k * s.page_tokens, valid};
      ++k;
      continue;
    }
    // A run of staged pages, up to a tile, copied as one region.
    std::uint32_t run = 0;
    const std::uint64_t tile_offset = s.tiles_offset + std::uint64_t{tile} * s.tile_tokens * s.row_bytes();
    while (k + run < pages && !resident[k + run] && run < pages_per_tile) {
      const std::uint32_t kk = k + run;
      table[kk] = {tile_offset + run * s.page_bytes(), kk * s.page_tokens, std::min(s.page_tokens, s.tokens - kk * s.page_tokens)};
      ++run;
    }
    regions.push_back({s.host_offset + k * s.page_bytes(), tile_offset, run * s.page_bytes()});
    k += run;
    ++tile;
  }
  Result<Fence> copied = backend.copy(CopyDirection::h2d, regions);
  EXPECT_TRUE(copied.ok());
  Result<FenceOutcome> outcome = backend.wait_host(copied.value(), 30s);
  EXPECT_TRUE(outcome.ok() && outcome.value() == FenceOutcome::signalled);
  backend.release_fence(copied.value());
  return table;
}

struct Attended {
  std::vector<float> output, mass, state;
};

// A batch of the scenario's queries over `pages` as one task; `task` must outlive the batch.
AttentionBatch one_task_batch(const Scenario& s, const AttentionTask& task, std::span<const AttentionPage> pages) {
  AttentionBatch batch;
  batch.shape = s.shape;
  batch.tasks = std::span<const AttentionTask>(&task, 1);
  batch.pages = pages;
  batch.query_positions = s.positions;
  batch.queries = s.q;
  return batch;
}

Attended attend(Backend& backend, const Scenario& s, const std::vector<AttentionPage>& table, bool with_mass = true,
                std::span<const std::uint32_t> page_heads = {}, std::uint32_t window_tokens = 0) {
  Attended run;
  run.output.assign(s.q.size(), -7.0f);
  if (with_mass) run.mass.assign(table.size(), -7.0f);
  const AttentionTask task{0, static_cast<std::uint32_t>(table.size()), 0, s.queries};
  AttentionBatch batch = one_task_batch(s, task, table);
  batch.output = run.output;
  batch.page_mass = run.mass;
  batch.page_heads = page_heads;
  batch.window_tokens = window_tokens;
  Result<Fence> fence = backend.attention(batch);
  EXPECT_TRUE(fence.ok()) << (fence.ok() ? "" : fence.error().describe());
  Result<FenceOutcome> outcome = backend.wait_host(fence.value(), 30s);
  EXPECT_TRUE(outcome.ok() && outcome.value() == FenceOutcome::signalled);
  backend.release_fence(fence.value());
  return run;
}

// The reference reads a host mirror of the arena laid out like the table.
std::vector<float> reference(const Scenario& s, const std::vector<AttentionPage>& table, std::span<const std::byte> pool,
                             std::span<const std::uint32_t> page_heads = {}, std::uint32_t window_tokens = 0) {
  // Rebuild the table over the pool segment itself: page k at host_offset + k x page_bytes.
  std::vector<AttentionPage> host_table(table);
  for (std::size_t k = 0; k < table.size(); ++k) host_table[k].arena_offset = s.host_offset + k * s.page_bytes();
  const AttentionTask task{0, static_cast<std::uint32_t>(table.size()), 0, s.queries};
  AttentionBatch batch = one_task_batch(s, task, host_table);
  batch.page_heads = page_heads;
  batch.window_tokens = window_tokens;
  std::vector<float> out(s.q.size());
  host::attention_reference(pool.data(), batch, out);
  return out;
}

TEST_P(Conformance, AttentionMatchesTheReferenceOnMixedPageTables) {
  constexpr float tolerance = 2e-4f;
  float worst = 0.0f;
  for (std::uint32_t seed = 1; seed <= 24; ++seed) {
    std::mt19937 rng(seed);
    const Scenario s = make_scenario(rng, backend().host_pool());
    std::vector<bool> resident(s.pages());
    for (std::size_t k = 0; k < resident.size(); ++k) resident[k] = (rng() % 2) == 0;
    resident[0] = true;                    // the sink
    resident[resident.size() - 1] = true;  // the tail
    const std::vector<AttentionPage> table = lay_out(backend(), s, resident, rng);
    const Attended run = attend(backend(), s, table);
    const std::vector<float> expected = reference(s, table, backend().host_pool());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const float error = std::fabs(run.output[i] - expected[i]);
      worst = std::max(worst, error);
      ASSERT_LE(error, tolerance) << "seed " << seed << " element " << i << " dtype " << dtype_name(s.shape.dtype)
                                  << " head_dim " << s.shape.head_dim;
    }
    // Mass: every page of the task shares the softmax; the shares sum to 1 for the last query
    // and are within [0, 1].
    float total = 0.0f;
    for (float m : run.mass) {
      ASSERT_GE(m, 0.0f);
      ASSERT_LE(m, 1.0f + 1e-5f);
      total += m;
    }
    ASSERT_NEAR(total, 1.0f, 1e-4f) << "seed " << seed;
  }
  RecordProperty("worst_abs_error", std::to_string(worst));
}

// Sliding-window layers: a query at p reads keys in (p − W, p] only. Where the kernel has the
// window: against the fp64 reference with the same window, the page mass still summing to 1;
// elsewhere the batch is refused (unsupported), never computed without the mask.
TEST_P(Conformance, WindowBatchesMatchTheReferenceOrAreRefused) {
  constexpr float tolerance = 2e-4f;
  for (std::uint32_t seed = 300; seed < 312; ++seed) {
    std::mt19937 rng(seed);
    const Scenario s = make_scenario(rng, backend().host_pool());
    std::vector<bool> resident(s.pages());
    for (std::size_t k = 0; k < resident.size(); ++k) resident[k] = (rng() % 2) == 0;
    const std::vector<AttentionPage> table = lay_out(backend(), s, resident, rng);
    const std::uint32_t window = 1 + static_cast<std::uint32_t>(rng() % (s.positions.back() + 1));
    if (!backend().capabilities().attention_window) {
      const AttentionTask task{0, static_cast<std::uint32_t>(table.size()), 0, s.queries};
      std::vector<float> out(s.q.size());
      AttentionBatch batch = one_task_batch(s, task, table);
      batch.output = out;
      batch.window_tokens = window;
      Result<Fence> fence = backend().attention(batch);
      ASSERT_FALSE(fence.ok()) << backend().name() << " computed a window batch it has no window for";
      EXPECT_EQ(fence.error().code, ErrorCode::unsupported);
      continue;
    }
    const Attended run = attend(backend(), s, table, true, {}, window);
    const std::vector<float> expected = reference(s, table, backend().host_pool(), {}, window);
    const std::vector<float> unmasked = reference(s, table, backend().host_pool());
    bool masks = false;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_LE(std::fabs(run.output[i] - expected[i]), tolerance) << "seed " << seed << " window " << window;
      masks = masks || expected[i] != unmasked[i];
    }
    if (window <= s.positions.front()) {
      EXPECT_TRUE(masks) << "seed " << seed << ": the window must change the output";
    }
    float total = 0.0f;
    for (float m : run.mass) total += m;
    ASSERT_NEAR(total, 1.0f, 1e-4f) << "seed " << seed;
  }
}

// Per-KV-head page lists (sparse attention): each KV head's query heads read only the pages whose
// mask names it. Against the fp64 reference over each head's pages; bit-identical to a call over
// that head's pages alone (no mask), and an all-heads mask to no mask; the page mass still sums to 1.
TEST_P(Conformance, PerHeadPageListsMatchTheReferenceAndTheHeadsOwnPages) {
  if (!backend().capabilities().page_heads) GTEST_SKIP() << backend().name() << " does not read page_heads";
  constexpr float tolerance = 2e-4f;
  for (std::uint32_t seed = 200; seed < 216; ++seed) {
    std::mt19937 rng(seed);
    const Scenario s = make_scenario(rng, backend().host_pool());
    const std::uint32_t kv = s.shape.kv_heads;
    const std::uint32_t group = s.shape.q_heads / kv;
    const std::uint32_t all = (1u << kv) - 1u;
    std::vector<bool> resident(s.pages());
    for (std::size_t k = 0; k < resident.size(); ++k) resident[k] = (rng() % 2) == 0;
    const std::vector<AttentionPage> table = lay_out(backend(), s, resident, rng);
    std::vector<std::uint32_t> heads(table.size());
    for (std::uint32_t& h : heads) h = 1u + static_cast<std::uint32_t>(rng() % all);  // non-empty
    heads.front() = all;  // every head reads at least one page its queries see
    heads.back() = all;
    const Attended masked = attend(backend(), s, table, true, heads);
    const std::vector<float> expected = reference(s, table, backend().host_pool(), heads);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_LE(std::fabs(masked.output[i] - expected[i]), tolerance) << "seed " << seed << " element " << i;
    }
    float total = 0.0f;
    for (float m : masked.mass) total += m;
    ASSERT_NEAR(total, 1.0f, 1e-4f) << "seed " << seed;
    // Each KV head: the same bits as a call over its own pages only.
    const std::size_t head_floats = s.shape.head_dim;
    for (std::uint32_t k = 0; k < kv; ++k) {
      std::vector<AttentionPage> own;
      for (std::size_t p = 0; p < table.size(); ++p) {
        if (((heads[p] >> k) & 1u) != 0) own.push_back(table[p]);
      }
      const Attended alone = attend(backend(), s, own, false);
      for (std::uint32_t q = 0; q < s.queries; ++q) {
        for (std::uint32_t g = 0; g < group; ++g) {
          const std::size_t at = (std::size_t{q} * s.shape.q_heads + k * group + g) * head_floats;
          ASSERT_EQ(std::memcmp(masked.output.data() + at, alone.output.data() + at, head_floats * 4), 0)
              << "seed " << seed << " kv head " << k << " query " << q;
        }
      }
    }
    // Every head reading every page: the bits of the call without page_heads.
    const std::vector<std::uint32_t> every(table.size(), all);
    const Attended plain = attend(backend(), s, table);
    const Attended full = attend(backend(), s, table, true, every);
    ASSERT_EQ(std::memcmp(plain.output.data(), full.output.data(), plain.output.size() * 4), 0) << "seed " << seed;
    ASSERT_EQ(std::memcmp(plain.mass.data(), full.mass.data(), plain.mass.size() * 4), 0) << "seed " << seed;
  }
  // A mask naming no head, or a head past kv_heads, is a clear error.
  std::mt19937 rng(1);
  const Scenario s = make_scenario(rng, backend().host_pool());
  const std::vector<AttentionPage> table = lay_out(backend(), s, std::vector<bool>(s.pages(), true), rng);
  for (const std::uint32_t bad : {0u, 1u << s.shape.kv_heads}) {
    std::vector<std::uint32_t> heads(table.size(), 1u);
    heads.back() = bad;
    std::vector<float> out(s.q.size());
    const AttentionTask task{0, static_cast<std::uint32_t>(table.size()), 0, s.queries};
    AttentionBatch batch = one_task_batch(s, task, table);
    batch.output = out;
    batch.page_heads = heads;
    const Result<Fence> refused = backend().attention(batch);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().describe().find("page_heads"), std::string::npos) << refused.error().describe();
  }
}

TEST_P(Conformance, AttentionIsBitIdenticalAcrossLayoutsAndPasses) {
  for (std::uint32_t seed = 100; seed < 112; ++seed) {
    std::mt19937 rng(seed);
    const Scenario s = make_scenario(rng, backend().host_pool());
    const std::vector<bool> all(s.pages(), true);
    std::vector<bool> mixed(s.pages());
    for (std::size_t k = 0; k < mixed.size(); ++k) mixed[k] = (rng() % 3) == 0;
    mixed[0] = true;
    const std::vector<AttentionPage> resident_table = lay_out(backend(), s, all, rng);
    const Attended resident = attend(backend(), s, resident_table);
    const std::vector<AttentionPage> mixed_table = lay_out(backend(), s, mixed, rng);
    const Attended staged = attend(backend(), s, mixed_table);
    ASSERT_EQ(std::memcmp(resident.output.data(), staged.output.data(), resident.output.size() * 4), 0) << "seed " << seed;
    ASSERT_EQ(std::memcmp(resident.mass.data(), staged.mass.data(), resident.mass.size() * 4), 0) << "seed " << seed;

    // Two passes with the running state carried between them equal one call.
    const std::uint32_t split = static_cast<std::uint32_t>(mixed_table.size() / 2);
    const std::size_t state_floats = std::size_t{s.queries} * s.shape.q_heads * (2 + s.shape.head_dim);
    std::vector<float> state(state_floats), output(s.q.size());
    for (int pass = 0; pass < 2; ++pass) {
      const AttentionTask task = pass == 0 ? AttentionTask{0, split, 0, s.queries}
                                           : AttentionTask{split, static_cast<std::uint32_t>(mixed_table.size()) - split, 0, s.queries};
      AttentionBatch batch = one_task_batch(s, task, mixed_table);
      batch.state = state;
      batch.load_state = pass == 1;
      batch.store_state = pass == 0;
      batch.write_output = pass == 1;
      if (pass == 1) batch.output = output;
      Result<Fence> fence = backend().attention(batch);
      ASSERT_TRUE(fence.ok()) << fence.error().describe();
      ASSERT_EQ(finish(fence.value()), FenceOutcome::signalled);
    }
    ASSERT_EQ(std::memcmp(output.data(), staged.output.data(), output.size() * 4), 0) << "seed " << seed << ": passes";
  }
}

TEST_P(Conformance, BatchedTasksEqualSeparateCalls) {
  std::mt19937 rng(500);
  // Two contexts of the same shape in different pool segments, one batch.
  Scenario a = make_scenario(rng, backend().host_pool());
  std::mt19937 rng_b(501);
  Scenario b;
  do {
    rng_b.seed(static_cast<std::uint32_t>(rng_b()));
    b = make_scenario(rng_b, backend().host_pool().subspan(4 * 1024 * 1024));
  } while (b.shape.q_heads != a.shape.q_heads || b.shape.kv_heads != a.shape.kv_heads ||
           b.shape.head_dim != a.shape.head_dim || b.shape.dtype != a.shape.dtype);
  b.host_offset = 4 * 1024 * 1024;
  // make_scenario wrote b's rows at offset 0 of the subspan, i.e. pool offset 4 MiB.
  b.pool_pages_offset = arena_bytes / 4;
  b.tiles_offset = arena_bytes / 2 + arena_bytes / 4;
  const std::vector<AttentionPage> ta = lay_out(backend(), a, std::vector<bool>(a.pages(), true), rng);
  const std::vector<AttentionPage> tb = lay_out(backend(), b, std::vector<bool>(b.pages(), false), rng);
  const Attended ra = attend(backend(), a, ta, false);
  const Attended rb = attend(backend(), b, tb, false);
  std::vector<AttentionPage> pages(ta);
  pages.insert(pages.end(), tb.begin(), tb.end());
  const AttentionTask tasks[2] = {{0, static_cast<std::uint32_t>(ta.size()), 0, a.queries},
                                  {static_cast<std::uint32_t>(ta.size()), static_cast<std::uint32_t>(tb.size()), a.queries, b.queries}};
  std::vector<std::uint32_t> positions(a.positions);
  positions.insert(positions.end(), b.positions.begin(), b.positions.end());
  std::vector<float> queries(a.q);
  queries.insert(queries.end(), b.q.begin(), b.q.end());
  std::vector<float> output(queries.size());
  AttentionBatch batch;
  batch.shape = a.shape;
  batch.tasks = tasks;
  batch.pages = pages;
  batch.query_positions = positions;
  batch.queries = queries;
  batch.output = output;
  Result<Fence> fence = backend().attention(batch);
  ASSERT_TRUE(fence.ok()) << fence.error().describe();
  ASSERT_EQ(finish(fence.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(output.data(), ra.output.data(), ra.output.size() * 4), 0);
  EXPECT_EQ(std::memcmp(output.data() + ra.output.size(), rb.output.data(), rb.output.size() * 4), 0);
}

// ---- held DMA ----------------------------------------------------------------------------

TEST_P(Conformance, HeldDmaKeepsItsLeaseAndHostPagesAndMovesNoByte) {
  if (!backend().capabilities().can_hold_queue) GTEST_SKIP() << "this backend cannot hold a copy engine";
  constexpr std::uint64_t bytes = 196608;  // 256 rows of 768 bytes
  constexpr std::uint64_t tile_slot_bytes = 262144;
  std::span<std::byte> pool = backend().host_pool();
  fill_random(pool.subspan(0, bytes), 31);
  // Canary the whole tile slot 1 in the arena (and wait for it).
  std::vector<std::byte> canary(tile_slot_bytes, std::byte{0xA5});
  Result<Fence> painted = backend().upload(tile_slot_bytes, canary);
  ASSERT_TRUE(painted.ok());
  ASSERT_EQ(finish(painted.value()), FenceOutcome::signalled);

  StagingLeases leases(backend(), 4);
  CopyTickets tickets(backend(), 16);
  Lease lease;
  Ticket ticket;
  ASSERT_EQ(leases.acquire_slot(1, &lease), LeaseStatus::ok);
  ASSERT_EQ(tickets.open(0, bytes, HostAccess::read, &ticket), LeaseStatus::ok);

  ASSERT_TRUE(backend().hold_queue(QueueKind::h2d).ok());
  const CopyRegion region{0, tile_slot_bytes, bytes};
  Result<Fence> copy = backend().copy(CopyDirection::h2d, std::span<const CopyRegion>(&region, 1));
  ASSERT_TRUE(copy.ok());
  ASSERT_EQ(leases.copy_issued(lease, copy.value()), LeaseStatus::ok);
  ASSERT_EQ(tickets.attach(ticket, copy.value()), LeaseStatus::ok);
  backend().poll();
  leases.poll();
  tickets.poll();

  // Releasing or reusing the lease, or the host range, is refused.
  EXPECT_EQ(leases.release(lease), LeaseStatus::fences_pending);
  Lease other;
  EXPECT_EQ(leases.acquire_slot(1, &other), LeaseStatus::busy);
  Ticket overwrite;
  EXPECT_EQ(tickets.open(4096, 768, HostAccess::write, &overwrite), LeaseStatus::busy);
  EXPECT_TRUE(tickets.host_range_busy(0, bytes));
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::fences_pending);
  EXPECT_EQ(leases.state(lease), LeaseState::copy_issued);

  // The canary proves the held copy moved nothing (read on the d2h queue, which is not held).
  std::vector<std::byte> seen(tile_slot_bytes);
  Result<Fence> peek = backend().download(tile_slot_bytes, seen);
  ASSERT_TRUE(peek.ok());
  ASSERT_EQ(finish(peek.value()), FenceOutcome::signalled);
  EXPECT_EQ(seen, canary) << "a byte of the tile changed while its copy was held";
  EXPECT_EQ(backend().query(copy.value()), FenceOutcome::pending);

  ASSERT_TRUE(backend().release_queue(QueueKind::h2d).ok());
  ASSERT_EQ(backend().wait_host(copy.value(), 30s).value(), FenceOutcome::signalled);
  leases.poll();
  EXPECT_EQ(leases.state(lease), LeaseState::ready);
  EXPECT_EQ(leases.release(lease), LeaseStatus::ok);
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::ok);
  EXPECT_FALSE(tickets.host_range_busy(0, bytes));
  backend().release_fence(copy.value());

  Result<Fence> check = backend().download(tile_slot_bytes, seen);
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(finish(check.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(seen.data(), pool.data(), bytes), 0) << "the released copy landed";
  EXPECT_TRUE(std::all_of(seen.begin() + bytes, seen.end(), [](std::byte b) { return b == std::byte{0xA5}; }))
      << "bytes past the copy are still canary";
}

TEST_P(Conformance, HeldWriteBackKeepsItsHostRange) {
  if (!backend().capabilities().can_hold_queue) GTEST_SKIP() << "this backend cannot hold a copy engine";
  constexpr std::uint64_t host = 2 * 1024 * 1024, bytes = 768 * 16;
  std::span<std::byte> pool = backend().host_pool();
  std::fill(pool.begin() + host - 4096, pool.begin() + host + bytes + 4096, std::byte{0x5A});
  std::vector<std::byte> rows(bytes);
  fill_random(rows, 41);
  Result<Fence> up = backend().upload(65536, rows);
  ASSERT_TRUE(up.ok());
  ASSERT_EQ(finish(up.value()), FenceOutcome::signalled);

  CopyTickets tickets(backend(), 4);
  Ticket ticket;
  ASSERT_EQ(tickets.open(host, bytes, HostAccess::write, &ticket), LeaseStatus::ok);
  ASSERT_TRUE(backend().hold_queue(QueueKind::d2h).ok());
  const CopyRegion region{65536, host, bytes};
  Result<Fence> d2h = backend().copy(CopyDirection::d2h, std::span<const CopyRegion>(&region, 1));
  ASSERT_TRUE(d2h.ok());
  ASSERT_EQ(tickets.attach(ticket, d2h.value()), LeaseStatus::ok);
  backend().poll();
  Ticket reader;
  EXPECT_EQ(tickets.open(host + 100, 10, HostAccess::read, &reader), LeaseStatus::busy) << "DMA writes there";
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::fences_pending);
  EXPECT_TRUE(std::all_of(pool.begin() + host - 4096, pool.begin() + host + bytes + 4096, [](std::byte b) { return b == std::byte{0x5A}; }))
      << "the held write-back touched the host range";
  ASSERT_TRUE(backend().release_queue(QueueKind::d2h).ok());
  ASSERT_EQ(backend().wait_host(d2h.value(), 30s).value(), FenceOutcome::signalled);
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::ok);
  backend().release_fence(d2h.value());
  EXPECT_EQ(std::memcmp(pool.data() + host, rows.data(), bytes), 0);
  EXPECT_TRUE(std::all_of(pool.begin() + host - 4096, pool.begin() + host, [](std::byte b) { return b == std::byte{0x5A}; }));
  EXPECT_TRUE(std::all_of(pool.begin() + host + bytes, pool.begin() + host + bytes + 4096, [](std::byte b) { return b == std::byte{0x5A}; }));
}

// ---- allocation ----------------------------------------------------------------------------

TEST_P(Conformance, StepsAfterWarmUpAllocateNothing) {
  std::mt19937 rng(77);
  const Scenario s = make_scenario(rng, backend().host_pool());
  std::vector<bool> mixed(s.pages(), false);
  mixed[0] = true;
  const std::vector<AttentionPage> table = lay_out(backend(), s, mixed, rng);
  std::vector<float> output(s.q.size()), mass(table.size());
  const AttentionTask task{0, static_cast<std::uint32_t>(table.size()), 0, s.queries};
  AttentionBatch batch = one_task_batch(s, task, table);
  batch.output = output;
  batch.page_mass = mass;
  const CopyRegion region{0, s.tiles_offset, s.page_bytes()};
  const CopyRegion back{s.tiles_offset, 6 * 1024 * 1024, s.row_bytes()};
  // One warm-up step (first use of any lazily built backend state).
  auto step = [&] {
    Result<Fence> staged = backend().copy(CopyDirection::h2d, std::span<const CopyRegion>(&region, 1));
    const Fence staged_fence = staged.value();
    Result<Fence> attended = backend().attention(batch, std::span<const Fence>(&staged_fence, 1));
    const Fence attended_fence = attended.value();
    Result<Fence> written = backend().copy(CopyDirection::d2h, std::span<const CopyRegion>(&back, 1),
                                           std::span<const Fence>(&attended_fence, 1));
    const FenceOutcome outcome = backend().wait_host(written.value(), 30s).value();
    (void)backend().query(staged_fence);
    backend().release_fence(staged_fence);
    backend().release_fence(attended_fence);
    backend().release_fence(written.value());
    return outcome;
  };
  ASSERT_EQ(step(), FenceOutcome::signalled);
  const auto device_before = backend().stats().device_allocations;
  const auto before = testing::heap_allocations();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(step(), FenceOutcome::signalled);
  EXPECT_EQ(testing::heap_allocations(), before) << "heap allocations on the step path";
  EXPECT_EQ(backend().stats().device_allocations, device_before) << "device allocations on the step path";
  EXPECT_GE(device_before, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(configurations()),
                         [](const ::testing::TestParamInfo<Configuration>& param_info) { return param_info.param.label; });

}  // namespace
}  // namespace activekv
