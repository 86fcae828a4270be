// attention_cpu.hpp — exact paged attention on the CPU, the host backend's kernel.
//
// The arithmetic, per (query row, query head), is one fixed sequence:
//
//   page partial  the page's visible rows in tiles of 16 (in ascending order):
//                 16 scores (q·k: 8-lane FMAs over d, then a fixed lane tree),
//                 tile max, (m, s, acc) rescaled to the new max, exp(score − m)
//                 summed in a fixed order and exp(score − m)·v added in row order
//   merge         M = max(m, m_p); s = s·e^(m-M) + s_p·e^(m_p-M);
//                 acc = acc·e^(m-M) + acc_p·e^(m_p-M)        (ascending pages)
//   out           acc / s
//
// How the work is cut never enters that sequence:
//   - prefill: a unit is a tile of up to 8 consecutive queries of one task over
//     all its pages. Each 16-row tile of a page is widened to fp32 once and
//     used by every query of the tile; each K/V row is loaded once for every
//     query head of its kv head's group (GQA). With several threads a task's
//     queries are cut instead into a multiple of the thread count of tiles of
//     nearly equal size, up to 16 queries each (balance_tiles): a short chunk
//     over a long history (a follow-up's suffix, 37 queries after 704 tokens)
//     then splits evenly over the threads (19 and 18 queries, not 21 and 16)
//     and reads its history 4 times instead of 5.
//   - decode (fewer queries than threads): a query's page list is cut into
//     parts, one per thread. Part 0 merges its pages into the running state;
//     the other parts store each page's partial, and finish_split merges them
//     in ascending page order afterwards — the same merges in the same order.
// A page's partial depends only on its bytes and the query, never on where the
// bytes live or on the other queries of the tile: the output of a query row is
// bit-identical for every layout of the same pages, every thread count, every
// tile size and chunking (prefill or decode). Per-page attention mass is
// summed per thread and reduced in thread order, so it is deterministic for a
// given thread count (and exact to rounding across counts).
//
// Per-KV-head page lists (AttentionBatch::page_heads, sparse attention): a
// page whose mask lacks KV head k is neither computed nor merged for k's query
// heads; the other heads' arithmetic is the sequence above, over their pages.
//
// Shapes (fp32, row-major): queries/output [queries][q_heads][head_dim],
// state [queries][q_heads][2 + head_dim] (m, s, acc), page_mass [pages].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/backend.hpp"

namespace activekv::host {

// Most queries of one prefill tile (balance_tiles; assign cuts tiles of 8).
constexpr std::uint32_t attention_tile_max = 16;

// One prefill unit: queries [query_begin, query_begin + query_count) of tasks[task].
struct AttentionTile {
  std::uint32_t task = 0, query_begin = 0, query_count = 0;
};
struct AttentionSplit;

// A batch whose arrays the kernel may read later (the host backend copies a
// caller's tasks/pages/positions into one of these at enqueue).
struct AttentionJob {
  AttentionShape shape;
  std::vector<AttentionTask> tasks;          // capacity batch_tasks_max, size = tasks
  std::vector<AttentionPage> pages;          // capacity batch_pages_max
  std::vector<std::uint32_t> positions;      // capacity batch_queries_max
  std::vector<std::uint32_t> query_task;     // [queries]: the task that owns each query row
  std::vector<std::uint32_t> page_heads;     // empty, or [pages]: the KV heads that read each page
  const std::byte* host_pool = nullptr;      // the base of pages with AttentionPage::host_pool
  const float* queries = nullptr;
  float* output = nullptr;
  float* page_mass = nullptr;
  float* state = nullptr;
  bool load_state = false;
  bool store_state = false;
  bool write_output = true;
  std::uint32_t window_tokens = 0;           // AttentionBatch::window_tokens (0: no window)
  // Prefill units: tiles of up to 8 consecutive queries of one task (built by assign).
  std::vector<AttentionTile> tiles;          // capacity batch_queries_max
  // Parts each query's page list is cut into (1: units are tiles; more: decode,
  // units are (query, part)). Outputs do not depend on it.
  std::uint32_t page_parts = 1;

