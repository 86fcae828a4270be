// prefix_cache_test.cpp — the host prefix cache on its own: storing pages at their real length,
// sharing a stem, leaves-first LRU eviction, token confirmation, and a property test.
//
// Rows are a function of the tokens before them, as a model's are: row(layer, t) = f(hash of
// tokens[0..t], layer). So every page the cache gives back can be checked against the rows the
// prompt itself would have written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/prefix_cache.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using runtime::PrefixCache;
using runtime::PrefixCacheConfig;

constexpr std::uint32_t P = 4;
constexpr std::uint32_t layers = 3;
constexpr std::uint64_t row_bytes = 8;
constexpr std::uint32_t pages_per_prefix = 32;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The rows a history of `tokens` holds: layers × tokens × row_bytes.
struct History {
  std::vector<std::int32_t> tokens;
  std::vector<std::byte> rows;
  explicit History(std::vector<std::int32_t> t) : tokens(std::move(t)) {
    rows.resize(std::size_t{layers} * tokens.size() * row_bytes);
    for (std::uint32_t l = 0; l < layers; ++l) {
      std::uint64_t h = 7;
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        h = mix(h ^ static_cast<std::uint32_t>(tokens[i]));
        const std::uint64_t v = mix(h + l);
        std::memcpy(&rows[(l * tokens.size() + i) * row_bytes], &v, row_bytes);
      }
    }
  }
  const std::byte* page(std::uint32_t layer, std::uint32_t p) const {
    return rows.data() + (std::size_t{layer} * tokens.size() + std::size_t{p} * P) * row_bytes;
  }
};

struct Fixture {
  std::vector<std::byte> store;
  PrefixCache cache;
  static Fixture make(std::uint32_t pages) {
    std::vector<std::byte> store(pages * PrefixCache::page_bytes(P, row_bytes, layers));
    PrefixCacheConfig c{pages, P, layers, row_bytes, pages_per_prefix, 42};
    Result<PrefixCache> cache = PrefixCache::create(c, store);
    EXPECT_TRUE(cache.ok());
    return Fixture{std::move(store), std::move(*cache)};
  }
  runtime::PrefixCacheInsert insert(const History& h) {
    return cache.insert(h.tokens, [&](std::uint32_t l, std::uint32_t p) { return h.page(l, p); });
  }
  // Matches `h`'s tokens and checks every matched page's rows against its own.
  std::uint32_t match_and_verify(const History& h, std::uint32_t pages_max = UINT32_MAX) {
    const std::uint32_t n = cache.match(h.tokens, pages_max);
    for (std::uint32_t p = 0; p < n; ++p) {
      for (std::uint32_t l = 0; l < layers; ++l) {
        EXPECT_EQ(std::memcmp(cache.rows(cache.chain()[p], l), h.page(l, p), P * row_bytes), 0)
            << "page " << p << " layer " << l;
      }
    }
    return n;
  }
};

std::vector<std::int32_t> seq(std::int32_t first, std::uint32_t n) {
  std::vector<std::int32_t> t(n);
  for (std::uint32_t i = 0; i < n; ++i) t[i] = first + static_cast<std::int32_t>(i);
  return t;
}

