// host_backend_test.cpp — what only the host backend offers: the seeded
// virtual clock, its faults, device loss, and the rules faults keep.
//
// The property test is the heart: over many seeds, random staging traffic
// (tile leases, host tickets, h2d copies that wait on earlier fences, d2d
// reads of the tiles) runs under injected late, failed and unknown fences and
// failed copies. After every poll: a lease that became ready holds exactly the
// host bytes it staged. At the end, with no new work, everything drains: every
// buffer is free or quarantined, and the quarantined ones are exactly those a
// failed or unknown fence touched.
#include "backends/host/host_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "activekv/lease.hpp"

namespace activekv::host {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t arena_bytes = 1 << 20;
constexpr std::uint64_t pool_bytes = 1 << 20;

std::unique_ptr<HostBackend> make(const BackendOptions& options) {
  auto backend = std::make_unique<HostBackend>(options);
  MemoryRequest request;
  request.arena_bytes = arena_bytes;
  request.host_pool_bytes = pool_bytes;
  request.batch_pages_max = 256;
  request.batch_queries_max = 16;
  request.q_heads_max = 8;
  request.head_dim_max = 64;
  request.copy_regions_max = 64;
  EXPECT_TRUE(backend->allocate(request).ok());
  return backend;
}

BackendOptions deterministic(std::uint64_t seed, FaultRates faults = {}) {
  BackendOptions options;
  options.deterministic = true;
  options.seed = seed;
  options.faults = faults;
  return options;
}

Fence copy(HostBackend& backend, CopyDirection direction, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes,
           std::span<const Fence> waits = {}) {
  const CopyRegion region{src, dst, bytes};
  Result<Fence> fence = backend.copy(direction, std::span<const CopyRegion>(&region, 1), waits);
  EXPECT_TRUE(fence.ok()) << (fence.ok() ? "" : fence.error().describe());
  return fence.ok() ? fence.value() : Fence{};
}

// The order and outcome of every resolution, as the clock advances.
std::vector<std::pair<std::uint32_t, FenceOutcome>> trace_run(std::uint64_t seed) {
  FaultRates faults;
  faults.late_fence = 0.2;
  faults.failed_fence = 0.1;
  faults.unknown_fence = 0.1;
  faults.failed_copy = 0.1;
  auto backend = make(deterministic(seed, faults));
  std::vector<Fence> fences;
  for (std::uint32_t i = 0; i < 40; ++i) {
    const CopyDirection direction = i % 3 == 0 ? CopyDirection::h2d : i % 3 == 1 ? CopyDirection::d2d : CopyDirection::d2h;
    const Fence waits[1] = {fences.empty() ? Fence{} : fences[fences.size() / 2]};
    fences.push_back(copy(*backend, direction, i * 4096, i * 4096 + 512 * 1024, 4096,
                          fences.empty() ? std::span<const Fence>() : std::span<const Fence>(waits)));
  }
  std::vector<std::pair<std::uint32_t, FenceOutcome>> trace;
  std::vector<bool> seen(fences.size(), false);
  while (backend->outstanding() > 0) {
    backend->advance(7);
    for (std::uint32_t i = 0; i < fences.size(); ++i) {
      const FenceOutcome outcome = backend->query(fences[i]);
      if (!seen[i] && is_resolved(outcome)) {
        seen[i] = true;
        trace.emplace_back(i, outcome);
      }
    }
  }
  return trace;
}

TEST(HostDeterministic, TheSameSeedGivesTheSameRun) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) EXPECT_EQ(trace_run(seed), trace_run(seed)) << "seed " << seed;
  std::set<std::vector<std::pair<std::uint32_t, FenceOutcome>>> distinct;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) distinct.insert(trace_run(seed));
  EXPECT_GT(distinct.size(), 1u) << "the seed changes nothing";
}

TEST(HostDeterministic, CompletionsWaitForTheClock) {
  auto backend = make(deterministic(3));
  const Fence fence = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
  EXPECT_EQ(backend->query(fence), FenceOutcome::pending);
  backend->poll();
  EXPECT_EQ(backend->query(fence), FenceOutcome::pending) << "durations are at least one tick";
  backend->advance(1000);
  EXPECT_EQ(backend->query(fence), FenceOutcome::signalled);
  EXPECT_EQ(backend->outstanding(), 0u);
}

