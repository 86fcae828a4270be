// host_pool.hpp — the pinned host pool: every context's whole KV history.
//
// One pinned region of HostPoolPlan::used_bytes (histories × history_bytes);
// history h, dense layer l is the segment at (h × dense_layers + l) ×
// segment_bytes, and token t's row sits at that offset + t × row_bytes
// (DESIGN "Shared data layout"). The host copy is authoritative: the device
// only ever holds copies of rows that are (or, within the current step, will
// be) here.
//
// Which history a context uses is decided by admission (budget.hpp); the pool
// owns only the memory and the arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "activekv/memory_plan.hpp"
#include "activekv/pinned_memory.hpp"
#include "activekv/result.hpp"

namespace activekv {

class HostPool {
 public:
  HostPool() = default;
  // Maps and pins plan.used_bytes; refuses (naming --host-pool and the memlock limit) if it cannot.
  static Result<HostPool> create(const HostPoolPlan& plan, const PinOptions& options = {});

  const HostPoolPlan& plan() const noexcept { return plan_; }
  std::byte* data() const noexcept { return region_.data(); }
  std::uint64_t size_bytes() const noexcept { return region_.size_bytes(); }

  std::span<std::byte> segment(std::uint32_t history, std::uint32_t layer) const noexcept;
  std::span<std::byte> row(std::uint32_t history, std::uint32_t layer, std::uint32_t token) const noexcept;

 private:
  HostPoolPlan plan_{};
  PinnedRegion region_;
};

}  // namespace activekv
