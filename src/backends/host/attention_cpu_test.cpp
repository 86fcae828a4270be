// attention_cpu_test.cpp — the CPU attention kernel on its own: a query row's
// output is the same bits however the work is cut.
//
// The same queries over the same scattered pages are computed as one prefill
// chunk (tiles of 8 queries), as chunks of other sizes, one query at a time
// (a decode step), with each query's page list cut into 2 or 3 parts (the
// decode split over threads, merged in page order by finish_attention_split),
// and in two passes over the pages carrying the running state. Every output
// must equal the one-chunk output bit for bit (memcmp), and the one-chunk
// output must agree with the fp64 reference. Shapes: the smollm2 one (f16,
// 3 kv × 64, 9 q heads), a bf16 one with 4 q heads per kv head, an f32 one
// with head_dim 40 (the kernels' tails), and two window layers (keys in (p − W, p],
// the boundary inside a page; Gemma 3's 1 kv × 256 shape). The process runs the kernel build its
// CPU gets; ctest runs it a second time with ACTIVEKV_HOST_KERNEL=portable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backends/host/attention_cpu.hpp"

namespace activekv::host {
namespace {

struct Case {
  const char* name;
  AttentionShape shape;
  std::uint32_t page_tokens;
  std::uint32_t context;   // tokens in the pages
  std::uint32_t first;     // position of the first query
  std::uint32_t queries;   // consecutive positions first, first + 1, ...
  std::uint32_t window = 0;  // a window layer's W (keys in (p − W, p]); 0: full causal
};

std::uint16_t f32_to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t f32_to_f16(float x) {  // normal values of modest range only (the test's)
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  const std::uint32_t mantissa = (bits >> 13) & 0x3ffu;
  if (exponent <= 0) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exponent) << 10) | mantissa);
}

class Fixture {
 public:
  explicit Fixture(const Case& c) : c_(c) {
    const AttentionShape& s = c.shape;
    const std::uint32_t pages = (c.context + c.page_tokens - 1) / c.page_tokens;
    const std::uint64_t page_bytes = std::uint64_t{c.page_tokens} * s.row_bytes();
    arena_.assign(pages * page_bytes + 4096, std::byte{0});
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::uint32_t> slots(pages);
    std::iota(slots.begin(), slots.end(), 0u);
    std::shuffle(slots.begin(), slots.end(), rng);  // pages scattered, as in a pool
    for (std::uint32_t p = 0; p < pages; ++p) {
      const std::uint32_t tokens = std::min(c.page_tokens, c.context - p * c.page_tokens);
      table_.push_back(AttentionPage{slots[p] * page_bytes, p * c.page_tokens, tokens});
    }
    const std::uint32_t elements = 2 * s.kv_heads * s.head_dim;
    for (const AttentionPage& page : table_) {
      for (std::uint32_t r = 0; r < page.tokens; ++r) {
        std::byte* row = arena_.data() + page.arena_offset + r * s.row_bytes();
        for (std::uint32_t e = 0; e < elements; ++e) {
          const float x = normal(rng);
          if (s.dtype == DType::f32) {
            std::memcpy(row + 4 * e, &x, 4);
          } else {
            const std::uint16_t h = s.dtype == DType::f16 ? f32_to_f16(x) : f32_to_bf16(x);
            std::memcpy(row + 2 * e, &h, 2);
          }
        }
      }
    }
    queries_.resize(std::size_t{c.queries} * s.q_heads * s.head_dim);
    for (float& x : queries_) x = 2.0f * normal(rng);
    limits_.batch_pages_max = static_cast<std::uint32_t>(2 * table_.size());
    limits_.batch_queries_max = c.queries;
    limits_.batch_tasks_max = 4;
    limits_.q_heads_max = s.q_heads;
    limits_.head_dim_max = s.head_dim;
    job_.reserve(limits_);
    scratch_.reserve(limits_);
    split_.reserve(limits_, 2, 64ull << 20);
  }

  std::size_t row_floats() const { return std::size_t{c_.shape.q_heads} * c_.shape.head_dim; }

