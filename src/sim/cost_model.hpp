// cost_model.hpp — what a card charges, in seconds, for the operations a step issues.
//
// The simulator replaces the device with this table. Every figure is a rate or
// a fixed charge that can be traced to a vendor specification or to a stated
// assumption (docs/SIMULATION.md lists each default with its source):
//
//   h2d copy        = copy_latency + bytes / h2d_bytes_per_second     (PCIe, host → device)
//   d2h copy        = copy_latency + bytes / d2h_bytes_per_second     (PCIe, device → host)
//   d2d copy        = copy_latency + bytes / d2d_bytes_per_second     (device memory read + write)
//   attention       = attention_launch + kv_bytes_read × attention_seconds_per_byte
//   non-attention   = non_attention_seconds_per_step                 (weights streamed once per step)
//                   + tokens × non_attention_seconds_per_token        (matrix work per token)
//
// Derived rates are computed once from the card's raw figures (card()), so a
// rate never appears in two places. A CostModel is plain data: tests build one
// by hand with round numbers and check the arithmetic worked out in comments.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv::sim {

// The raw figures of one card and its link, as a vendor or a measurement states them.
struct CardSpec {
  std::string_view name;                  // "arc-pro-32gb", "h200"
  std::string_view description;           // one line for tables
  std::uint64_t device_memory_bytes;      // total device memory
  double memory_bytes_per_second;         // peak device memory bandwidth (vendor)
  double memory_efficiency;               // fraction of peak a streaming read achieves (assumption)
  double link_bytes_per_second_theoretical;  // PCIe peak per direction (standard)
  double link_bytes_per_second_achieved;     // PCIe achieved per direction (measured class)
  double copy_latency_seconds;            // fixed charge per copy command (submission + DMA setup)
  double matmul_flops_per_second;         // dense 16-bit matrix peak (vendor)
  double matmul_efficiency;               // fraction of matrix peak at decode batch sizes (assumption)
  double attention_launch_seconds;        // fixed charge per attention kernel launch (assumption)
  std::uint32_t h2d_queues;               // copy engines serving host → device
  std::uint32_t d2h_queues;               // copy engines serving device → host
  std::uint32_t d2d_queues;               // queues for device → device copies; 0: on the compute queue
};

// The two cards the scenarios use (DESIGN.md, issue 6), and lookup by name.
std::span<const CardSpec> cards() noexcept;
Result<CardSpec> find_card(std::string_view name);

// Per-operation charges in seconds. Built from a CardSpec and a model's weights by
// make_cost_model(), or field by field in tests.
struct CostModel {
  double h2d_bytes_per_second = 0;
  double d2h_bytes_per_second = 0;
  double d2d_bytes_per_second = 0;
  double copy_latency_seconds = 0;
  double attention_seconds_per_byte = 0;
  double attention_launch_seconds = 0;
  double non_attention_seconds_per_step = 0;
  double non_attention_seconds_per_token = 0;
  std::uint32_t h2d_queues = 1;
  std::uint32_t d2h_queues = 1;
  std::uint32_t d2d_queues = 0;      // 0: d2d copies share the compute queue (one device-memory resource)
  std::uint32_t compute_queues = 1;  // ActiveKV issues all attention on one compute queue

  double h2d_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept;
  double d2h_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept;
  double d2d_seconds(std::uint64_t bytes, std::uint32_t copies) const noexcept;
  double attention_seconds(std::uint64_t kv_bytes_read) const noexcept;
  double non_attention_seconds(std::uint32_t tokens) const noexcept;

  // Refuses a rate that is not positive or a queue count of zero, naming the field.
  Status validate() const;
};

// The model's share of the charges: its weights are streamed from device memory
// once per decode step, and each token costs 2 × active parameters FLOPs.
struct ModelCost {
  std::uint64_t weight_bytes;       // resident weights (4-bit 27B ≈ 14 GiB)
  double active_parameters;         // parameters touched per token
};

// attention_seconds_per_byte = 1 / (memory_bytes_per_second × memory_efficiency)
// d2d_bytes_per_second       = memory_bytes_per_second × memory_efficiency / 2   (each byte read and written)
// non_attention per step     = weight_bytes × attention_seconds_per_byte
// non_attention per token    = 2 × active_parameters / (matmul_flops_per_second × matmul_efficiency)
CostModel make_cost_model(const CardSpec& card, const ModelCost& model);

}  // namespace activekv::sim
