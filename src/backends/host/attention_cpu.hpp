// attention_cpu.hpp — exact paged attention on the CPU, the host backend's kernel.
//
// The unit of work is one query row and a contiguous range of its kv heads
// (all of them unless a decode step has fewer queries than threads): each K/V
// row's bytes for those heads are read front to back once, widened to fp32,
// and used by the G = q_heads / kv_heads query heads of each kv head. Rows a
// few ahead are prefetched: pages are scattered through the arena, so the
// hardware's stride prefetcher cannot follow. A unit walks its task's pages in
// ascending order, per head:
//
//   page partial  rows in ascending token order, in blocks of 64 rows:
//                 block max, then (m, s, acc) rescaled to the new max and the
//                 block's exp(score - m) and exp(score - m)·v added in row order
//   merge         M = max(m, m_p); s = s·e^(m-M) + s_p·e^(m_p-M);
//                 acc = acc·e^(m-M) + acc_p·e^(m_p-M)        (ascending pages)
//   out           acc / s
//
// A page's partial depends only on its bytes and the query, never on where the
// bytes live, and the unit runs start to finish on one thread: the output is
// bit-identical for every layout of the same pages and every thread count.
// Per-page attention mass is summed per thread over a fixed, static split of
// units and reduced in thread order, so it is deterministic for a given
// thread count (and exact to rounding across counts).
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

// A batch whose arrays the kernel may read later (the host backend copies a
// caller's tasks/pages/positions into one of these at enqueue).
struct AttentionJob {
  AttentionShape shape;
  std::vector<AttentionTask> tasks;          // capacity batch_tasks_max, size = tasks
  std::vector<AttentionPage> pages;          // capacity batch_pages_max
  std::vector<std::uint32_t> positions;      // capacity batch_queries_max
  std::vector<std::uint32_t> query_task;     // [queries]: the task that owns each query row
  const float* queries = nullptr;
  float* output = nullptr;
  float* page_mass = nullptr;
  float* state = nullptr;
  bool load_state = false;
  bool store_state = false;
  bool write_output = true;
  // Units split each query's kv heads into this many contiguous ranges (1 when
  // there are enough queries to keep the threads busy). Outputs do not depend on it.
  std::uint32_t kv_splits = 1;

  // Reserves every array for the warm-up limits (no allocation afterwards).
  void reserve(const MemoryRequest& limits);
  // Copies `batch` in (sizes within the reserved limits; no allocation).
  void assign(const AttentionBatch& batch);
  std::uint32_t units() const noexcept { return static_cast<std::uint32_t>(positions.size()) * kv_splits; }
};

// Scratch one thread needs, sized at warm-up for the limits (no allocation later).
struct AttentionScratch {
  std::vector<float> run_m, run_s;    // [q_heads_max]: the unit's running state
  std::vector<float> run_acc;         // [q_heads_max][head_dim_max]
  std::vector<float> page_m, page_s;  // [q_heads_max]: the current page's partial
  std::vector<float> page_acc;        // [q_heads_max][head_dim_max]
  std::vector<float> scores;          // [q_heads_max][64 rows]
  std::vector<float> row;             // [q_heads_max][head_dim_max]: K or V widened
  std::vector<float> log_mass;        // [batch_pages_max][q_heads_max]
  std::vector<float> mass;            // [batch_pages_max]
  void reserve(const MemoryRequest& limits);
};

// Runs units [unit_begin, unit_end) of `job` over `arena`. When the job wants
// page mass, the units' contributions are added into scratch.mass (the caller
// zeroes it and reduces the threads' arrays into job.page_mass).
void run_attention_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin,
                         std::uint32_t unit_end, AttentionScratch& scratch);

// Normalises summed mass: page_mass[p] /= (query_count x q_heads) of p's task.
void finish_page_mass(const AttentionJob& job, float* page_mass);

// Whether the AVX2/F16C/FMA path is in use on this CPU (chosen once).
bool attention_cpu_uses_avx2() noexcept;

// The plain reference of the layout contract: per (query, head) a softmax over
// all visible keys in fp64, straight from the page table. For tests.
void attention_reference(const std::byte* arena, const AttentionBatch& batch, std::span<float> output);

}  // namespace activekv::host
