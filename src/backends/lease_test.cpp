// lease_test.cpp — staging leases and copy tickets against a scripted backend.
//
// The backend here does nothing but hand out fences whose outcomes the test
// decides, so every lease transition can be driven exactly: pending fences
// block release, a failed or unknown fence quarantines exactly the buffers it
// touched, stale handles are refused, and the acquire/release path allocates
// nothing. A property test runs random operation sequences over many seeds and
// checks the table's invariants after every step.
#include "activekv/lease.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "activekv/backend.hpp"
#include "backends/fence_table.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

// Fences resolve only when the test says so.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend() : Backend(1024) {
    MemoryRequest request;
    request.arena_bytes = 1 << 20;
    request.host_pool_bytes = 1 << 20;
    EXPECT_TRUE(allocate(request).ok());
  }
  std::string_view name() const noexcept override { return "scripted"; }
  const Capabilities& capabilities() const noexcept override { return capabilities_; }
  std::string describe() const override { return "scripted fences"; }
  std::span<std::byte> host_pool() noexcept override { return {}; }

  Fence make(QueueKind queue = QueueKind::h2d) { return record(queue).value(); }
  void resolve(Fence fence, FenceOutcome outcome) { fences().resolve(fence, outcome); }
  std::uint32_t fence_slots_used() const { return fences().slots_used(); }

 protected:
  Status do_allocate(const MemoryRequest&) override { return Status::success(); }
  Result<Fence> do_copy(CopyDirection d, std::span<const CopyRegion>, std::span<const Fence>) override {
    return fences().open(queue_of(d));
  }
  Result<Fence> do_upload(std::uint64_t, std::span<const std::byte>, std::span<const Fence>) override {
    return fences().open(QueueKind::h2d);
  }
  Result<Fence> do_download(std::uint64_t, std::span<std::byte>, std::span<const Fence>) override {
    return fences().open(QueueKind::d2h);
  }
  Result<Fence> do_attention(const AttentionBatch&, std::span<const Fence>) override {
    return fences().open(QueueKind::compute);
  }
  Result<Fence> do_record(QueueKind queue) override { return fences().open(queue); }
  Status do_enqueue_wait(QueueKind, std::span<const Fence>) override { return Status::success(); }
  FenceOutcome do_query(Fence fence) override { return fences().outcome(fence); }
  Result<FenceOutcome> do_wait_host(Fence fence, std::chrono::nanoseconds) override { return fences().outcome(fence); }
  Status do_synchronize(QueueKind) override { return Status::success(); }

 private:
  Capabilities capabilities_{};
};

TEST(StagingLeases, LifecycleToReadyAndRelease) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 4);
  Lease lease;
  ASSERT_EQ(leases.acquire(&lease), LeaseStatus::ok);
  EXPECT_EQ(leases.state(lease), LeaseState::acquired);
  const Fence copy = backend.make(QueueKind::h2d);
  ASSERT_EQ(leases.copy_issued(lease, copy), LeaseStatus::ok);
  EXPECT_EQ(leases.state(lease), LeaseState::copy_issued);
  EXPECT_EQ(leases.poll(), 0u);
  EXPECT_EQ(leases.release(lease), LeaseStatus::fences_pending);
  EXPECT_EQ(leases.state(lease), LeaseState::copy_issued);
  backend.resolve(copy, FenceOutcome::signalled);
  EXPECT_EQ(leases.poll(), 1u);
  EXPECT_EQ(leases.state(lease), LeaseState::ready);
  const Fence kernel = backend.make(QueueKind::compute);
  ASSERT_EQ(leases.use(lease, kernel), LeaseStatus::ok);
  EXPECT_EQ(leases.state(lease), LeaseState::in_use);
  EXPECT_EQ(leases.release(lease), LeaseStatus::fences_pending);
  backend.resolve(kernel, FenceOutcome::signalled);
  EXPECT_EQ(leases.release(lease), LeaseStatus::ok);
  EXPECT_EQ(leases.count(LeaseState::free), 4u);
  EXPECT_TRUE(leases.validate());
  backend.release_fence(copy);
  backend.release_fence(kernel);
  EXPECT_EQ(backend.fence_slots_used(), 0u);
}