TEST(HostDeterministic, ReorderedCompletionsStillHonourWaits) {
  // Many independent copies complete out of order; a copy that waits on one never completes before it.
  std::uint32_t reordered = 0;
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    auto backend = make(deterministic(seed));
    const Fence a = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
    const Fence b = copy(*backend, CopyDirection::h2d, 4096, 4096, 4096);
    const Fence c = copy(*backend, CopyDirection::d2h, 0, 65536, 4096, std::span<const Fence>(&a, 1));
    std::vector<Fence> order;
    while (backend->outstanding() > 0) {
      backend->advance(1);
      for (const Fence f : {a, b, c}) {
        if (is_resolved(backend->query(f)) && std::find(order.begin(), order.end(), f) == order.end()) order.push_back(f);
      }
    }
    ASSERT_EQ(order.size(), 3u);
    const auto at = [&](Fence f) { return std::find(order.begin(), order.end(), f) - order.begin(); };
    EXPECT_LT(at(a), at(c)) << "seed " << seed << ": a copy completed before the fence it waits on";
    reordered += at(b) < at(a) ? 1 : 0;
  }
  EXPECT_GT(reordered, 0u) << "completions on one queue never reordered";
}

TEST(HostDeterministic, AWaitOnAFailedFencePoisonsTheDependentAndNothingLands) {
  FaultRates faults;
  faults.failed_copy = 1.0;
  auto backend = make(deterministic(5, faults));
  std::span<std::byte> pool = backend->host_pool();
  std::fill(pool.begin(), pool.begin() + 8192, std::byte{0x11});
  std::fill(pool.begin() + 65536, pool.begin() + 65536 + 8192, std::byte{0xCC});
  const Fence first = copy(*backend, CopyDirection::h2d, 0, 0, 8192);
  const Fence second = copy(*backend, CopyDirection::d2h, 0, 65536, 8192, std::span<const Fence>(&first, 1));
  ASSERT_EQ(backend->wait_host(second, 1s).value(), FenceOutcome::failed);
  EXPECT_EQ(backend->query(first), FenceOutcome::failed);
  EXPECT_TRUE(std::all_of(pool.begin() + 65536, pool.begin() + 65536 + 8192, [](std::byte b) { return b == std::byte{0xCC}; }))
      << "a command whose wait failed ran anyway";
  // The failed h2d wrote at most a prefix of its bytes.
  std::span<std::byte> arena = backend->arena_host_view();
  const auto landed = std::find_if(arena.begin(), arena.begin() + 8192, [](std::byte b) { return b != std::byte{0x11}; }) - arena.begin();
  EXPECT_TRUE(std::all_of(arena.begin() + landed, arena.begin() + 8192, [](std::byte b) { return b == std::byte{0}; }))
      << "a failed copy wrote more than a prefix";
  EXPECT_GE(backend->faults_injected().poisoned, 1u);
}

TEST(HostDeterministic, FailNextCopyFailsExactlyTheNextCopyInThatDirection) {
  auto backend = make(deterministic(6));
  backend->fail_next_copy(CopyDirection::h2d);
  // An upload and a copy the other way are not the targeted copy.
  std::vector<std::byte> bytes(64, std::byte{0x5A});
  const Fence upload = backend->upload(0, bytes).value();
  const Fence d2h = copy(*backend, CopyDirection::d2h, 0, 4096, 64);
  const Fence failed = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
  const Fence next = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
  EXPECT_EQ(backend->wait_host(upload, 1s).value(), FenceOutcome::signalled);
  EXPECT_EQ(backend->wait_host(d2h, 1s).value(), FenceOutcome::signalled);
  EXPECT_EQ(backend->wait_host(failed, 1s).value(), FenceOutcome::failed);
  EXPECT_EQ(backend->wait_host(next, 1s).value(), FenceOutcome::signalled);
  EXPECT_EQ(backend->faults_injected().failed_copies, 1u);
}

