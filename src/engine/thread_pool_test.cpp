// thread_pool_test.cpp — every thread runs every region exactly once, regions
// do not overlap, parallel_for covers [0, n) exactly once, and a region
// allocates nothing.
#include "engine/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

TEST(ThreadPool, EveryThreadRunsEachRegionOnce) {
  for (std::uint32_t threads : {1u, 2u, 3u, 5u}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> counts(threads);
    for (int region = 0; region < 1000; ++region) {
      struct Ctx {
        std::vector<std::atomic<int>>* counts;
      } ctx{&counts};
      pool.run(
          [](void* c, std::uint32_t index, std::uint32_t count) {
            auto* x = static_cast<Ctx*>(c);
            EXPECT_EQ(count, x->counts->size());
            (*x->counts)[index].fetch_add(1);
          },
          &ctx);
      // run() returned: every thread finished this region.
      for (std::uint32_t t = 0; t < threads; ++t) ASSERT_EQ(counts[t].load(), region + 1) << "thread " << t;
    }
  }
}

TEST(ThreadPool, ParkedWorkersWakeForTheNextRegion) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> counts(3);
  for (int region = 0; region < 200; ++region) {
    if (region % 2 == 0) pool.park();  // workers sleep at once instead of spinning
    pool.parallel_for(3, [&](std::uint32_t, std::uint32_t, std::uint32_t index) { counts[index].fetch_add(1); });
    for (std::uint32_t t = 0; t < 3; ++t) ASSERT_EQ(counts[t].load(), region + 1) << "thread " << t;
  }
}

TEST(ThreadPool, ChunkedRegionsRunEveryChunkOnceAndInterleaveWithStaticOnes) {
  for (std::uint32_t threads : {1u, 2u, 3u}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(64);
    std::atomic<int> bad_thread{0};
    struct Ctx {
      std::vector<std::atomic<int>>* hits;
      std::atomic<int>* bad_thread;
      std::uint32_t threads;
    } ctx{&hits, &bad_thread, threads};
    for (int region = 0; region < 500; ++region) {
      const auto chunks = static_cast<std::uint32_t>(1 + region % 64);
      pool.run_chunks(
          [](void* c, std::uint32_t chunk, std::uint32_t count, std::uint32_t thread) {
            auto* x = static_cast<Ctx*>(c);
            if (thread >= x->threads || chunk >= count) x->bad_thread->fetch_add(1);
            (*x->hits)[chunk].fetch_add(1);
          },
          &ctx, chunks);
      // run_chunks returned: every chunk ran exactly once.
      for (std::uint32_t k = 0; k < 64; ++k) ASSERT_EQ(hits[k].exchange(0), k < chunks ? 1 : 0) << "chunk " << k;
      if (region % 3 == 0) {  // a static region between chunked ones
        std::atomic<int> ran{0};
        pool.parallel_for(threads, [&](std::uint32_t, std::uint32_t, std::uint32_t) { ran.fetch_add(1); });
        ASSERT_EQ(ran.load(), static_cast<int>(threads));
      }
      if (region % 5 == 0) pool.park();
    }
    EXPECT_EQ(bad_thread.load(), 0);
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (std::uint32_t n : {0u, 1u, 2u, 3u, 7u, 100u, 1001u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](std::uint32_t begin, std::uint32_t end, std::uint32_t) {
      for (std::uint32_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (std::uint32_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
  }
}

// A worker that wakes for a chunked region after it ended must not mistake the
// next chunked region for a static one (it once ran a null task here): back-to-
// back one-chunk regions, which the caller usually finishes alone, on a fresh
// pool that has never run a static region, then static regions between them.
TEST(ThreadPool, ALateWorkerNeverTakesAChunkedRegionForAStaticOne) {
  for (int round = 0; round < 4; ++round) {
    ThreadPool pool(3);
    std::atomic<std::uint64_t> chunks_run{0};
    std::atomic<std::uint64_t> static_runs{0};
    for (int i = 0; i < 20000; ++i) {
      pool.run_chunks([](void* c, std::uint32_t, std::uint32_t, std::uint32_t) {
        static_cast<std::atomic<std::uint64_t>*>(c)->fetch_add(1);
      }, &chunks_run, 1);
      if (round >= 2 && i % 7 == 0) {
        pool.run([](void* c, std::uint32_t, std::uint32_t) { static_cast<std::atomic<std::uint64_t>*>(c)->fetch_add(1); },
                 &static_runs);
      }
    }
    EXPECT_EQ(chunks_run.load(), 20000u);
    EXPECT_EQ(static_runs.load(), round >= 2 ? 3u * ((20000u + 6u) / 7u) : 0u);
  }
}

TEST(ThreadPool, RegionsAllocateNothing) {
  ThreadPool pool(2);
  std::atomic<std::uint64_t> sum{0};
  pool.parallel_for(10, [&](std::uint32_t b, std::uint32_t e, std::uint32_t) { sum += e - b; });  // warm-up
  const auto before = activekv::testing::heap_allocations();
  for (int i = 0; i < 100; ++i)
    pool.parallel_for(1000, [&](std::uint32_t b, std::uint32_t e, std::uint32_t) { sum += e - b; });
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
  EXPECT_EQ(sum.load(), 10u + 100u * 1000u);
}

}  // namespace
}  // namespace activekv::engine