TEST(StagingLeases, UseMayFollowTheCopyBeforeItSignals) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 2);
  Lease lease;
  ASSERT_EQ(leases.acquire(&lease), LeaseStatus::ok);
  const Fence copy = backend.make(QueueKind::h2d);
  const Fence kernel = backend.make(QueueKind::compute);
  ASSERT_EQ(leases.copy_issued(lease, copy), LeaseStatus::ok);
  ASSERT_EQ(leases.use(lease, kernel), LeaseStatus::ok);
  ASSERT_EQ(leases.release_when_done(lease), LeaseStatus::ok);
  backend.resolve(kernel, FenceOutcome::signalled);
  leases.poll();
  EXPECT_EQ(leases.state(lease), LeaseState::in_use) << "the copy's fence is still pending";
  backend.resolve(copy, FenceOutcome::signalled);
  leases.poll();
  EXPECT_EQ(leases.state(lease), LeaseState::free);
  EXPECT_EQ(leases.count(LeaseState::free), 2u);
  backend.release_fence(copy);
  backend.release_fence(kernel);
}

TEST(StagingLeases, StaleHandlesAreRefused) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 1);
  Lease first;
  ASSERT_EQ(leases.acquire(&first), LeaseStatus::ok);
  ASSERT_EQ(leases.release(first), LeaseStatus::ok);
  Lease second;
  ASSERT_EQ(leases.acquire(&second), LeaseStatus::ok);
  EXPECT_EQ(second.slot, first.slot);
  EXPECT_GT(second.generation, first.generation);
  const Fence fence = backend.make();
  EXPECT_EQ(leases.copy_issued(first, fence), LeaseStatus::stale_handle);
  EXPECT_EQ(leases.release(first), LeaseStatus::stale_handle);
  EXPECT_EQ(leases.state(second), LeaseState::acquired) << "a stale release must not touch the new lease";
  EXPECT_EQ(leases.copy_issued(Lease{}, fence), LeaseStatus::stale_handle);
  EXPECT_EQ(leases.copy_issued(Lease{7, 1}, fence), LeaseStatus::out_of_range);
  EXPECT_EQ(leases.counters().refused_stale, 3u);
  EXPECT_EQ(leases.copy_issued(second, Fence{}), LeaseStatus::bad_fence) << "a fence never recorded is not complete";
  backend.resolve(fence, FenceOutcome::signalled);
  backend.release_fence(fence);
}

TEST(StagingLeases, FailedAndUnknownFencesQuarantineExactlyTheBuffersTheyTouched) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 6);
  Lease lease[6];
  for (Lease& l : lease) ASSERT_EQ(leases.acquire(&l), LeaseStatus::ok);
  const Fence bad_copy = backend.make(QueueKind::h2d);      // touches 0 and 1
  const Fence lost_kernel = backend.make(QueueKind::compute);  // touches 2
  const Fence good = backend.make(QueueKind::h2d);          // touches 3, 4, 5
  ASSERT_EQ(leases.copy_issued(lease[0], bad_copy), LeaseStatus::ok);
  ASSERT_EQ(leases.copy_issued(lease[1], bad_copy), LeaseStatus::ok);
  ASSERT_EQ(leases.copy_issued(lease[2], good), LeaseStatus::ok);
  ASSERT_EQ(leases.use(lease[2], lost_kernel), LeaseStatus::ok);
  for (int i = 3; i < 6; ++i) ASSERT_EQ(leases.copy_issued(lease[i], good), LeaseStatus::ok);
  backend.resolve(bad_copy, FenceOutcome::failed);
  backend.resolve(lost_kernel, FenceOutcome::unknown);
  backend.resolve(good, FenceOutcome::signalled);
  leases.poll();
  EXPECT_EQ(leases.count(LeaseState::quarantined), 3u);
  EXPECT_EQ(leases.state(lease[0]), LeaseState::quarantined);
  EXPECT_EQ(leases.state(lease[1]), LeaseState::quarantined);
  EXPECT_EQ(leases.state(lease[2]), LeaseState::quarantined);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(leases.state(lease[i]), LeaseState::ready);
  ASSERT_EQ(leases.quarantine().size(), 3u);
  EXPECT_EQ(leases.quarantine()[0].cause, FenceOutcome::failed);
  EXPECT_EQ(leases.quarantine()[0].queue, QueueKind::h2d);
  EXPECT_EQ(leases.quarantine()[2].cause, FenceOutcome::unknown);
  EXPECT_EQ(leases.quarantine()[2].queue, QueueKind::compute);
  EXPECT_EQ(leases.release(lease[0]), LeaseStatus::quarantined);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(leases.release(lease[i]), LeaseStatus::ok);
  // Quarantined buffers never come back, however many cycles run.
  for (int cycle = 0; cycle < 100; ++cycle) {
    Lease l;
    ASSERT_EQ(leases.acquire(&l), LeaseStatus::ok);
    EXPECT_GE(l.slot, 3u);
    ASSERT_EQ(leases.release(l), LeaseStatus::ok);
  }
  EXPECT_EQ(leases.acquire_slot(1, &lease[1]), LeaseStatus::quarantined);
  EXPECT_EQ(leases.counters().quarantined, 3u);
  EXPECT_TRUE(leases.validate());
  backend.release_fence(bad_copy);
  backend.release_fence(lost_kernel);
  backend.release_fence(good);
  EXPECT_EQ(backend.fence_slots_used(), 0u) << "quarantine releases the fences it held";
}