std::vector<std::int32_t> cat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A prompt's partial last page: the page below the matched chain whose first tokens are the
// prompt's rest, found among its siblings; its first rows are the prompt's rows. Touching it keeps
// the lru invariant (it is used before its parents).
TEST(PrefixCache, APartialLastPageIsFoundBelowTheChainByItsFirstTokensAndTouchedLeafFirst) {
  Fixture f = Fixture::make(16);
  const History answered({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});  // a prompt of 9 tokens and its answer: 3 full pages
  const History other({1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23});   // a sibling page under the same two
  f.insert(answered);
  f.insert(other);
  const History prompt({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  ASSERT_EQ(f.match_and_verify(prompt, 2), 2u);
  const std::vector<std::int32_t> rest{9, 10};
  const std::uint32_t page = f.cache.match_partial(2, rest);
  ASSERT_NE(page, PrefixCache::none);
  for (std::uint32_t l = 0; l < layers; ++l) {
    EXPECT_EQ(std::memcmp(f.cache.rows(page, l), answered.page(l, 2), 2 * row_bytes), 0) << "layer " << l;
  }
  EXPECT_EQ(f.cache.match_partial(2, std::vector<std::int32_t>{20}), f.cache.match_partial(2, std::vector<std::int32_t>{20, 21, 22}));
  EXPECT_NE(f.cache.match_partial(2, std::vector<std::int32_t>{20}), page) << "the sibling page, not the answered one";
  EXPECT_EQ(f.cache.match_partial(2, std::vector<std::int32_t>{9, 11}), PrefixCache::none) << "every token confirmed";
  ASSERT_EQ(f.match_and_verify(prompt, 1), 1u);
  EXPECT_EQ(f.cache.match_partial(1, std::vector<std::int32_t>{5, 6, 9}), PrefixCache::none) << "page 1 holds 5 6 7 8";
  ASSERT_EQ(f.match_and_verify(prompt, 2), 2u);
  f.cache.touch_below_chain(page, 2);
  EXPECT_EQ(f.cache.check(), nullptr);
}

// A window layer's ring may have lost a page's rows when it is offered (rows() gives nullptr): the
// page is stored without them and says so; the layers it had are stored; a later offer of the same
// page that still has them fills them in.
TEST(PrefixCache, APageOfferedWithoutAWindowLayersRowsIsMarkedAndALaterOfferFillsThem) {
  Fixture f = Fixture::make(8);
  const History h(seq(100, 12));  // 3 pages
  // Layer 1 is the window layer; its ring held only page 2.
  runtime::PrefixCacheInsert done = f.cache.insert(h.tokens, [&](std::uint32_t l, std::uint32_t p) -> const std::byte* {
    return l == 1 && p < 2 ? nullptr : h.page(l, p);
  });
  EXPECT_EQ(done.stored, 3u);
  EXPECT_EQ(done.without_window_rows, 2u);
  ASSERT_EQ(f.cache.match(h.tokens, 3), 3u);
  EXPECT_FALSE(f.cache.window_rows(f.cache.chain()[0]));
  EXPECT_FALSE(f.cache.window_rows(f.cache.chain()[1]));
  EXPECT_TRUE(f.cache.window_rows(f.cache.chain()[2]));
  for (std::uint32_t p = 0; p < 3; ++p) {
    EXPECT_EQ(std::memcmp(f.cache.rows(f.cache.chain()[p], 0), h.page(0, p), P * row_bytes), 0) << "the full layers are stored";
  }
  // The same prefix again, its ring holding page 1 now too: page 1 is filled, page 0 stays without.
  done = f.cache.insert(h.tokens, [&](std::uint32_t l, std::uint32_t p) -> const std::byte* {
    return l == 1 && p < 1 ? nullptr : h.page(l, p);
  });
  EXPECT_EQ(done.stored, 0u);
  EXPECT_EQ(done.shared, 3u);
  EXPECT_EQ(done.window_rows_filled, 1u);
  EXPECT_EQ(done.without_window_rows, 1u);
  ASSERT_EQ(f.cache.match(h.tokens, 3), 3u);
  EXPECT_FALSE(f.cache.window_rows(f.cache.chain()[0]));
  EXPECT_TRUE(f.cache.window_rows(f.cache.chain()[1]));
  EXPECT_EQ(std::memcmp(f.cache.rows(f.cache.chain()[1], 1), h.page(1, 1), P * row_bytes), 0);
  EXPECT_EQ(f.cache.check(), nullptr);
}

// Recurrent state: a chained page keeps the state at its end in one of the store's state slots.
// Two slots: a third state takes the least recently used page's (its rows stay); evicting a page
// frees its state; check() holds throughout.
TEST(PrefixCache, StatesSitBesidePagesAndTheLeastRecentlyUsedGivesItsUp) {
  constexpr std::uint64_t state_bytes = 16;
  const PrefixCacheConfig c{4, P, layers, row_bytes, pages_per_prefix, 42, 2, state_bytes};
  std::vector<std::byte> store(PrefixCache::store_bytes(c));
  EXPECT_EQ(store.size(), 4 * PrefixCache::page_bytes(P, row_bytes, layers) + 2 * state_bytes);
  Result<PrefixCache> made = PrefixCache::create(c, store);
  ASSERT_TRUE(made.ok());
  PrefixCache cache = std::move(made).value();
  auto state_of = [](std::uint8_t v) { return std::vector<std::byte>(state_bytes, std::byte{v}); };
  const History a(seq(100, 8)), b(seq(200, 4)), d(seq(300, 4));
  auto rows = [](const History& h) { return [&h](std::uint32_t l, std::uint32_t p) { return h.page(l, p); }; };
  cache.insert(a.tokens, rows(a));  // 2 pages
  const std::vector<std::byte> s1 = state_of(1), s2 = state_of(2), s3 = state_of(3);
  ASSERT_TRUE(cache.put_state(0, s1.data()));
  ASSERT_TRUE(cache.put_state(1, s2.data()));
  EXPECT_EQ(cache.states_used(), 2u);
  ASSERT_EQ(cache.match(a.tokens, 2), 2u);
  EXPECT_EQ(std::memcmp(cache.state(cache.chain()[0]), s1.data(), state_bytes), 0);
  EXPECT_EQ(std::memcmp(cache.state(cache.chain()[1]), s2.data(), state_bytes), 0);
  EXPECT_EQ(cache.check(), nullptr);
  // b (more recent) takes the least recently used state: a's leaf (page 1) is the LRU tail.
  cache.insert(b.tokens, rows(b));
  ASSERT_TRUE(cache.put_state(0, s3.data()));
  EXPECT_EQ(cache.state_evictions(), 1u);
  ASSERT_EQ(cache.match(a.tokens, 2), 2u);
  EXPECT_TRUE(cache.has_state(cache.chain()[0]));
  EXPECT_FALSE(cache.has_state(cache.chain()[1])) << "the least recently used state gave way; the rows stay";
  EXPECT_EQ(cache.check(), nullptr);
  // d fills the last page; its state takes a's first page's (the least recently used one with a state).
  cache.insert(d.tokens, rows(d));
  ASSERT_TRUE(cache.put_state(0, s1.data()));
  EXPECT_EQ(cache.state_evictions(), 2u);
  ASSERT_EQ(cache.match(a.tokens, 2), 2u);
  EXPECT_FALSE(cache.has_state(cache.chain()[0]));
  // f (2 pages) evicts a's two pages, leaf first; its states take b's and then d's.
  const History f(seq(400, 8));
  EXPECT_EQ(cache.insert(f.tokens, rows(f)).evicted, 2u);
  ASSERT_TRUE(cache.put_state(1, s2.data()));
  ASSERT_TRUE(cache.put_state(0, s3.data()));
  EXPECT_EQ(cache.state_evictions(), 4u);
  ASSERT_EQ(cache.match(b.tokens, 1), 1u);
  EXPECT_FALSE(cache.has_state(cache.chain()[0]));
  ASSERT_EQ(cache.match(f.tokens, 2), 2u);
  EXPECT_EQ(std::memcmp(cache.state(cache.chain()[1]), s2.data(), state_bytes), 0);
  EXPECT_EQ(cache.check(), nullptr);
}

TEST(PrefixCache, RefusesZeroFieldsAndATooSmallStoreNamingThem) {
  std::vector<std::byte> store(1024);
  Result<PrefixCache> r = PrefixCache::create(PrefixCacheConfig{0, P, layers, row_bytes, 8, 1}, store);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "prefix_cache");
  r = PrefixCache::create(PrefixCacheConfig{1000, P, layers, row_bytes, 8, 1}, store);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "prefix_cache");
}

