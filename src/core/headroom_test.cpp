// headroom_test.cpp — lending lowest first, takings from the top, every taking counted.
#include "activekv/headroom.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "activekv/size.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

TEST(Headroom, CutsTheRegionIntoWholePages) {
  // 10 pages of 64 KiB and 1,000 bytes left over, starting at 1 MiB into the arena.
  const Headroom h = Headroom::create(MiB, 10 * 64 * KiB + 1000, 64 * KiB).value();
  EXPECT_EQ(h.pages_total(), 10u);
  EXPECT_EQ(h.pages_free(), 10u);
  EXPECT_EQ(h.unused_bytes(), 1000u);
  EXPECT_EQ(h.bytes(), 640 * KiB);
  const Headroom none = Headroom::create(0, 0, 64 * KiB).value();
  EXPECT_EQ(none.pages_total(), 0u);
}

TEST(Headroom, LendsLowestFirstAndReturns) {
  Headroom h = Headroom::create(4096, 4 * 100, 100).value();
  const HeadroomPage a = h.lend(7);
  const HeadroomPage b = h.lend(8);
  EXPECT_EQ(a.index, 0u);
  EXPECT_EQ(b.index, 1u);
  EXPECT_EQ(h.offset_of(b), 4096u + 100u);
  EXPECT_EQ(h.owner_of(a), 7u);
  h.give_back(a);
  EXPECT_FALSE(h.current(a));
  EXPECT_EQ(h.lend(9).index, 0u);  // the lowest free page again
  EXPECT_EQ(h.pages_lent(), 2u);
  EXPECT_EQ(h.counters().lends, 3u);
  EXPECT_EQ(h.counters().returns, 1u);
}

TEST(Headroom, TakesFromTheTopRevokingLentPagesAndCountsEveryTaking) {
  // 8 pages; lend pages 0..5 (owners 100..105). take_back(4) withdraws pages 7, 6 (free)
  // and 5, 4 (lent: revoked, reported with owners 105, 104).
  Headroom h = Headroom::create(0, 8 * 10, 10).value();
  std::vector<HeadroomPage> lent;
  for (std::uint64_t i = 0; i < 6; ++i) lent.push_back(h.lend(100 + i));
  std::vector<Revocation> revoked(4);
  std::uint32_t revoked_count = 0;
  EXPECT_EQ(h.take_back(4, revoked, &revoked_count), 4u);
  ASSERT_EQ(revoked_count, 2u);
  EXPECT_EQ(revoked[0].page, lent[5]);
  EXPECT_EQ(revoked[0].owner, 105u);
  EXPECT_EQ(revoked[1].owner, 104u);
  EXPECT_FALSE(h.current(lent[5]));
  EXPECT_FALSE(h.current(lent[4]));
  EXPECT_TRUE(h.current(lent[3]));
  EXPECT_EQ(h.pages_taken(), 4u);
  EXPECT_EQ(h.pages_free(), 0u);
  EXPECT_EQ(h.taken_offset_bytes(), 40u);  // the withdrawn block is [40, 80)
  EXPECT_EQ(h.counters().takings, 1u);
  EXPECT_EQ(h.counters().pages_taken, 4u);
  EXPECT_EQ(h.counters().pages_revoked, 2u);
  EXPECT_FALSE(h.lend(1).valid());  // nothing lendable while taken
  EXPECT_EQ(h.counters().lend_refusals, 1u);

  EXPECT_EQ(h.restore(2), 2u);  // pages 4 and 5 come back
  EXPECT_EQ(h.pages_free(), 2u);
  EXPECT_EQ(h.lend(1).index, 4u);
  EXPECT_EQ(h.counters().pages_restored, 2u);
  h.validate();
}