TEST(StagingLeases, AcquireSlotRefusesABusyBuffer) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 3);
  Lease lease;
  ASSERT_EQ(leases.acquire_slot(2, &lease), LeaseStatus::ok);
  EXPECT_EQ(lease.slot, 2u);
  const Fence fence = backend.make();
  ASSERT_EQ(leases.copy_issued(lease, fence), LeaseStatus::ok);
  Lease other;
  EXPECT_EQ(leases.acquire_slot(2, &other), LeaseStatus::busy);
  EXPECT_EQ(leases.acquire_slot(3, &other), LeaseStatus::out_of_range);
  backend.resolve(fence, FenceOutcome::signalled);
  ASSERT_EQ(leases.release(lease), LeaseStatus::ok);
  EXPECT_EQ(leases.acquire_slot(2, &other), LeaseStatus::ok);
  EXPECT_TRUE(leases.validate());
  backend.release_fence(fence);
}

TEST(StagingLeases, FenceLimitPerLeaseIsAnOrdinaryResult) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 1, 2);
  Lease lease;
  ASSERT_EQ(leases.acquire(&lease), LeaseStatus::ok);
  const Fence a = backend.make(), b = backend.make(), c = backend.make();
  ASSERT_EQ(leases.copy_issued(lease, a), LeaseStatus::ok);
  ASSERT_EQ(leases.copy_issued(lease, b), LeaseStatus::ok);
  EXPECT_EQ(leases.fence_room(lease), 0u);
  EXPECT_EQ(leases.copy_issued(lease, c), LeaseStatus::too_many_fences);
  backend.resolve(a, FenceOutcome::signalled);
  EXPECT_EQ(leases.copy_issued(lease, c), LeaseStatus::ok) << "a signalled fence makes room";
  for (Fence f : {a, b, c}) {
    backend.resolve(f, FenceOutcome::signalled);
    backend.release_fence(f);
  }
  EXPECT_EQ(leases.release(lease), LeaseStatus::ok);
}

TEST(StagingLeases, AcquireAndReleaseAllocateNothing) {
  ScriptedBackend backend;
  StagingLeases leases(backend, 64);
  std::vector<Fence> fences(64);
  std::vector<Lease> held(64);
  const auto before = testing::heap_allocations();
  for (int round = 0; round < 10; ++round) {
    for (std::size_t i = 0; i < held.size(); ++i) {
      ASSERT_EQ(leases.acquire(&held[i]), LeaseStatus::ok);
      fences[i] = backend.make();
      ASSERT_EQ(leases.copy_issued(held[i], fences[i]), LeaseStatus::ok);
      ASSERT_EQ(leases.release_when_done(held[i]), LeaseStatus::ok);
    }
    for (const Fence f : fences) {
      backend.resolve(f, FenceOutcome::signalled);
      backend.release_fence(f);
    }
    leases.poll();
  }
  EXPECT_EQ(testing::heap_allocations(), before);
  EXPECT_EQ(leases.count(LeaseState::free), 64u);
}