TEST(PrefixCache, StoresFullPagesAtTheirRealLengthAndGivesBackTheSameRows) {
  Fixture f = Fixture::make(16);
  const History h(seq(100, 4 * P + 3));  // 4 full pages and a partial one
  const auto ins = f.insert(h);
  EXPECT_EQ(ins.stored, 4u);
  EXPECT_EQ(ins.shared, 0u);
  EXPECT_EQ(f.cache.pages_used(), 4u);
  EXPECT_EQ(f.cache.bytes_used(), 4 * PrefixCache::page_bytes(P, row_bytes, layers));
  EXPECT_EQ(f.match_and_verify(h), 4u);
  EXPECT_EQ(f.match_and_verify(h, 2), 2u);
  // A prompt that differs inside page 2 matches pages 0 and 1 only.
  History other(h.tokens);
  other.tokens[2 * P + 1] = 9999;
  other = History(other.tokens);
  EXPECT_EQ(f.match_and_verify(other), 2u);
  // Inserting the same history again copies nothing.
  const auto again = f.insert(h);
  EXPECT_EQ(again.stored, 0u);
  EXPECT_EQ(again.shared, 4u);
  EXPECT_EQ(f.cache.check(), nullptr);
}

TEST(PrefixCache, ASharedStemIsStoredOnceAndCountsItsPrefixes) {
  Fixture f = Fixture::make(32);
  const std::vector<std::int32_t> system = seq(1, 3 * P);  // a common system prompt: 3 pages
  const History a(cat(system, seq(1000, 2 * P)));
  const History b(cat(system, seq(2000, 2 * P)));
  const History c(cat(system, seq(3000, 1 * P)));
  EXPECT_EQ(f.insert(a).stored, 5u);
  const auto ib = f.insert(b);
  EXPECT_EQ(ib.stored, 2u);
  EXPECT_EQ(ib.shared, 3u);
  const auto ic = f.insert(c);
  EXPECT_EQ(ic.stored, 1u);
  EXPECT_EQ(f.cache.pages_used(), 3u + 2 + 2 + 1);
  ASSERT_EQ(f.match_and_verify(b), 5u);
  EXPECT_EQ(f.cache.prefixes_through(f.cache.chain()[0]), 3u);
  EXPECT_EQ(f.cache.prefixes_through(f.cache.chain()[2]), 3u);
  EXPECT_EQ(f.cache.prefixes_through(f.cache.chain()[3]), 1u);
  EXPECT_EQ(f.cache.check(), nullptr);
}