TEST(Headroom, RefusesAutomaticSizesByName) {
  for (const char* bad : {"auto", "max", "50%"}) {
    const auto r = parse_headroom(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().setting, "--headroom");
    EXPECT_NE(r.error().message.find("8GiB"), std::string::npos);
  }
  EXPECT_EQ(parse_headroom("8GiB").value(), 8 * GiB);
  EXPECT_EQ(parse_headroom("0").value(), 0u);
  EXPECT_FALSE(parse_headroom("-1").ok());
  EXPECT_FALSE(Headroom::create(0, 100, 0).ok());
}

TEST(HeadroomDeath, StaleGiveBackIsRefused) {
  Headroom h = Headroom::create(0, 4 * 10, 10).value();
  const HeadroomPage p = h.lend(1);
  h.give_back(p);
  EXPECT_DEATH(h.give_back(p), "stale");
}

// Random lend / give back / take back / restore against a plain model; every step keeps
// free + lent + taken = total, the lowest free page is lent, and revocations are exactly
// the lent pages in the withdrawn range.
TEST(Headroom, PropertyRandomOperationsKeepTheInvariants) {
  for (std::uint32_t seed = 0; seed < 300; ++seed) {
    std::mt19937 rng_engine(seed);
    auto rng = [&rng_engine] { return static_cast<std::uint32_t>(rng_engine()); };
    const std::uint32_t pages = 1 + rng() % 200;
    Headroom h = Headroom::create(0, pages * 16ull, 16).value();
    std::map<std::uint32_t, HeadroomPage> lent;  // index → handle
    std::vector<Revocation> revoked(pages);
    for (int op = 0; op < 400; ++op) {
      const std::uint32_t choice = rng() % 10;
      if (choice < 5) {
        std::uint32_t expected = UINT32_MAX;
        for (std::uint32_t i = 0; i < pages - h.pages_taken(); ++i) {
          if (!lent.count(i)) { expected = i; break; }
        }
        const HeadroomPage p = h.lend(op);
        if (expected == UINT32_MAX) {
          ASSERT_FALSE(p.valid());
        } else {
          ASSERT_EQ(p.index, expected) << "seed " << seed;
          lent[p.index] = p;
        }
      } else if (choice < 8 && !lent.empty()) {
        auto it = lent.begin();
        std::advance(it, rng() % lent.size());
        h.give_back(it->second);
        lent.erase(it);
      } else if (choice == 8) {
        const std::uint32_t n = rng() % 8;
        const std::uint32_t first_taken_before = pages - h.pages_taken();
        std::uint32_t count = 0;
        const std::uint32_t taken = h.take_back(n, revoked, &count);
        const std::uint32_t first_taken_after = first_taken_before - taken;
        std::uint32_t expected_revoked = 0;
        for (auto it = lent.begin(); it != lent.end();) {
          if (it->first >= first_taken_after) {
            ASSERT_FALSE(h.current(it->second));
            it = lent.erase(it);
            ++expected_revoked;
          } else {
            ++it;
          }
        }
        ASSERT_EQ(count, expected_revoked) << "seed " << seed;
      } else {
        h.restore(rng() % 8);
      }
      ASSERT_EQ(h.check(), nullptr) << "seed " << seed;
      ASSERT_EQ(h.pages_lent(), lent.size());
    }
  }
}

TEST(Headroom, AllocatesNothingAfterCreate) {
  Headroom h = Headroom::create(0, 1024 * 16, 16).value();
  std::vector<Revocation> revoked(1024);
  std::vector<HeadroomPage> held;
  held.reserve(1024);
  const auto before = testing::heap_allocations();
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 100; ++i) held.push_back(h.lend(i));
    std::uint32_t n = 0;
    h.take_back(30, revoked, &n);
    for (const HeadroomPage& p : held) {
      if (h.current(p)) h.give_back(p);
    }
    held.clear();
    h.restore(30);
  }
  EXPECT_EQ(testing::heap_allocations(), before);
  EXPECT_EQ(h.counters().takings, 50u);
}

}  // namespace
}  // namespace activekv
