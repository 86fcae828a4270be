// attention_cpu.cpp — choosing the kernel build, the job and scratch, page mass, the reference.
//
// The kernel body lives in attention_cpu_kernel.hpp and is compiled twice:
// with AVX2 + F16C + FMA inner loops (attention_cpu_avx2.cpp, chosen once per
// process when the CPU has all three) and with portable ones. Each sums in a
// fixed order, so results are reproducible on one machine; the two builds
// differ from each other only by rounding.
#include "backends/host/attention_cpu.hpp"
#include "core/cpu_features.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/host/attention_cpu_isa.hpp"

namespace activekv::host {

namespace {

bool detect_avx2() noexcept {
#if defined(ACTIVEKV_HAVE_AVX2_KERNEL)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && activekv::cpu_has_f16c();
#else
  return false;
#endif
}

using RunUnits = void (*)(const std::byte*, const AttentionJob&, std::uint32_t, std::uint32_t, AttentionScratch&,
                          AttentionSplit*);
using FinishSplit = void (*)(const AttentionJob&, AttentionSplit&, float*);

// ACTIVEKV_HOST_KERNEL=portable forces the portable build (its tests run it on
// machines that have AVX2).
bool portable_forced() noexcept {
  const char* forced = std::getenv("ACTIVEKV_HOST_KERNEL");
  return forced != nullptr && std::strcmp(forced, "portable") == 0;
}

RunUnits chosen_kernel() noexcept {
#if defined(ACTIVEKV_HAVE_AVX2_KERNEL)
  static const RunUnits kernel = detect_avx2() && !portable_forced() ? &avx2::run_units : &portable::run_units;
#else
  static const RunUnits kernel = &portable::run_units;
#endif
  return kernel;
}

FinishSplit chosen_finish() noexcept {
#if defined(ACTIVEKV_HAVE_AVX2_KERNEL)
  if (chosen_kernel() != &portable::run_units) return &avx2::finish_split;
#endif
  return &portable::finish_split;
}

// Whether KV head `kv_head` reads page p of the batch (page_heads; every head without it).
bool reads(const AttentionBatch& batch, std::size_t p, std::uint32_t kv_head) {
  return batch.page_heads.empty() || ((batch.page_heads[p] >> kv_head) & 1u) != 0;
}

}  // namespace

bool attention_cpu_uses_avx2() noexcept { return chosen_kernel() != &portable::run_units; }

void AttentionJob::reserve(const MemoryRequest& limits) {
  tasks.reserve(limits.batch_tasks_max);
  pages.reserve(limits.batch_pages_max);
  positions.reserve(limits.batch_queries_max);
  query_task.reserve(limits.batch_queries_max);
  page_heads.reserve(limits.batch_pages_max);
  tiles.reserve(limits.batch_queries_max);
}

bool AttentionJob::can_split(std::uint32_t parts, const AttentionSplit& split) const noexcept {
  if (parts < 2 || positions.size() > split.queries_max || pages.size() > split.pages_max) return false;
  if (std::size_t{shape.q_heads} * (2u + shape.head_dim) * split.queries_max > split.state.size()) return false;
  for (const AttentionTask& task : tasks)
    if (task.query_count > 1) return false;  // partials are kept per page: one query per task
  return true;
}

void AttentionJob::assign(const AttentionBatch& batch) {
  AK_ASSERT(batch.tasks.size() <= tasks.capacity(), "attention job: tasks beyond the reserved limit");
  AK_ASSERT(batch.pages.size() <= pages.capacity(), "attention job: pages beyond the reserved limit");
  AK_ASSERT(batch.query_positions.size() <= positions.capacity(), "attention job: queries beyond the reserved limit");
  shape = batch.shape;
  tasks.assign(batch.tasks.begin(), batch.tasks.end());
  pages.assign(batch.pages.begin(), batch.pages.end());
  positions.assign(batch.query_positions.begin(), batch.query_positions.end());
  page_heads.assign(batch.page_heads.begin(), batch.page_heads.end());
  query_task.assign(positions.size(), UINT32_MAX);
  // Tiles of 8 queries; of 1 when page mass is wanted (its per-page log mass
  // is then kept per query and head only, as the scratch is sized).
  const std::uint32_t tile = batch.page_mass.empty() ? 8 : 1;
  tiles.clear();
  for (std::uint32_t t = 0; t < tasks.size(); ++t) {
    for (std::uint32_t i = 0; i < tasks[t].query_count; ++i) query_task[tasks[t].query_begin + i] = t;
    for (std::uint32_t i = 0; i < tasks[t].query_count; i += tile) {
      tiles.push_back(AttentionTile{t, tasks[t].query_begin + i, std::min(tile, tasks[t].query_count - i)});
    }
  }
  queries = batch.queries.data();
  output = batch.write_output ? batch.output.data() : nullptr;
  page_mass = batch.page_mass.empty() ? nullptr : batch.page_mass.data();
  state = batch.state.empty() ? nullptr : batch.state.data();
  load_state = batch.load_state;
  store_state = batch.store_state;
  write_output = batch.write_output;
  window_tokens = batch.window_tokens;
  page_parts = 1;
}

void AttentionJob::balance_tiles(std::uint32_t threads) noexcept {
  if (threads == 0 || page_mass != nullptr || page_parts > 1) return;
  tiles.clear();
  for (std::uint32_t t = 0; t < tasks.size(); ++t) {
    const std::uint32_t q = tasks[t].query_count;
    std::uint32_t k = 1;
    if (q > 1) {
      k = (q + attention_tile_max - 1) / attention_tile_max;
      k = (k + threads - 1) / threads * threads;
      k = std::min(k, q);
    }
    for (std::uint32_t i = 0; i < k; ++i) {
      const std::uint32_t begin = static_cast<std::uint32_t>(std::uint64_t{q} * i / k);
      const std::uint32_t end = static_cast<std::uint32_t>(std::uint64_t{q} * (i + 1) / k);
      if (end > begin) tiles.push_back(AttentionTile{t, tasks[t].query_begin + begin, end - begin});
    }
  }
}

void AttentionScratch::reserve(const MemoryRequest& limits) {
  const std::size_t heads = limits.q_heads_max;
  const std::size_t head_elements = heads * limits.head_dim_max;
  const std::size_t tile = attention_tile_max;  // queries per prefill tile at most (query_block in the kernel)
  run_m.assign(tile * heads, 0.0f);
  run_s.assign(tile * heads, 0.0f);
  run_acc.assign(tile * head_elements, 0.0f);
  page_m.assign(tile * heads, 0.0f);
  page_s.assign(tile * heads, 0.0f);
  page_acc.assign(tile * head_elements, 0.0f);
  scores.assign(heads * 16, 0.0f);
  kt.assign(head_elements * 16, 0.0f);  // K widened, [16 rows][kv heads × head_dim]
  row.assign(head_elements * 16, 0.0f);
  log_mass.assign(std::size_t{limits.batch_pages_max} * heads, 0.0f);  // mass jobs run tiles of 1 query
  mass.assign(limits.batch_pages_max, 0.0f);
}

void AttentionSplit::reserve(const MemoryRequest& limits, std::uint32_t queries, std::uint64_t bytes) {
  const std::size_t record = std::size_t{limits.q_heads_max} * (2u + limits.head_dim_max);
  const std::uint64_t fit = bytes / (4 * (record + limits.q_heads_max));
  pages_max = static_cast<std::uint32_t>(std::min<std::uint64_t>(limits.batch_pages_max, fit));
  queries_max = queries;
  state.assign(record * queries, 0.0f);
  partials.assign(record * pages_max, 0.0f);
  log_mass.assign(std::size_t{limits.q_heads_max} * pages_max, 0.0f);
}

void run_attention_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin,
                         std::uint32_t unit_end, AttentionScratch& scratch, AttentionSplit* split) {
  chosen_kernel()(arena, job, unit_begin, unit_end, scratch, split);
}