TEST(HostDeterministic, AHeldQueueCannotBeWaitedOnForever) {
  auto backend = make(deterministic(9));
  ASSERT_TRUE(backend->hold_queue(QueueKind::h2d).ok());
  const Fence fence = copy(*backend, CopyDirection::h2d, 0, 0, 64);
  Result<FenceOutcome> outcome = backend->wait_host(fence, 1s);
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.error().message.find("forever"), std::string::npos);
  ASSERT_TRUE(backend->release_queue(QueueKind::h2d).ok());
  EXPECT_EQ(backend->wait_host(fence, 1s).value(), FenceOutcome::signalled);
}

TEST(HostDeterministic, DeviceLossMakesEveryOutstandingFenceUnknownAndQuarantines) {
  auto backend = make(deterministic(11));
  StagingLeases leases(*backend, 4);
  std::span<std::byte> pool = backend->host_pool();
  std::fill(pool.begin(), pool.begin() + 65536, std::byte{0x77});
  Lease done_lease, lost_lease;
  ASSERT_EQ(leases.acquire(&done_lease), LeaseStatus::ok);
  ASSERT_EQ(leases.acquire(&lost_lease), LeaseStatus::ok);
  const Fence done = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
  ASSERT_EQ(backend->wait_host(done, 1s).value(), FenceOutcome::signalled);
  ASSERT_EQ(leases.copy_issued(done_lease, done), LeaseStatus::ok);
  std::vector<Fence> in_flight;
  for (int i = 0; i < 6; ++i) in_flight.push_back(copy(*backend, CopyDirection::h2d, 0, 65536 * (i + 1), 65536));
  ASSERT_EQ(leases.copy_issued(lost_lease, in_flight[0]), LeaseStatus::ok);
  backend->advance(30);  // some copies may be in flight, none need be done
  std::uint32_t pending = 0;
  for (const Fence f : in_flight) pending += backend->query(f) == FenceOutcome::pending ? 1 : 0;
  backend->lose_device();
  for (const Fence f : in_flight) EXPECT_NE(backend->query(f), FenceOutcome::pending);
  EXPECT_EQ(backend->query(done), FenceOutcome::signalled) << "a signalled fence stays signalled";
  EXPECT_EQ(backend->stats().fences_unknown, pending);
  EXPECT_TRUE(backend->lost());
  const CopyRegion region{0, 0, 16};
  Result<Fence> refused = backend->copy(CopyDirection::h2d, std::span<const CopyRegion>(&region, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::backend);
  leases.poll();
  EXPECT_EQ(leases.state(done_lease), LeaseState::ready);
  if (backend->query(in_flight[0]) == FenceOutcome::unknown) {
    EXPECT_EQ(leases.state(lost_lease), LeaseState::quarantined);
  }
  EXPECT_TRUE(leases.validate());
}

TEST(HostThreaded, DeviceLossReleasesWaitersAndRefusesWork) {
  BackendOptions options;
  auto backend = make(options);
  ASSERT_TRUE(backend->hold_queue(QueueKind::h2d).ok());
  const Fence held = copy(*backend, CopyDirection::h2d, 0, 0, 4096);
  const Fence waiting = copy(*backend, CopyDirection::d2h, 0, 4096, 4096, std::span<const Fence>(&held, 1));
  backend->lose_device();
  EXPECT_EQ(backend->query(held), FenceOutcome::unknown);
  EXPECT_EQ(backend->wait_host(waiting, 5s).value(), FenceOutcome::unknown);
  EXPECT_FALSE(backend->record(QueueKind::h2d).ok());
}

// Lent threads for a test: every chunk on the caller, last first (the contract allows any thread
// and any order), counting the chunks so a test sees the kernel took them.
struct ReversedChunks {
  std::uint32_t chunks_run = 0;
  static void run(void* self, ParallelChunks::Task task, void* context, std::uint32_t chunks) noexcept {
    for (std::uint32_t c = chunks; c-- > 0;) task(context, c);
    static_cast<ReversedChunks*>(self)->chunks_run += chunks;
  }
};

// A decode call (one query) with 1 or 2 compute threads, below and above the
// page count from which the backend splits a query's pages over its threads
// (16), on its own helpers or on lent threads: the same output bits either way.
std::vector<float> decode_attention(std::uint32_t threads, std::uint32_t pages, ReversedChunks* lend = nullptr) {
  BackendOptions options;
  options.compute_threads = threads;
  auto backend = make(options);
  if (lend != nullptr) {
    ParallelChunks parallel;
    parallel.run = &ReversedChunks::run;
    parallel.pool = lend;
    parallel.threads = threads;
    EXPECT_TRUE(backend->set_parallel(parallel));
  }
  const AttentionShape shape{8, 2, 32, DType::f16, 0.17677669f};
  constexpr std::uint32_t page_tokens = 16;
  const std::uint64_t page_bytes = page_tokens * shape.row_bytes();
  std::byte* arena = backend->arena_host_view().data();
  std::uint32_t lcg = 7;
  for (std::uint64_t i = 0; i + 2 <= pages * page_bytes; i += 2) {
    lcg = lcg * 1664525u + 1013904223u;
    const auto h = static_cast<std::uint16_t>(0x3000 + (lcg >> 16) % 0x0c00);  // f16 in [0.125, 1)
    std::memcpy(arena + i, &h, 2);
  }
  std::vector<AttentionPage> table(pages);
  for (std::uint32_t k = 0; k < pages; ++k) table[k] = {(pages - 1 - k) * page_bytes, k * page_tokens, page_tokens};
  std::vector<float> q(std::size_t{shape.q_heads} * shape.head_dim), out(q.size(), -1.0f);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.05f * static_cast<float>(i % 13) - 0.3f;
  const std::uint32_t position = pages * page_tokens - 1;
  const AttentionTask task{0, pages, 0, 1};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span<const AttentionTask>(&task, 1);
  batch.pages = table;
  batch.query_positions = std::span<const std::uint32_t>(&position, 1);
  batch.queries = q;
  batch.output = out;
  const Result<Fence> fence = backend->attention(batch);
  EXPECT_TRUE(fence.ok());
  if (!fence.ok()) return out;
  EXPECT_EQ(backend->wait_host(fence.value(), 10s).value(), FenceOutcome::signalled);
  backend->release_fence(fence.value());
  return out;
}

TEST(HostThreaded, ADecodeCallIsTheSameBitsOnOneOrTwoThreadsEitherSideOfTheSplitThreshold) {
  for (const std::uint32_t pages : {8u, 40u, 100u}) {
    const std::vector<float> one = decode_attention(1, pages);
    const std::vector<float> two = decode_attention(2, pages);
    ReversedChunks lent;
    const std::vector<float> borrowed = decode_attention(2, pages, &lent);
    EXPECT_NE(one[0], -1.0f) << pages << " pages: no output written";
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0) << pages << " pages";
    EXPECT_EQ(std::memcmp(one.data(), borrowed.data(), one.size() * sizeof(float)), 0) << pages << " pages, lent";
    // An idle queue runs the call on the caller: split (16 pages or more) over the lent threads.
    EXPECT_EQ(lent.chunks_run, pages >= 16 ? 2u : 0u) << pages << " pages";
  }
}