TEST(PrefixCache, EvictionIsLeastRecentlyUsedLeavesFirstSoTheStemOutlivesItsBranches) {
  // 8 pages: a 2-page stem with three 2-page branches fill 8; a stranger of 3 pages needs 3.
  Fixture f = Fixture::make(8);
  const std::vector<std::int32_t> system = seq(1, 2 * P);
  const History a(cat(system, seq(1000, 2 * P)));
  const History b(cat(system, seq(2000, 2 * P)));
  const History c(cat(system, seq(3000, 2 * P)));
  f.insert(a);
  f.insert(b);
  f.insert(c);
  ASSERT_EQ(f.cache.pages_used(), 8u);
  ASSERT_EQ(f.cache.match(a.tokens, 100), 4u);  // a used again: b is now the least recent branch
  f.cache.touch_chain(4);
  const History stranger(seq(5000, 3 * P));
  const auto ins = f.insert(stranger);
  EXPECT_EQ(ins.stored, 3u);
  EXPECT_EQ(ins.evicted, 3u);
  EXPECT_EQ(f.cache.evictions(), 3u);
  // b's branch (2 pages) went first, then c's newest leaf: the stem stays for a and what is left of c.
  EXPECT_EQ(f.match_and_verify(b), 2u);
  EXPECT_EQ(f.match_and_verify(c), 3u);
  EXPECT_EQ(f.match_and_verify(a), 4u);
  EXPECT_EQ(f.match_and_verify(stranger), 3u);
  EXPECT_EQ(f.cache.check(), nullptr);
}

TEST(PrefixCache, APrefixLongerThanTheCacheKeepsItsFirstPagesAndNeverEvictsItsOwnChain) {
  Fixture f = Fixture::make(4);
  const History small(seq(1, 2 * P));
  f.insert(small);
  const History big(seq(500, 7 * P));
  const auto ins = f.insert(big);
  EXPECT_EQ(ins.stored, 4u);
  EXPECT_EQ(ins.skipped, 3u);
  EXPECT_EQ(ins.evicted, 2u);
  EXPECT_EQ(f.match_and_verify(big), 4u);
  EXPECT_EQ(f.match_and_verify(small), 0u);
  EXPECT_EQ(f.cache.check(), nullptr);
}

// Random prompts over a few stems and branches, a cache smaller than what is offered: check()
// after every operation (counts, hash table, LRU list, leaf counts, the lru invariant), every
// match's rows against the prompt's own, and no heap allocation in insert, match or touch.
TEST(PrefixCacheProperty, RandomInsertsAndMatchesKeepEveryInvariantWithoutAllocating) {
  for (std::uint32_t seed = 0; seed < 60; ++seed) {
    std::mt19937 rng(seed);  // 32-bit draws
    const std::uint32_t pages = 4 + static_cast<std::uint32_t>(rng() % 40);
    Fixture f = Fixture::make(pages);
    std::vector<History> pool;
    for (std::uint32_t i = 0; i < 12; ++i) {
      const std::vector<std::int32_t> stem = seq(static_cast<std::int32_t>(1 + (rng() % 3) * 100), (rng() % 4) * P);
      pool.emplace_back(cat(stem, seq(static_cast<std::int32_t>(10000 + i * 100), 1 + static_cast<std::uint32_t>(rng() % (6 * P)))));
    }
    std::uint64_t evicted = 0;
    for (std::uint32_t op = 0; op < 200; ++op) {
      const History& h = pool[rng() % pool.size()];
      const std::uint64_t before = testing::heap_allocations();
      if (rng() % 2 == 0) {
        const auto ins = f.insert(h);
        evicted += ins.evicted;
        ASSERT_EQ(ins.stored + ins.shared + ins.skipped, std::min<std::size_t>(h.tokens.size() / P, pages_per_prefix));
      } else {
        const std::uint32_t n = f.cache.match(h.tokens, rng() % 8);
        f.cache.touch_chain(n);
      }
      ASSERT_EQ(testing::heap_allocations(), before) << "seed " << seed << " op " << op;
      ASSERT_EQ(f.cache.check(), nullptr) << "seed " << seed << " op " << op;
      f.match_and_verify(h);
    }
    EXPECT_EQ(f.cache.evictions(), evicted);
  }
}

}  // namespace
}  // namespace activekv
