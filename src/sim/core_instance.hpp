// core_instance.hpp — the real ActiveKV core, wired up for one simulated variant.
//
// The simulator owns no residency logic of its own: admission, budgets,
// reclamation, the per-step residency plan and retained history all come from
// activekv_core, configured exactly as `activekv plan` would configure it from
// the scenario's settings. A CoreInstance builds, in dependency order:
//
//   MemoryPlan  (make_memory_plan: the host-pool formula, the arena layout, budgets)
//   Arena → DecisionLog → BudgetManager → ExactPolicy → ResidencyPlanner
//   Headroom (the arena's headroom part) → RetainedHistory   (headroom variant only)
//
// and then translates each StepPlan into the cost model's LayerWork:
//   resident bytes  = (length − staged pages × P) × row_bytes   (pool pages read in place)
//   each StageCopy  → retained.split(): host runs are h2d copies, retained runs d2d copies;
//                     host pages just staged are captured into headroom (d2d tile → headroom)
//   promotions      → d2d tile → pool page, after the copy landed
//   write-backs     → d2h
// Nothing in translate() allocates: run scratch is sized at create().
//
// The members reference each other (the planner holds the budget manager, which
// holds the arena), so an instance never moves: create() returns it boxed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "activekv/arena.hpp"
#include "activekv/budget.hpp"
#include "activekv/decision_log.hpp"
#include "activekv/headroom.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/planner.hpp"
#include "activekv/policy.hpp"
#include "activekv/retained.hpp"
#include "sim/scenario.hpp"
#include "sim/step_schedule.hpp"

namespace activekv::sim {

// The settings the operator would pass to `activekv plan` for this scenario and variant.
MemorySettings memory_settings(const Scenario& scenario, Variant variant);

struct TranslateCounters {
  std::uint64_t pages_captured = 0;   // pages retained into headroom this step
  std::uint64_t retained_bytes = 0;   // bytes materialised from headroom (d2d) this step
  std::uint64_t host_bytes = 0;       // bytes staged over the link (h2d) this step
};

class CoreInstance {
 public:
  static Result<std::unique_ptr<CoreInstance>> create(const Scenario& scenario, Variant variant);
  CoreInstance(const CoreInstance&) = delete;
  CoreInstance& operator=(const CoreInstance&) = delete;

  const MemoryPlan& plan() const noexcept { return plan_; }
  BudgetManager& budgets() noexcept { return budgets_; }
  ResidencyPlanner& planner() noexcept { return planner_; }
  const Arena& arena() const noexcept { return arena_; }
  // Null in variants without headroom.
  RetainedHistory* retained() noexcept { return retained_ ? &*retained_ : nullptr; }
  const Headroom* headroom() const noexcept { return headroom_ ? &*headroom_ : nullptr; }
  StepShape shape(std::uint32_t contexts) const noexcept;

  // The planner's current plan as cost-model work, layer-major: work[layer × entries + entry].
  // Captures freshly staged immutable pages into retained history (headroom variant).
  TranslateCounters translate(std::span<LayerWork> work) noexcept;

 private:
  CoreInstance(const MemoryPlan& plan, std::uint32_t log_capacity);

  MemoryPlan plan_;
  Arena arena_;
  DecisionLog log_;
  BudgetManager budgets_;
  ExactPolicy policy_;
  ResidencyPlanner planner_;
  std::optional<Headroom> headroom_;
  std::optional<RetainedHistory> retained_;
  std::vector<StagedRun> runs_;  // split() scratch
};

}  // namespace activekv::sim