  // Queries [q0, q0 + n) over pages [p0, p1) in one job cut `parts` ways (1: tiles).
  // state: nullptr, or [n][q_heads][2 + dim] loaded (load) and stored.
  // heads: empty, or per page of the table the KV heads that read it (page_heads).
  std::vector<float> run(std::uint32_t q0, std::uint32_t n, std::uint32_t parts, std::uint32_t p0, std::uint32_t p1,
                         float* state = nullptr, bool load = false, bool write_output = true,
                         const std::vector<std::uint32_t>& heads = {}, std::uint32_t balance_threads = 0) {
    std::vector<float> out(n * row_floats(), -1.0f);
    std::vector<std::uint32_t> positions(n);
    for (std::uint32_t i = 0; i < n; ++i) positions[i] = c_.first + q0 + i;
    // One task per query when the job is split (the decode layout), else one task.
    std::vector<AttentionTask> tasks;
    std::vector<AttentionPage> pages;
    std::vector<std::uint32_t> page_heads;
    for (std::uint32_t i = 0; i < (parts > 1 ? n : 1u); ++i) {
      tasks.push_back(parts > 1 ? AttentionTask{static_cast<std::uint32_t>(pages.size()), p1 - p0, i, 1}
                                : AttentionTask{0, p1 - p0, 0, n});
      pages.insert(pages.end(), table_.begin() + p0, table_.begin() + p1);
      if (!heads.empty()) page_heads.insert(page_heads.end(), heads.begin() + p0, heads.begin() + p1);
    }
    AttentionBatch batch;
    batch.shape = c_.shape;
    batch.tasks = tasks;
    batch.pages = pages;
    batch.page_heads = page_heads;
    batch.query_positions = positions;
    batch.window_tokens = c_.window;
    batch.queries = std::span<const float>(queries_.data() + q0 * row_floats(), n * row_floats());
    batch.output = out;
    batch.write_output = write_output;
    if (state != nullptr) {
      batch.state = std::span<float>(state, std::size_t{n} * c_.shape.q_heads * (2 + c_.shape.head_dim));
      batch.load_state = load;
      batch.store_state = true;
    }
    job_.assign(batch);
    if (balance_threads > 0) job_.balance_tiles(balance_threads);
    if (parts > 1) {
      EXPECT_TRUE(job_.can_split(parts, split_));
      job_.page_parts = parts;
    }
    for (std::uint32_t u = 0; u < job_.units(); ++u) run_attention_units(arena_.data(), job_, u, u + 1, scratch_, &split_);
    if (parts > 1) finish_attention_split(job_, split_, nullptr);
    return out;
  }

  std::vector<float> reference() {
    std::vector<float> out(c_.queries * row_floats());
    std::vector<std::uint32_t> positions(c_.queries);
    for (std::uint32_t i = 0; i < c_.queries; ++i) positions[i] = c_.first + i;
    const AttentionTask task{0, static_cast<std::uint32_t>(table_.size()), 0, c_.queries};
    AttentionBatch batch;
    batch.shape = c_.shape;
    batch.tasks = std::span<const AttentionTask>(&task, 1);
    batch.pages = table_;
    batch.query_positions = positions;
    batch.window_tokens = c_.window;
    batch.queries = queries_;
    batch.output = out;
    attention_reference(arena_.data(), batch, out);
    return out;
  }

  std::uint32_t pages() const { return static_cast<std::uint32_t>(table_.size()); }
  const std::vector<AttentionTile>& tiles() const { return job_.tiles; }

 private:
  Case c_;
  std::vector<std::byte> arena_;
  std::vector<AttentionPage> table_;
  std::vector<float> queries_;
  MemoryRequest limits_;
  AttentionJob job_;
  AttentionScratch scratch_;
  AttentionSplit split_;
};

