// policy.hpp — which staged pages a step promotes into the pool: the pluggable part of residency.
//
// The planner lays out a step (tail pages, staging of everything not resident) and then,
// for each scheduled context and dense layer that may still take pages, asks the policy
// which of the pages staged this step should be promoted: copied once from the tile into
// a pool page (device-to-device) and kept until reclaimed.
//   ExactPolicy    grows the newest run downward: the staged pages just below it,
//                  highest first. Resident history stays one contiguous run plus the
//                  sink, so what is staged stays a few large copies.
//   HotnessPolicy  promotes pages below the frontier whose score (fed back from the
//                  kernel, e.g. attention mass per page) crossed a threshold; they join
//                  the layer's promoted set and stay until reclaimed.
// Either way attention stays exact: a page's partial is computed the same way from a
// pool page or a tile (invariant 8). A policy must not allocate in choose_promotions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/decision_log.hpp"

namespace activekv {

// Logical pages [first, first + count) of one layer, staged this step.
struct PageRange {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

struct PromotionQuery {
  std::uint64_t request_id = 0;
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t run_first = 0;        // first logical page of the newest run
  std::uint32_t pages_grantable = 0;  // pages the context can take this step without evicting its own
  std::uint32_t promoted_room = 0;    // room left in the layer's promoted set
};

// Attention mass (or any score) of one page, fed back from the kernel.
struct PageScore {
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
  float score = 0.0f;
};

class ResidencyPolicy {
 public:
  virtual ~ResidencyPolicy() = default;
  virtual const char* name() const noexcept = 0;
  // Writes up to out.size() logical pages, all inside `staged`, and returns how many.
  // Pages equal to run_first − 1, run_first − 2, ... (in that order) extend the run;
  // others join the promoted set.
  virtual std::uint32_t choose_promotions(const PromotionQuery& query, std::span<const PageRange> staged,
                                          std::span<std::uint32_t> out) noexcept = 0;
  virtual Reason promotion_reason() const noexcept = 0;
  // Scores from the last step's kernel; the default ignores them.
  virtual void observe(std::span<const PageScore> scores) noexcept { (void)scores; }
  // A context finished: forget its state.
  virtual void forget(std::uint32_t slot) noexcept { (void)slot; }
};

class ExactPolicy final : public ResidencyPolicy {
 public:
  const char* name() const noexcept override { return "exact"; }
  std::uint32_t choose_promotions(const PromotionQuery& query, std::span<const PageRange> staged,
                                  std::span<std::uint32_t> out) noexcept override;
  Reason promotion_reason() const noexcept override { return Reason::extend_run; }
};

class HotnessPolicy final : public ResidencyPolicy {
 public:
  // threshold: a page whose score is at least this is hot. candidates_max: hot pages
  // remembered between observe() and the next plan (oldest dropped first).
  HotnessPolicy(float threshold, std::uint32_t candidates_max);
  const char* name() const noexcept override { return "hotness"; }
  std::uint32_t choose_promotions(const PromotionQuery& query, std::span<const PageRange> staged,
                                  std::span<std::uint32_t> out) noexcept override;
  Reason promotion_reason() const noexcept override { return Reason::hot_page; }
  void observe(std::span<const PageScore> scores) noexcept override;
  void forget(std::uint32_t slot) noexcept override;
  std::uint32_t candidates() const noexcept { return count_; }

 private:
  float threshold_;
  std::vector<PageScore> candidates_;  // ring of hot pages not yet promoted
  std::uint32_t head_ = 0;
  std::uint32_t count_ = 0;
};

}  // namespace activekv
