// cost_model.cpp — the two cards' figures and the charges derived from them.
//
// Each number below is sourced in docs/SIMULATION.md ("Cost model defaults");
// the comment beside it says whether it is a vendor figure, a standard's
// arithmetic, or an assumption. Assumptions are deliberately round so nobody
// mistakes them for measurements.
#include "sim/cost_model.hpp"

#include <array>
#include <string>

#include "activekv/size.hpp"

namespace activekv::sim {

namespace {

// PCIe per direction: GT/s × lanes × 128/130 (encoding) / 8 bits.
constexpr double pcie4_x8_bytes_per_second = 16e9 * 8 * 128.0 / 130.0 / 8.0;   // 15.75 GB/s
constexpr double pcie5_x16_bytes_per_second = 32e9 * 16 * 128.0 / 130.0 / 8.0;  // 63.0 GB/s

constexpr std::array<CardSpec, 2> card_table{{
    {
        "arc-pro-32gb",
        "32 GB Intel Arc Pro class (B70: 608 GB/s GDDR6), PCIe 4.0 x8 link",
        32 * GiB,                       // vendor: 32 GB GDDR6
        608e9,                          // vendor: Arc Pro B70, 256-bit GDDR6, 608 GB/s
        0.80,                           // assumption: streaming reads reach 80% of peak
        pcie4_x8_bytes_per_second,      // standard: 16 GT/s × 8 lanes, 128b/130b
        12.5e9,                         // measured class: Gen4 x8 DMA achieves ~12-13 GB/s
        10e-6,                          // assumption: 10 µs per copy command
        183e12,                         // assumption: half the vendor's 367 INT8 TOPS for 16-bit XMX
        0.30,                           // assumption: decode-sized matmuls reach 30% of peak
        10e-6,                          // assumption: 10 µs per attention launch (eager mode)
        1, 1, 0,                        // one DMA engine per direction; d2d shares the compute queue
    },
    {
        "h200",
        "NVIDIA H200 (141 GB HBM3e, 4.8 TB/s), PCIe Gen5 x16 link",
        140 * GiB,                      // vendor: 141 GB HBM3e (about 140 GiB addressable)
        4.8e12,                         // vendor: H200 datasheet, 4.8 TB/s
        0.80,                           // assumption: streaming reads reach 80% of peak
        pcie5_x16_bytes_per_second,     // standard: 32 GT/s × 16 lanes, 128b/130b
        52e9,                           // measured class: Gen5 x16 DMA achieves ~50-55 GB/s
        5e-6,                           // assumption: 5 µs per copy command
        989e12,                         // vendor: H200 SXM BF16 dense (1,979 TFLOPS with sparsity)
        0.30,                           // assumption: decode-sized matmuls reach 30% of peak
        5e-6,                           // assumption: 5 µs per attention launch
        1, 1, 0,
    },
}};

double copy_seconds(double latency, double bytes_per_second, std::uint64_t bytes, std::uint32_t copies) {
  if (copies == 0) {
    AK_ASSERT(bytes == 0, "a copy of nonzero bytes needs at least one copy command");
    return 0.0;
  }
  return latency * copies + static_cast<double>(bytes) / bytes_per_second;
}

Error field_error(const char* field, const char* what) {
  return make_error(ErrorCode::invalid_argument, field, what);
}

}  // namespace

std::span<const CardSpec> cards() noexcept { return card_table; }

Result<CardSpec> find_card(std::string_view name) {
  for (const CardSpec& card : card_table) {
    if (card.name == name) return card;
  }
  std::string names;
  for (const CardSpec& card : card_table) {
    if (!names.empty()) names += ", ";
    names += card.name;
  }
  return make_error(ErrorCode::invalid_argument, "--card", "unknown card '" + std::string(name) + "': choose one of " + names);
}

double CostModel::h2d_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept {
  return copy_seconds(copy_latency_seconds, h2d_bytes_per_second, bytes, copies);
}

double CostModel::d2h_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept {
  return copy_seconds(copy_latency_seconds, d2h_bytes_per_second, bytes, copies);
}

double CostModel::d2d_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept {
  return copy_seconds(copy_latency_seconds, d2d_bytes_per_second, bytes, copies);
}

double CostModel::attention_seconds(std::uint64_t kv_bytes_read) const noexcept {
  return attention_launch_seconds + static_cast<double>(kv_bytes_read) * attention_seconds_per_byte;
}

double CostModel::non_attention_seconds(std::uint32_t tokens) const noexcept {
  return non_attention_seconds_per_step + tokens * non_attention_seconds_per_token;
}

Status CostModel::validate() const {
  if (!(h2d_bytes_per_second > 0)) return field_error("h2d_bytes_per_second", "must be positive");
  if (!(d2h_bytes_per_second > 0)) return field_error("d2h_bytes_per_second", "must be positive");
  if (!(d2d_bytes_per_second > 0)) return field_error("d2d_bytes_per_second", "must be positive");
  if (!(attention_seconds_per_byte > 0)) return field_error("attention_seconds_per_byte", "must be positive");
  if (copy_latency_seconds < 0) return field_error("copy_latency_seconds", "must not be negative");
  if (attention_launch_seconds < 0) return field_error("attention_launch_seconds", "must not be negative");
  if (non_attention_seconds_per_step < 0) return field_error("non_attention_seconds_per_step", "must not be negative");
  if (non_attention_seconds_per_token < 0) return field_error("non_attention_seconds_per_token", "must not be negative");
  if (h2d_queues == 0) return field_error("h2d_queues", "must be at least 1");
  if (d2h_queues == 0) return field_error("d2h_queues", "must be at least 1");
  if (compute_queues != 1) return field_error("compute_queues", "must be 1: attention is issued on one compute queue");
  return Status::success();
}

CostModel make_cost_model(const CardSpec& card, const ModelCost& model) {
  AK_ASSERT(card.memory_bytes_per_second > 0, "card memory bandwidth must be positive");
  AK_ASSERT(card.memory_efficiency > 0, "card memory efficiency must be positive");
  AK_ASSERT(card.matmul_flops_per_second > 0, "card matmul rate must be positive");
  AK_ASSERT(card.matmul_efficiency > 0, "card matmul efficiency must be positive");
  const double memory_effective = card.memory_bytes_per_second * card.memory_efficiency;
  CostModel cost;
  cost.h2d_bytes_per_second = card.link_bytes_per_second_achieved;
  cost.d2h_bytes_per_second = card.link_bytes_per_second_achieved;
  cost.d2d_bytes_per_second = memory_effective / 2.0;
  cost.copy_latency_seconds = card.copy_latency_seconds;
  cost.attention_seconds_per_byte = 1.0 / memory_effective;
  cost.attention_launch_seconds = card.attention_launch_seconds;
  cost.non_attention_seconds_per_step = static_cast<double>(model.weight_bytes) / memory_effective;
  cost.non_attention_seconds_per_token =
      2.0 * model.active_parameters / (card.matmul_flops_per_second * card.matmul_efficiency);
  cost.h2d_queues = card.h2d_queues;
  cost.d2h_queues = card.d2h_queues;
  cost.d2d_queues = card.d2d_queues;
  cost.compute_queues = 1;
  return cost;
}

}  // namespace activekv::sim