bool same_bits(const std::vector<float>& a, const float* b, std::size_t n) {
  return std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

const Case cases[] = {
    {"smollm2_f16", {9, 3, 64, DType::f16, 0.125f}, 16, 300, 260, 37},
    {"gqa4_bf16", {8, 2, 32, DType::bf16, 0.17677669f}, 16, 150, 120, 29},
    {"dim40_f32", {6, 3, 40, DType::f32, 0.15811388f}, 32, 120, 70, 45},
    // Window layers: the boundary falls inside a page (37, 21 not multiples of the page), pages
    // wholly below every query's window are skipped, and early queries see all their history.
    {"window37_f16", {8, 2, 64, DType::f16, 0.125f}, 16, 300, 230, 45, 37},
    {"window21_bf16", {4, 2, 256, DType::bf16, 0.0625f}, 16, 120, 5, 60, 21},
};

// llama.cpp's standard sliding window: a key at k is masked for the query at p iff p − k ≥ W.
TEST(VisibleRows, AWindowQuerySeesTheKeysAbovePositionMinusWindow) {
  const AttentionPage page{0, 16, 16};  // tokens 16 … 31
  const auto rows = [&](std::uint32_t position, std::uint32_t window) {
    const VisibleRows v = visible_rows(page, position, window);
    return std::pair<std::uint32_t, std::uint32_t>{v.begin, v.end};
  };
  EXPECT_EQ(rows(20, 0), (std::pair<std::uint32_t, std::uint32_t>{0, 5}));    // causal: 16 … 20
  EXPECT_EQ(rows(20, 5), (std::pair<std::uint32_t, std::uint32_t>{0, 5}));    // 16 … 20: 20 − 16 = 4 < 5
  EXPECT_EQ(rows(20, 4), (std::pair<std::uint32_t, std::uint32_t>{1, 5}));    // 17 … 20: 16 is 4 back
  EXPECT_EQ(rows(40, 20), (std::pair<std::uint32_t, std::uint32_t>{5, 16}));  // 21 … 31
  EXPECT_EQ(rows(46, 16), (std::pair<std::uint32_t, std::uint32_t>{15, 16})); // 31 only
  EXPECT_TRUE(visible_rows(page, 47, 16).empty());                            // 32 … 47: none here
  EXPECT_TRUE(visible_rows(page, 15, 0).empty());                             // before the page
  EXPECT_EQ(visible_rows(page, 31, 1).count(), 1u);                           // W = 1: itself
}

class AttentionCpuKernel : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCpuKernel, APrefillChunkEqualsTheFp64Reference) {
  Fixture f(GetParam());
  const std::vector<float> chunk = f.run(0, GetParam().queries, 1, 0, f.pages());
  const std::vector<float> ref = f.reference();
  double worst = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double{chunk[i]} - ref[i]));
  EXPECT_LT(worst, 2e-5) << "worst |kernel - fp64 reference|";
}

TEST_P(AttentionCpuKernel, EveryQueryRowIsTheSameBitsInAnyChunkAndAsADecodeStep) {
  const Case& c = GetParam();
  Fixture f(c);
  const std::vector<float> whole = f.run(0, c.queries, 1, 0, f.pages());
  const std::size_t row = f.row_floats();
  // Chunks of other sizes (tiles of 8 then fall on other queries).
  for (const std::uint32_t size : {1u, 3u, 5u, 8u, 13u}) {
    for (std::uint32_t q0 = 0; q0 < c.queries; q0 += size) {
      const std::uint32_t n = std::min(size, c.queries - q0);
      const std::vector<float> part = f.run(q0, n, 1, 0, f.pages());
      EXPECT_TRUE(same_bits(part, whole.data() + q0 * row, n * row)) << "chunk of " << size << " at query " << q0;
    }
  }
  // Decode steps: one query, its page list whole or cut in 2 or 3 parts over threads.
  for (std::uint32_t q = 0; q < c.queries; q += 4) {
    for (const std::uint32_t parts : {2u, 3u}) {
      const std::vector<float> step = f.run(q, 1, parts, 0, f.pages());
      EXPECT_TRUE(same_bits(step, whole.data() + q * row, row)) << "query " << q << " split in " << parts;
    }
  }
  // Two split queries in one job (two contexts decoding together).
  const std::vector<float> pair = f.run(c.queries - 2, 2, 2, 0, f.pages());
  EXPECT_TRUE(same_bits(pair, whole.data() + (c.queries - 2) * row, 2 * row));
}

TEST_P(AttentionCpuKernel, PassesOverThePagesCarryingStateEqualOnePass) {
  const Case& c = GetParam();
  Fixture f(c);
  const std::vector<float> whole = f.run(0, c.queries, 1, 0, f.pages());
  const std::size_t row = f.row_floats();
  for (const std::uint32_t cut : {1u, f.pages() / 2, f.pages() - 1}) {
    std::vector<float> state(std::size_t{c.queries} * c.shape.q_heads * (2 + c.shape.head_dim));
    (void)f.run(0, c.queries, 1, 0, cut, state.data(), false, false);
    const std::vector<float> second = f.run(0, c.queries, 1, cut, f.pages(), state.data(), true);
    EXPECT_TRUE(same_bits(second, whole.data(), c.queries * row)) << "passes cut at page " << cut;
    // The same passes for one query decoded with its pages split over threads.
    std::vector<float> one(std::size_t{c.shape.q_heads} * (2 + c.shape.head_dim));
    const std::uint32_t q = c.queries - 1;
    (void)f.run(q, 1, 2, 0, cut, one.data(), false, false);
    const std::vector<float> step = f.run(q, 1, 2, cut, f.pages(), one.data(), true);
    EXPECT_TRUE(same_bits(step, whole.data() + q * row, row)) << "split passes cut at page " << cut;
  }
}