TEST(HostDeterministic, RefusesLentThreads) {
  BackendOptions options;
  options.deterministic = true;
  auto backend = make(options);
  ReversedChunks lent;
  ParallelChunks parallel;
  parallel.run = &ReversedChunks::run;
  parallel.pool = &lent;
  parallel.threads = 2;
  EXPECT_FALSE(backend->set_parallel(parallel));
}

// The arena and the pool begin on a 4 KiB boundary, pinned or not, and start zeroed (a large new[]
// block began 16 bytes past one: glibc's memmove on AMD Zen 3 then copied each scattered staging
// page at a fraction of its speed; docs/SPARSE.md "Staging").
TEST(HostBackend, TheArenaAndThePoolStartOnAPageBoundaryZeroed) {
  for (const bool pin : {true, false}) {
    HostBackend backend(BackendOptions{});
    MemoryRequest request;
    request.arena_bytes = arena_bytes + 16;  // not a multiple of the alignment
    request.host_pool_bytes = pool_bytes + 16;
    request.pin_host_pool = pin;
    ASSERT_TRUE(backend.allocate(request).ok()) << "pin " << pin;
    const std::span<std::byte> arena = backend.arena_host_view(), pool = backend.host_pool();
    ASSERT_EQ(arena.size(), request.arena_bytes);
    ASSERT_EQ(pool.size(), request.host_pool_bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.data()) % 4096, 0u) << "pin " << pin;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.data()) % 4096, 0u) << "pin " << pin;
    EXPECT_TRUE(std::all_of(arena.begin(), arena.end(), [](std::byte b) { return b == std::byte{0}; }));
    EXPECT_TRUE(std::all_of(pool.begin(), pool.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
}

TEST(HostBackendFactory, FaultsNeedTheDeterministicModeAndSaneRates) {
  BackendOptions options;
  options.faults.failed_fence = 0.1;
  EXPECT_FALSE(make_backend("host", options).ok());
  options.deterministic = true;
  options.faults.failed_fence = 1.5;
  EXPECT_FALSE(make_backend("host", options).ok());
  options.faults.failed_fence = 0.5;
  EXPECT_TRUE(make_backend("host", options).ok());
  Result<std::unique_ptr<Backend>> unknown = make_backend("vulkan", BackendOptions{});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().setting, "--backend");
}

