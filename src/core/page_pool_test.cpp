// page_pool_test.cpp — states, generations, the free list, and invariant 1 under random operations.
#include "activekv/page_pool.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "activekv/arena.hpp"
#include "activekv/memory_plan.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

TEST(PagePool, AllocatesReleasesAndDetectsStaleHandles) {
  PagePool pool(4);
  const PageId a = pool.allocate(PageOwner{0, 0, 0});
  ASSERT_TRUE(a.valid());
  EXPECT_EQ(pool.pages_free(), 3u);
  EXPECT_EQ(pool.pages_owned(), 1u);
  EXPECT_TRUE(pool.current(a));
  pool.release(a);
  EXPECT_FALSE(pool.current(a));  // released: the handle is stale
  // Every page allocated once more bumps its generation; the old handle stays stale.
  std::vector<PageId> all;
  for (int i = 0; i < 4; ++i) all.push_back(pool.allocate(PageOwner{1, 0, static_cast<std::uint32_t>(i)}));
  EXPECT_FALSE(pool.allocate(PageOwner{}).valid());  // out of pages is an ordinary result
  for (const PageId& id : all) {
    if (id.index == a.index) {
      EXPECT_NE(id.generation, a.generation);
    }
  }
  EXPECT_FALSE(pool.current(a));
  EXPECT_EQ(pool.check(), nullptr);
}

TEST(PagePool, ReleasedPagesAreReusedLast) {
  PagePool pool(3);
  const PageId a = pool.allocate(PageOwner{});
  pool.release(a);
  const PageId b = pool.allocate(PageOwner{});
  EXPECT_NE(b.index, a.index);
}

TEST(PagePool, StagingLandsAndQuarantineIsForGood) {
  PagePool pool(2);
  const PageId a = pool.allocate(PageOwner{0, 1, 7}, PageState::staging);
  EXPECT_EQ(pool.pages_staging(), 1u);
  pool.land(a);
  EXPECT_EQ(pool.pages_owned(), 1u);
  pool.quarantine_page(a);
  EXPECT_EQ(pool.pages_quarantined(), 1u);
  EXPECT_EQ(pool.pages_free() + pool.pages_owned() + pool.pages_staging() + pool.pages_quarantined(), 2u);
  const PageId b = pool.allocate(PageOwner{});
  EXPECT_NE(b.index, a.index);
  EXPECT_FALSE(pool.allocate(PageOwner{}).valid());  // the quarantined page is never reused
  EXPECT_EQ(pool.check(), nullptr);
}

TEST(PagePool, ReassignStartsANewUseInPlace) {
  PagePool pool(3);
  const PageId a = pool.allocate(PageOwner{2, 1, 5});
  const PageId b = pool.reassign(a, PageOwner{2, 1, 9});
  EXPECT_EQ(b.index, a.index);
  EXPECT_FALSE(pool.current(a));  // the old use's handle is stale
  EXPECT_TRUE(pool.current(b));
  EXPECT_EQ(pool.owner(b.index).logical, 9u);
  EXPECT_EQ(pool.state(b.index), PageState::owned);
  EXPECT_EQ(pool.pages_owned(), 1u);  // no state changed: nothing entered or left the free list
  EXPECT_EQ(pool.pages_free(), 2u);
  EXPECT_EQ(pool.counters().reassignments, 1u);
  EXPECT_EQ(pool.counters().releases, 0u);
  // A handle of the page's use before the reassignment never matches again, even after a
  // release and a fresh allocation of the same page.
  pool.release(b);
  const PageId c = pool.allocate(PageOwner{});
  const PageId d = pool.allocate(PageOwner{});
  const PageId e = pool.allocate(PageOwner{});
  for (const PageId& id : {c, d, e}) {
    if (id.index == a.index) {
      EXPECT_NE(id.generation, a.generation);
      EXPECT_NE(id.generation, b.generation);
    }
  }
  EXPECT_EQ(pool.check(), nullptr);
}

TEST(PagePoolDeath, ReassignOfAStagingPageAborts) {
  PagePool pool(1);
  const PageId a = pool.allocate(PageOwner{}, PageState::staging);
  EXPECT_DEATH(pool.reassign(a, PageOwner{0, 0, 1}), "only an owned page is reassigned");
}

TEST(PagePoolDeath, StaleReleaseAborts) {
  PagePool pool(2);
  const PageId a = pool.allocate(PageOwner{});
  pool.release(a);
  EXPECT_DEATH(pool.release(a), "stale page handle");
}

TEST(PagePool, RandomOperationsConservePagesWithoutAllocating) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t pages = 1 + static_cast<std::uint32_t>(rng() % 64);
    PagePool pool(pages);
    std::vector<PageId> held;
    held.reserve(pages);
    const std::uint64_t before = testing::heap_allocations();
    for (int op = 0; op < 500; ++op) {
      const auto choice = rng() % 10;
      if (choice < 4) {
        const PageId id = pool.allocate(PageOwner{}, rng() % 3 == 0 ? PageState::staging : PageState::owned);
        if (id.valid()) held.push_back(id);
        else EXPECT_EQ(pool.pages_free(), 0u);
      } else if (!held.empty()) {
        const std::size_t i = rng() % held.size();
        const PageId id = held[i];
        if (choice < 8) pool.release(id);
        else if (choice == 8 && pool.state(id.index) == PageState::staging) pool.land(id);
        else if (choice == 9) pool.quarantine_page(id);
        if (choice != 8 || pool.state(id.index) != PageState::owned) {
          held[i] = held.back();
          held.pop_back();
        }
      }
      ASSERT_EQ(pool.pages_free() + pool.pages_owned() + pool.pages_staging() + pool.pages_quarantined(), pages);
    }
    EXPECT_EQ(testing::heap_allocations(), before) << "seed " << seed;
    ASSERT_EQ(pool.check(), nullptr) << "seed " << seed;
  }
}

TEST(Arena, BindsOnceAndOffsetsFollowTheLayout) {
  MemorySettings s;
  s.geometry = find_preset("smollm2-135m")->geometry;
  s.max_context_tokens = 8192;
  s.host_pool_bytes = 4ull << 30;
  s.device_pool_bytes = 1ull << 30;
  s.max_seqs = 8;
  const MemoryPlan plan = make_memory_plan(s).value();
  Arena arena(plan.arena);
  EXPECT_EQ(arena.pages().pages_total(), plan.arena.pages);
  EXPECT_EQ(arena.page_offset(1) - arena.page_offset(0), plan.arena.page_bytes);
  EXPECT_EQ(arena.tile_offset(1), plan.arena.tile_bytes);
  arena.bind_allocation(plan.arena.used_bytes);
  EXPECT_EQ(arena.counters().device_allocations, 1u);
  EXPECT_DEATH(arena.bind_allocation(plan.arena.used_bytes), "allocated once");
}

}  // namespace
}  // namespace activekv