// Per-KV-head page lists (page_heads): a decode step cut over threads is the same bits as the
// whole list (the split parts keep and merge only the heads that read each page), and a KV head
// reading every page gives the bits of the call without page_heads.
TEST_P(AttentionCpuKernel, PerHeadPagesGiveTheSameBitsSplitOrWhole) {
  const Case& c = GetParam();
  Fixture f(c);
  const std::uint32_t kv = c.shape.kv_heads;
  const std::uint32_t group = c.shape.q_heads / kv;
  const std::uint32_t all = (1u << kv) - 1u;
  std::mt19937 rng(11);
  std::vector<std::uint32_t> heads(f.pages());
  for (std::uint32_t& h : heads) h = 1u + static_cast<std::uint32_t>(rng() % all);
  heads.front() = 1u;  // KV head 0 reads every page, the others some
  for (std::uint32_t& h : heads) h |= 1u;
  heads.back() = all;
  const std::vector<float> plain = f.run(0, c.queries, 1, 0, f.pages());
  const std::vector<float> whole = f.run(0, c.queries, 1, 0, f.pages(), nullptr, false, true, heads);
  const std::size_t row = f.row_floats();
  const std::size_t head0 = std::size_t{group} * c.shape.head_dim;  // KV head 0's query heads
  for (std::uint32_t q = 0; q < c.queries; ++q) {
    EXPECT_EQ(std::memcmp(plain.data() + q * row, whole.data() + q * row, head0 * sizeof(float)), 0)
        << "query " << q << ": KV head 0 reads every page";
  }
  bool other_heads_differ = false;
  for (std::uint32_t q = 0; q < c.queries; ++q) {
    other_heads_differ = other_heads_differ || std::memcmp(plain.data() + q * row + head0, whole.data() + q * row + head0,
                                                           (row - head0) * sizeof(float)) != 0;
  }
  EXPECT_TRUE(other_heads_differ) << "the masks must change what the other KV heads read";
  for (std::uint32_t q = 0; q < c.queries; q += 4) {
    for (const std::uint32_t parts : {2u, 3u}) {
      const std::vector<float> step = f.run(q, 1, parts, 0, f.pages(), nullptr, false, true, heads);
      EXPECT_TRUE(same_bits(step, whole.data() + q * row, row)) << "query " << q << " split in " << parts;
    }
  }
}

// Tiles recut for the threads (balance_tiles: a multiple of the thread count, at most
// attention_tile_max queries, sizes within one of each other) cover every query once, in order,
// and give the bits of the tiles of 8.
TEST_P(AttentionCpuKernel, TilesBalancedOverThreadsGiveTheSameBits) {
  const Case& c = GetParam();
  Fixture f(c);
  const std::vector<float> whole = f.run(0, c.queries, 1, 0, f.pages());
  const std::size_t row = f.row_floats();
  // (threads, queries): more threads than queries gives one query a tile.
  const std::pair<std::uint32_t, std::uint32_t> runs[] = {{1, c.queries}, {2, 1},  {2, 17}, {2, c.queries},
                                                          {3, c.queries}, {64, 2}};
  for (const auto& [threads, n] : runs) {
    {
      const std::uint32_t q0 = c.queries - n;
      const std::vector<float> balanced = f.run(q0, n, 1, 0, f.pages(), nullptr, false, true, {}, threads);
      EXPECT_TRUE(same_bits(balanced, whole.data() + q0 * row, n * row)) << n << " queries, " << threads << " threads";
      const std::vector<AttentionTile>& tiles = f.tiles();
      const std::uint32_t k = static_cast<std::uint32_t>(tiles.size());
      EXPECT_TRUE(n == 1 ? k == 1 : k % threads == 0 || k == n) << k << " tiles of " << n << " queries, " << threads << " threads";
      EXPECT_GE(k * attention_tile_max, n);
      std::uint32_t next = 0, smallest = UINT32_MAX, largest = 0;
      for (const AttentionTile& t : tiles) {
        EXPECT_EQ(t.query_begin, next);
        next += t.query_count;
        smallest = std::min(smallest, t.query_count);
        largest = std::max(largest, t.query_count);
      }
      EXPECT_EQ(next, n) << "every query in one tile";
      EXPECT_LE(largest, attention_tile_max);
      EXPECT_LE(largest - smallest, 1u) << n << " queries, " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCpuKernel, ::testing::ValuesIn(cases),
                         [](const ::testing::TestParamInfo<Case>& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace activekv::host