  // Reserves every array for the warm-up limits (no allocation afterwards).
  void reserve(const MemoryRequest& limits);
  // Copies `batch` in (sizes within the reserved limits; no allocation).
  void assign(const AttentionBatch& batch);
  // Recuts each task of more than one query into k tiles, k the smallest multiple of `threads`
  // with tiles of at most attention_tile_max queries, sizes differing by at most one (the first
  // ones larger), so the interleaved split gives each thread the same queries of every task to
  // within one per tile. Jobs with page mass keep their tiles of 1. Outputs do not depend on it.
  void balance_tiles(std::uint32_t threads) noexcept;
  // The KV heads that read page p (bit k: KV head k); every head without page_heads.
  std::uint32_t heads_of(std::uint32_t p) const noexcept { return page_heads.empty() ? UINT32_MAX : page_heads[p]; }
  std::uint32_t units() const noexcept {
    return page_parts > 1 ? static_cast<std::uint32_t>(positions.size()) * page_parts
                          : static_cast<std::uint32_t>(tiles.size());
  }
  // Whether the pages of each query may be cut into `parts` (every query its
  // own task, partials within `split`'s capacity).
  bool can_split(std::uint32_t parts, const AttentionSplit& split) const noexcept;
};


// Scratch one thread needs, sized at warm-up for the limits (no allocation later).
struct AttentionScratch {
  std::vector<float> run_m, run_s;    // [attention_tile_max queries][q_heads_max]: the unit's running state
  std::vector<float> run_acc;         // [attention_tile_max][q_heads_max][head_dim_max]
  std::vector<float> page_m, page_s;  // [attention_tile_max][q_heads_max]: the current page's partials
  std::vector<float> page_acc;        // [attention_tile_max][q_heads_max][head_dim_max]
  std::vector<float> scores;          // [q_heads_max][16 rows]
  std::vector<float> kt;              // [16 rows][q_heads_max × head_dim_max]: K widened
  std::vector<float> row;             // [16 rows][q_heads_max × head_dim_max]: V widened
  std::vector<float> log_mass;        // [batch_pages_max][q_heads_max] (jobs with page mass: tiles of 1)
  std::vector<float> mass;            // [batch_pages_max]
  void reserve(const MemoryRequest& limits);
};

// Shared by the threads of one split (decode) job: part 0's running state per
// query, the later parts' page partials, every page's log mass.
struct AttentionSplit {
  std::uint32_t pages_max = 0;        // page partials the buffer holds
  std::uint32_t queries_max = 0;
  std::vector<float> state;           // [queries_max][q_heads_max × (2 + head_dim_max)]
  std::vector<float> partials;        // [pages_max][q_heads_max × (2 + head_dim_max)]
  std::vector<float> log_mass;        // [pages_max][q_heads_max]
  // At most `queries` split queries and min(batch_pages_max, what fits in `bytes`) pages.
  void reserve(const MemoryRequest& limits, std::uint32_t queries, std::uint64_t bytes);
};

// Where a page's bytes start: in the arena, or (AttentionPage::host_pool) in the host pool.
inline const std::byte* page_bytes_of(const std::byte* arena, const std::byte* host_pool,
                                      const AttentionPage& page) noexcept {
  return (page.host_pool ? host_pool : arena) + page.arena_offset;
}

// Runs units [unit_begin, unit_end) of `job` over `arena`. When the job wants
// page mass, the units' contributions are added into scratch.mass (the caller
// zeroes it and reduces the threads' arrays into job.page_mass).
// `split` is needed when job.page_parts > 1; finish_attention_split then
// completes the job once every unit ran (adding page mass into `mass` when wanted).
void run_attention_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin,
                         std::uint32_t unit_end, AttentionScratch& scratch, AttentionSplit* split = nullptr);
void finish_attention_split(const AttentionJob& job, AttentionSplit& split, float* mass);

// Normalises summed mass: page_mass[p] /= (query_count x q_heads) of p's task.
void finish_page_mass(const AttentionJob& job, float* page_mass);

// Whether the AVX2/F16C/FMA path is in use on this CPU (chosen once).
bool attention_cpu_uses_avx2() noexcept;

// The plain reference of the layout contract: per (query, head) a softmax over
// all visible keys in fp64, straight from the page table (with page_heads: the
// pages its KV head reads). For tests.
// host_pool: the base of pages with AttentionPage::host_pool (none: null).
void attention_reference(const std::byte* arena, const AttentionBatch& batch, std::span<float> output,
                         const std::byte* host_pool = nullptr);

}  // namespace activekv::host