void finish_attention_split(const AttentionJob& job, AttentionSplit& split, float* mass) {
  chosen_finish()(job, split, mass);
}

void finish_page_mass(const AttentionJob& job, float* page_mass) {
  for (const AttentionTask& task : job.tasks) {
    const float share = 1.0f / (static_cast<float>(task.query_count) * static_cast<float>(job.shape.q_heads));
    for (std::uint32_t i = 0; i < task.page_count; ++i) page_mass[task.page_begin + i] *= share;
  }
}

void attention_reference(const std::byte* arena, const AttentionBatch& batch, std::span<float> output,
                         const std::byte* host_pool) {
  const AttentionShape& shape = batch.shape;
  const std::uint32_t dim = shape.head_dim;
  const std::uint32_t group = shape.q_heads / shape.kv_heads;
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint64_t head_bytes = std::uint64_t{dim} * dtype_bytes(shape.dtype);
  std::vector<float> k(dim), v(dim);
  std::vector<double> scores, acc(dim);
  for (const AttentionTask& task : batch.tasks) {
    for (std::uint32_t qi = task.query_begin; qi < task.query_begin + task.query_count; ++qi) {
      const std::uint32_t position = batch.query_positions[qi];
      for (std::uint32_t h = 0; h < shape.q_heads; ++h) {
        const std::uint32_t kv_head = h / group;
        const float* q = batch.queries.data() + (std::size_t{qi} * shape.q_heads + h) * dim;
        scores.clear();
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::uint32_t i = 0; i < task.page_count; ++i) {
          const AttentionPage& page = batch.pages[task.page_begin + i];
          if (!reads(batch, task.page_begin + i, kv_head)) continue;
          const VisibleRows seen = visible_rows(page, position, batch.window_tokens);
          for (std::uint32_t r = seen.begin; r < seen.end; ++r) {
            portable::widen(page_bytes_of(arena, host_pool, page) + r * row_bytes + kv_head * head_bytes, shape.dtype, dim, k.data());
            double dot = 0.0;
            for (std::uint32_t d = 0; d < dim; ++d) dot += double{q[d]} * double{k[d]};
            scores.push_back(dot * shape.scale);
            max_score = std::max(max_score, scores.back());
          }
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        std::size_t index = 0;
        for (std::uint32_t i = 0; i < task.page_count; ++i) {
          const AttentionPage& page = batch.pages[task.page_begin + i];
          if (!reads(batch, task.page_begin + i, kv_head)) continue;
          const VisibleRows seen = visible_rows(page, position, batch.window_tokens);
          for (std::uint32_t r = seen.begin; r < seen.end; ++r) {
            const double p = std::exp(scores[index++] - max_score);
            sum += p;
            portable::widen(page_bytes_of(arena, host_pool, page) + r * row_bytes + (shape.kv_heads + kv_head) * head_bytes,
                           shape.dtype, dim, v.data());
            for (std::uint32_t d = 0; d < dim; ++d) acc[d] += p * v[d];
          }
        }
        float* out = output.data() + (std::size_t{qi} * shape.q_heads + h) * dim;
        for (std::uint32_t d = 0; d < dim; ++d) out[d] = sum > 0.0 ? static_cast<float>(acc[d] / sum) : 0.0f;
      }
    }
  }
}

}  // namespace activekv::host
