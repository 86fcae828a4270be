// attention_pack.hpp — an AttentionBatch's tables packed into one parameter slot.
//
// The device kernels (attention.cl, ../cuda/attention.cuh) read the page table,
// query positions and task ranges from one contiguous block uploaded per call:
//
//   ulong page_offsets[pages]                       (first: 8-byte aligned)
//   uint  page_first[pages], page_tokens[pages], page_task[pages], page_heads[pages]
//   uint  positions[queries], query_task[queries]
//   uint  task_page_begin[tasks], task_page_count[tasks],
//         task_query_begin[tasks], task_query_count[tasks], task_mass_first[tasks]
//
// PackedParams carries the shape, the flags and each uint array's offset in
// 4-byte words from the start of the block; it is passed by value as a kernel
// argument, so its layout is fixed (all 4-byte fields) and mirrored by
// `ak_params` in attention.cl and kernels::Params in attention.cuh.
// This header is plain C++ (no OpenCL, no CUDA): both GPU backends use it.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "activekv/assert.hpp"
#include "activekv/backend.hpp"

namespace activekv::gpu {

inline constexpr std::uint32_t kLoadState = 1u;
inline constexpr std::uint32_t kStoreState = 2u;
inline constexpr std::uint32_t kWriteOutput = 4u;
inline constexpr std::uint32_t kPageMass = 8u;
inline constexpr std::uint32_t kNoTask = 0xffffffffu;

struct PackedParams {
  std::uint32_t pages;
  std::uint32_t queries;
  std::uint32_t tasks;
  std::uint32_t q_heads;
  std::uint32_t kv_heads;
  std::uint32_t head_dim;
  std::uint32_t dtype;
  std::uint32_t flags;
  float scale;
  std::uint32_t off_page_first;
  std::uint32_t off_page_tokens;
  std::uint32_t off_page_task;
  std::uint32_t off_positions;
  std::uint32_t off_query_task;
  std::uint32_t off_task_page_begin;
  std::uint32_t off_task_page_count;
  std::uint32_t off_task_query_begin;
  std::uint32_t off_task_query_count;
  std::uint32_t off_task_mass_first;
  std::uint32_t off_page_heads;  // per page, bit k: KV head k reads it (all ones without page_heads)
};
static_assert(sizeof(PackedParams) == 20 * 4, "PackedParams must match ak_params field for field");

// Bytes of one parameter slot able to hold the given limits.
constexpr std::uint64_t packed_slot_bytes(std::uint32_t pages_max, std::uint32_t queries_max,
                                          std::uint32_t tasks_max) noexcept {
  return 8ull * pages_max + 4ull * (4ull * pages_max + 2ull * queries_max + 5ull * tasks_max);
}

// (m_p, s_p) pairs the page-mass pass needs: Σ over tasks of query_count × q_heads × page_count.
inline std::uint64_t pair_page_count(const AttentionBatch& batch) noexcept {
  std::uint64_t total = 0;
  for (const AttentionTask& task : batch.tasks) {
    total += static_cast<std::uint64_t>(task.query_count) * batch.shape.q_heads * task.page_count;
  }
  return total;
}

// Packs `batch` into `slot` (at least packed_slot_bytes for its sizes) and
// returns the kernel parameters. Never allocates.
inline PackedParams pack_attention(const AttentionBatch& batch, std::span<std::byte> slot) {
  const auto pages = static_cast<std::uint32_t>(batch.pages.size());
  const auto queries = static_cast<std::uint32_t>(batch.query_positions.size());
  const auto tasks = static_cast<std::uint32_t>(batch.tasks.size());
  AK_ASSERT(slot.size() >= packed_slot_bytes(pages, queries, tasks), "parameter slot too small for the batch");

  PackedParams p{};
  p.pages = pages;
  p.queries = queries;
  p.tasks = tasks;
  p.q_heads = batch.shape.q_heads;
  p.kv_heads = batch.shape.kv_heads;
  p.head_dim = batch.shape.head_dim;
  p.dtype = static_cast<std::uint32_t>(batch.shape.dtype);
  p.scale = batch.shape.scale;
  p.flags = (batch.load_state ? kLoadState : 0u) | (batch.store_state ? kStoreState : 0u) |
            (batch.write_output ? kWriteOutput : 0u) | (!batch.page_mass.empty() ? kPageMass : 0u);
  std::uint32_t word = 2u * pages;  // after the ulong offsets
  p.off_page_first = word;        word += pages;
  p.off_page_tokens = word;       word += pages;
  p.off_page_task = word;         word += pages;
  p.off_positions = word;         word += queries;
  p.off_query_task = word;        word += queries;
  p.off_task_page_begin = word;   word += tasks;
  p.off_task_page_count = word;   word += tasks;
  p.off_task_query_begin = word;  word += tasks;
  p.off_task_query_count = word;  word += tasks;
  p.off_task_mass_first = word;   word += tasks;
  p.off_page_heads = word;        word += pages;

  auto* offsets = reinterpret_cast<std::uint64_t*>(slot.data());
  auto* words = reinterpret_cast<std::uint32_t*>(slot.data());
  for (std::uint32_t i = 0; i < pages; ++i) {
    offsets[i] = batch.pages[i].arena_offset;
    words[p.off_page_first + i] = batch.pages[i].first_token;
    words[p.off_page_tokens + i] = batch.pages[i].tokens;
    words[p.off_page_task + i] = kNoTask;  // pages no task names are skipped (mass 0)
    words[p.off_page_heads + i] = batch.page_heads.empty() ? 0xffffffffu : batch.page_heads[i];
  }
  for (std::uint32_t i = 0; i < queries; ++i) {
    words[p.off_positions + i] = batch.query_positions[i];
    words[p.off_query_task + i] = kNoTask;  // rows no task owns are skipped by the kernels
  }
  std::uint32_t mass_first = 0;
  for (std::uint32_t t = 0; t < tasks; ++t) {
    const AttentionTask& task = batch.tasks[t];
    words[p.off_task_page_begin + t] = task.page_begin;
    words[p.off_task_page_count + t] = task.page_count;
    words[p.off_task_query_begin + t] = task.query_begin;
    words[p.off_task_query_count + t] = task.query_count;
    words[p.off_task_mass_first + t] = mass_first;
    mass_first += task.query_count * batch.shape.q_heads * task.page_count;
    for (std::uint32_t i = 0; i < task.page_count; ++i) words[p.off_page_task + task.page_begin + i] = t;
    for (std::uint32_t i = 0; i < task.query_count; ++i) words[p.off_query_task + task.query_begin + i] = t;
  }
  return p;
}

}  // namespace activekv::gpu
