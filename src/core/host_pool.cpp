// host_pool.cpp — the pinned host pool and its segment arithmetic (see host_pool.hpp).
#include "activekv/host_pool.hpp"

namespace activekv {

Result<HostPool> HostPool::create(const HostPoolPlan& plan, const PinOptions& options) {
  AK_ASSERT(plan.used_bytes > 0, "a host pool plan holds at least one history");
  Result<PinnedRegion> region = PinnedRegion::map(plan.used_bytes, "--host-pool", options);
  if (!region) return region.error();
  HostPool pool;
  pool.plan_ = plan;
  pool.region_ = std::move(*region);
  return pool;
}

std::span<std::byte> HostPool::segment(std::uint32_t history, std::uint32_t layer) const noexcept {
  AK_ASSERT(history < plan_.history_slots, "history index outside the host pool");
  AK_ASSERT(layer < plan_.dense_layers, "dense layer index outside the geometry");
  return {region_.data() + plan_.segment_offset(history, layer), plan_.segment_bytes};
}

std::span<std::byte> HostPool::row(std::uint32_t history, std::uint32_t layer, std::uint32_t token) const noexcept {
  AK_ASSERT(token < plan_.max_context_tokens, "token beyond max context");
  return {region_.data() + plan_.row_offset(history, layer, token), plan_.row_bytes};
}

}  // namespace activekv