TEST(CopyTickets, HostRangesInFlightCannotBeOverwrittenOrRecycled) {
  ScriptedBackend backend;
  CopyTickets tickets(backend, 8);
  Ticket read_a, read_b, write;
  ASSERT_EQ(tickets.open(0, 4096, HostAccess::read, &read_a), LeaseStatus::ok);
  ASSERT_EQ(tickets.open(1024, 1024, HostAccess::read, &read_b), LeaseStatus::ok) << "two readers may share a range";
  EXPECT_EQ(tickets.open(2048, 4096, HostAccess::write, &write), LeaseStatus::busy) << "DMA reads it";
  EXPECT_EQ(tickets.tickets_overlapping(1024, 1), 2u);
  const Fence copy = backend.make(QueueKind::h2d);
  ASSERT_EQ(tickets.attach(read_a, copy), LeaseStatus::ok);
  ASSERT_EQ(tickets.attach(read_b, copy), LeaseStatus::ok);
  EXPECT_TRUE(tickets.host_range_busy(4095, 1));
  EXPECT_FALSE(tickets.host_range_busy(4096, 4096));
  EXPECT_EQ(tickets.close(read_a), LeaseStatus::fences_pending);
  ASSERT_EQ(tickets.open(8192, 4096, HostAccess::write, &write), LeaseStatus::ok);
  Ticket reader;
  EXPECT_EQ(tickets.open(8192, 16, HostAccess::read, &reader), LeaseStatus::busy) << "DMA writes it";
  EXPECT_EQ(tickets.open(backend.host_pool_bytes(), 1, HostAccess::read, &reader), LeaseStatus::out_of_range);
  backend.resolve(copy, FenceOutcome::signalled);
  EXPECT_EQ(tickets.close(read_a), LeaseStatus::ok);
  EXPECT_EQ(tickets.close_when_done(read_b), LeaseStatus::ok);
  tickets.poll();
  EXPECT_FALSE(tickets.host_range_busy(0, 4096));
  EXPECT_EQ(tickets.close(read_a), LeaseStatus::stale_handle);
  EXPECT_EQ(tickets.close(write), LeaseStatus::ok) << "no fence attached: nothing in flight";
  EXPECT_EQ(tickets.open_count(), 0u);
  EXPECT_TRUE(tickets.validate());
  backend.release_fence(copy);
}

TEST(CopyTickets, AFailedWriteBackQuarantinesItsRangeForGood) {
  ScriptedBackend backend;
  CopyTickets tickets(backend, 4);
  Ticket lost, fine;
  ASSERT_EQ(tickets.open(0, 768, HostAccess::write, &lost), LeaseStatus::ok);
  ASSERT_EQ(tickets.open(768, 768, HostAccess::write, &fine), LeaseStatus::ok);
  const Fence bad = backend.make(QueueKind::d2h), good = backend.make(QueueKind::d2h);
  ASSERT_EQ(tickets.attach(lost, bad), LeaseStatus::ok);
  ASSERT_EQ(tickets.attach(fine, good), LeaseStatus::ok);
  backend.resolve(bad, FenceOutcome::failed);
  backend.resolve(good, FenceOutcome::signalled);
  ASSERT_EQ(tickets.close_when_done(lost), LeaseStatus::ok);
  ASSERT_EQ(tickets.close_when_done(fine), LeaseStatus::ok);
  tickets.poll();
  ASSERT_EQ(tickets.quarantine().size(), 1u);
  EXPECT_EQ(tickets.quarantine()[0].host_offset, 0u);
  EXPECT_EQ(tickets.quarantine()[0].host_bytes, 768u);
  EXPECT_EQ(tickets.quarantine()[0].cause, FenceOutcome::failed);
  EXPECT_TRUE(tickets.host_range_busy(0, 1));
  EXPECT_FALSE(tickets.host_range_busy(768, 768));
  Ticket again;
  EXPECT_EQ(tickets.open(100, 1, HostAccess::read, &again), LeaseStatus::busy);
  EXPECT_EQ(tickets.close(lost), LeaseStatus::quarantined);
  EXPECT_TRUE(tickets.validate());
  backend.release_fence(bad);
  backend.release_fence(good);
}