// ---- the property test ---------------------------------------------------------------

struct Staged {
  Lease lease;
  Ticket ticket;
  std::uint64_t host_offset;
  std::uint32_t tile;
  bool verified = false;
  bool releasing = false;
};

TEST(HostDeterministic, PropertyFaultsQuarantineExactlyWhatTheyTouchedAndTheRestDrains) {
  constexpr std::uint32_t tiles = 8;
  constexpr std::uint64_t tile_bytes = 16384;
  const std::uint32_t seeds = std::getenv("ACTIVEKV_LONG") != nullptr ? 5000 : 300;
  std::uint64_t quarantines = 0, verified = 0;
  for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
    std::mt19937_64 rng(seed);
    FaultRates faults;
    faults.late_fence = 0.1;
    faults.failed_fence = static_cast<double>(rng() % 4) / 100.0;
    faults.unknown_fence = static_cast<double>(rng() % 3) / 100.0;
    faults.failed_copy = static_cast<double>(rng() % 6) / 100.0;
    auto backend = make(deterministic(seed, faults));
    std::span<std::byte> pool = backend->host_pool();
    for (std::size_t i = 0; i < 262144; ++i) pool[i] = static_cast<std::byte>((i * 2654435761u >> 13) ^ seed);
    StagingLeases leases(*backend, tiles, 8);
    CopyTickets tickets(*backend, 64, 4);
    std::map<std::uint32_t, Staged> live;          // by tile
    std::vector<std::pair<Fence, std::uint32_t>> touched;  // fence, tile: every fence attached
    std::vector<Fence> recent;

    auto settle = [&] {
      leases.poll();
      tickets.poll();
      for (auto it = live.begin(); it != live.end();) {
        Staged& s = it->second;
        const LeaseState state = leases.state(s.lease);
        if (state == LeaseState::ready && !s.verified) {
          // Ready: the tile holds exactly the staged host bytes.
          const std::byte* tile = backend->arena_host_view().data() + std::uint64_t{s.tile} * tile_bytes;
          ASSERT_EQ(std::memcmp(tile, pool.data() + s.host_offset, tile_bytes), 0) << "seed " << seed;
          s.verified = true;
          ++verified;
        }
        if (state == LeaseState::free || state == LeaseState::quarantined) {
          it = live.erase(it);
        } else {
          ++it;
        }
      }
    };

    for (int step = 0; step < 60; ++step) {
      const auto op = rng() % 4;
      if (op == 0) {
        Lease lease;
        if (leases.acquire(&lease) != LeaseStatus::ok) continue;
        const std::uint64_t host = (rng() % 16) * tile_bytes;
        Ticket ticket;
        const LeaseStatus opened = tickets.open(host, tile_bytes, HostAccess::read, &ticket);
        if (opened == LeaseStatus::busy) {  // a quarantined host range: never read again
          ASSERT_TRUE(tickets.host_range_busy(host, tile_bytes));
          ASSERT_EQ(leases.release(lease), LeaseStatus::ok);
          continue;
        }
        ASSERT_EQ(opened, LeaseStatus::ok);
        std::vector<Fence> waits;
        if (!recent.empty() && rng() % 2 == 0) waits.push_back(recent[rng() % recent.size()]);
        const Fence fence = copy(*backend, CopyDirection::h2d, host, std::uint64_t{lease.slot} * tile_bytes, tile_bytes, waits);
        ASSERT_EQ(leases.copy_issued(lease, fence), LeaseStatus::ok);
        ASSERT_EQ(tickets.attach(ticket, fence), LeaseStatus::ok);
        ASSERT_EQ(tickets.close_when_done(ticket), LeaseStatus::ok);
        touched.emplace_back(fence, lease.slot);
        ASSERT_TRUE(backend->retain_fence(fence).ok());
        recent.push_back(fence);
        live[lease.slot] = Staged{lease, ticket, host, lease.slot};
      } else if (op == 1 && !live.empty()) {
        // A d2d read of a tile (a promotion), waiting on the tile's copy on the device.
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        const Lease lease = it->second.lease;
        const LeaseState state = leases.state(lease);
        if (it->second.releasing) continue;
        if (leases.fence_room(lease) == 0) continue;  // attach would fail: do not enqueue
        if (state != LeaseState::copy_issued && state != LeaseState::ready && state != LeaseState::in_use) continue;
        const Fence fence = copy(*backend, CopyDirection::d2d, std::uint64_t{lease.slot} * tile_bytes,
                                 (tiles + lease.slot) * tile_bytes, tile_bytes, std::span<const Fence>(&recent.back(), 1));
        ASSERT_EQ(leases.use(lease, fence), LeaseStatus::ok);
        touched.emplace_back(fence, lease.slot);
        ASSERT_TRUE(backend->retain_fence(fence).ok());
        backend->release_fence(fence);
      } else if (op == 2 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        const LeaseStatus status = leases.release(it->second.lease);
        ASSERT_TRUE(status == LeaseStatus::ok || status == LeaseStatus::fences_pending || status == LeaseStatus::quarantined)
            << lease_status_name(status);
        if (status == LeaseStatus::fences_pending) {
          ASSERT_EQ(leases.release_when_done(it->second.lease), LeaseStatus::ok);
          it->second.releasing = true;
        }
      } else {
        backend->advance(rng() % 80);
      }
      settle();
      ASSERT_TRUE(leases.validate()) << "seed " << seed;
      ASSERT_TRUE(tickets.validate()) << "seed " << seed;
    }

    // No new work: everything drains.
    for (auto& [tile, staged] : live) (void)leases.release_when_done(staged.lease);
    while (backend->outstanding() > 0) backend->advance(1000);
    settle();
    leases.poll();
    std::set<std::uint32_t> doomed;
    for (const auto& [fence, tile] : touched) {
      const FenceOutcome outcome = backend->query(fence);
      ASSERT_TRUE(is_resolved(outcome)) << "seed " << seed << ": a fence still pending after the drain";
      if (outcome != FenceOutcome::signalled) doomed.insert(tile);
    }
    for (std::uint32_t tile = 0; tile < tiles; ++tile) {
      const LeaseState state = leases.slot_state(tile);
      if (doomed.count(tile) != 0) {
        EXPECT_EQ(state, LeaseState::quarantined) << "seed " << seed << " tile " << tile;
      } else {
        EXPECT_EQ(state, LeaseState::free) << "seed " << seed << " tile " << tile;
      }
    }
    EXPECT_EQ(leases.count(LeaseState::quarantined), doomed.size()) << "seed " << seed;
    EXPECT_EQ(tickets.open_count(), 0u) << "seed " << seed;
    quarantines += doomed.size();
    for (const auto& [fence, tile] : touched) backend->release_fence(fence);
    for (const Fence f : recent) backend->release_fence(f);
  }
  EXPECT_GT(quarantines, 0u) << "the faults never fired";
  EXPECT_GT(verified, 0u) << "no lease ever became ready";
  RecordProperty("quarantines", std::to_string(quarantines));
  RecordProperty("verified", std::to_string(verified));
}

}  // namespace
}  // namespace activekv::host