// Random operations over many seeds: invariants after every step; with the
// faults stopped, everything not quarantined drains back to free.
TEST(StagingLeases, PropertyRandomSequencesKeepTheInvariants) {
  std::uint32_t quarantined_total = 0, released_total = 0;
  for (std::uint32_t seed = 1; seed <= 300; ++seed) {
    ScriptedBackend backend;
    constexpr std::uint32_t buffers = 8;
    StagingLeases leases(backend, buffers, 4);
    std::mt19937 rng(seed);
    std::vector<Lease> held;
    std::vector<Fence> pending;
    std::vector<std::vector<std::uint32_t>> touched;  // per pending fence: slots
    std::uint32_t expected_quarantined = 0;
    std::vector<bool> doomed(buffers, false);
    for (int step = 0; step < 200; ++step) {
      const int op = static_cast<int>(rng() % 6);
      if (op == 0) {
        Lease l;
        if (leases.acquire(&l) == LeaseStatus::ok) held.push_back(l);
      } else if (op <= 2 && !held.empty()) {
        const Lease l = held[rng() % held.size()];
        const Fence f = backend.make(op == 1 ? QueueKind::h2d : QueueKind::compute);
        const LeaseStatus s = op == 1 ? leases.copy_issued(l, f) : leases.use(l, f);
        if (s == LeaseStatus::ok) {
          pending.push_back(f);
          touched.push_back({l.slot});
        } else {
          backend.resolve(f, FenceOutcome::signalled);
          backend.release_fence(f);
        }
      } else if (op == 3 && !pending.empty()) {
        const std::size_t i = rng() % pending.size();
        const auto roll = rng() % 20;
        const FenceOutcome outcome = roll == 0 ? FenceOutcome::failed : roll == 1 ? FenceOutcome::unknown : FenceOutcome::signalled;
        if (outcome != FenceOutcome::signalled) {
          for (std::uint32_t slot : touched[i]) {
            if (!doomed[slot] && leases.slot_state(slot) != LeaseState::free) {
              doomed[slot] = true;
              ++expected_quarantined;
            }
          }
        }
        backend.resolve(pending[i], outcome);
        backend.release_fence(pending[i]);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        touched.erase(touched.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op == 4 && !held.empty()) {
        const std::size_t i = rng() % held.size();
        const std::uint32_t slot = held[i].slot;
        const LeaseStatus s = leases.release(held[i]);
        if (s == LeaseStatus::ok) {
          ASSERT_FALSE(doomed[slot]) << "seed " << seed << ": released a doomed buffer";
        }
        if (s == LeaseStatus::quarantined) {
          ASSERT_TRUE(doomed[slot]) << "seed " << seed << ": quarantined a healthy buffer";
        }
        if (s == LeaseStatus::ok || s == LeaseStatus::quarantined) held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        leases.poll();
      }
      ASSERT_TRUE(leases.validate()) << "seed " << seed << " step " << step;
      for (std::uint32_t slot = 0; slot < buffers; ++slot) {
        if (leases.slot_state(slot) == LeaseState::free) {
          ASSERT_FALSE(doomed[slot]) << "seed " << seed << ": a doomed buffer came back";
        }
      }
    }
    // Faults off: everything drains.
    for (const Fence f : pending) {
      backend.resolve(f, FenceOutcome::signalled);
      backend.release_fence(f);
    }
    for (const Lease l : held) (void)leases.release_when_done(l);
    leases.poll();
    EXPECT_EQ(leases.count(LeaseState::quarantined), expected_quarantined) << "seed " << seed;
    EXPECT_EQ(leases.count(LeaseState::free) + leases.count(LeaseState::quarantined), buffers) << "seed " << seed;
    ASSERT_TRUE(leases.validate());
    quarantined_total += expected_quarantined;
    released_total += static_cast<std::uint32_t>(leases.counters().released);
  }
  EXPECT_GT(quarantined_total, 0u) << "no sequence ever failed a fence";
  EXPECT_GT(released_total, 0u) << "no sequence ever released a lease";
}

}  // namespace
}  // namespace activekv
