// explain.cpp — a context's pages with the reason each is resident, and its last decisions.
//
// Off the step path: this builds vectors and strings. It reads only the budget manager's
// page tables and the decision log, so what it prints is what the planner will use.
#include "activekv/explain.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace activekv {

namespace {

constexpr const char* sink_reason = "sink page: attention sink, part of the floor";
constexpr const char* run_reason = "newest run: contiguous recent history within the budget (staged otherwise)";
constexpr const char* tail_reason = "tail page: holds the newest tokens, part of the floor";
constexpr const char* promoted_reason = "promoted: staged, chosen by the policy, kept until reclaimed";

}  // namespace

Explanation explain(const BudgetManager& budgets, ContextHandle context, std::uint64_t step) {
  AK_ASSERT(budgets.current(context), "explain of a stale or unknown context handle");
  const ContextState& c = budgets.context(context.slot);
  const std::uint32_t P = budgets.plan().arena.page_tokens;
  Explanation e;
  e.request_id = c.request_id;
  e.slot = context.slot;
  e.length_tokens = c.length_tokens;
  e.budget = c.budget;
  e.pages_assigned = c.pages_assigned;
  e.pages_reserved = c.pages_reserved;
  e.last_active_step = c.last_active_step;
  const std::uint32_t pages_total = (c.length_tokens + P - 1) / P;
  for (std::uint32_t l = 0; l < budgets.plan().geometry.dense_layers; ++l) {
    const LayerResidency& r = budgets.layer(context.slot, l);
    if (r.sink_page != page_none) e.runs.push_back(ResidentRun{l, 0, 1, sink_reason, r.sink_page, {r.sink_page}});
    const auto logicals = budgets.promoted_logical(context.slot, l);
    const auto pages = budgets.promoted_pages(context.slot, l);
    for (std::uint32_t i = 0; i < r.promoted_count; ++i) {
      e.runs.push_back(ResidentRun{l, logicals[i], 1, promoted_reason, pages[i], {pages[i]}});
    }
    // The run splits into history below the tail and the tail pages themselves.
    ResidentRun below{l, r.run_first, 0, run_reason, page_none, {}};
    ResidentRun tail{l, 0, 0, tail_reason, page_none, {}};
    for (std::uint32_t i = 0; i < r.run_count; ++i) {
      const std::uint32_t logical = r.run_first + i;
      const std::uint32_t page = budgets.run_page(context.slot, l, i);
      const bool is_tail = logical >= c.tail_first_logical || i + 1 == r.run_count;
      ResidentRun& into = is_tail ? tail : below;
      if (into.pages == 0) {
        into.logical_first = logical;
        into.pool_page_first = page;
      }
      ++into.pages;
      into.pool_pages.push_back(page);
    }
    if (below.pages > 0) e.runs.push_back(below);
    if (tail.pages > 0) e.runs.push_back(tail);
    // A window layer reads only from the first page its next query sees: older pages are neither
    // staged nor read (its host ring no longer holds them).
    const std::uint32_t seen = std::min(pages_total, budgets.plan().host.first_page_seen(l, c.length_tokens, P));
    std::uint32_t resident = r.pages_held();
    if (seen > 0) {
      resident = 0;
      for (std::uint32_t i = 0; i < r.promoted_count; ++i) resident += logicals[i] >= seen ? 1u : 0u;
      for (std::uint32_t i = 0; i < r.run_count; ++i) resident += r.run_first + i >= seen ? 1u : 0u;
    }
    const std::uint32_t read = pages_total - seen;
    e.pages_staged_per_step += read > resident ? read - resident : 0;
  }
  e.window_layers = budgets.plan().host.window_layers;
  e.window_tokens = budgets.plan().host.kinds.window_tokens;
  e.ring_tokens = budgets.plan().host.ring_tokens;
  e.step = step;
  std::vector<Decision> decisions(budgets.plan().queue_max + 4096);
  const DecisionLog& log = budgets.log();
  const std::uint32_t matched = log.select(step, context.slot, decisions);
  decisions.resize(std::min<std::size_t>(matched, decisions.size()));
  e.decisions = std::move(decisions);
  return e;
}

std::string explanation_text(const Explanation& e) {
  std::string out = fmt::format(
      "context {} (slot {}): {} tokens; budget floor {} / target {} / burst {} pages; holds {} assigned + {} reserved; "
      "last active in step {}\n",
      e.request_id, e.slot, e.length_tokens, e.budget.floor_pages, e.budget.target_pages, e.budget.burst_pages,
      e.pages_assigned, e.pages_reserved, e.last_active_step);
  for (const ResidentRun& r : e.runs) {
    if (r.pages == 1) {
      out += fmt::format("  layer {:>3} page  {:>6}        → pool {:>8}   {}\n", r.layer, r.logical_first, r.pool_page_first, r.reason);
    } else {
      out += fmt::format("  layer {:>3} pages {:>6}..{:<6} → pool {:>8}…  {}\n", r.layer, r.logical_first,
                         r.logical_first + r.pages - 1, r.pool_page_first, r.reason);
    }
  }
  if (e.adopted_pages > 0) {
    out += fmt::format("  adopted: pages 0..{} of every layer came from a retained prefix (request {}'s history, {})\n",
                       e.adopted_pages - 1, e.adopted_from_request,
                       e.adopted_copied ? "copied from a running context" : "adopted in place");
    if (e.adopted_device_pages > 0) {
      out += fmt::format("  adopted on the device: {} pool page(s) came from the device-resident retained prefix "
                         "(handed over in place, not staged from the host)\n",
                         e.adopted_device_pages);
    }
    if (e.adopted_device_copied > 0) {
      out += fmt::format("  adopted on the device: {} pool page(s) copied device to device from the pages the source "
                         "held on the device (d2d, not staged from the host)\n",
                         e.adopted_device_copied);
    }
    if (e.adopted_device_promoted > 0) {
      out += fmt::format("  adopted on the device: {} of those page(s) promoted from a retained prefix, device to device "
                         "(the source's promoted pages below its run, promoted here too)\n",
                         e.adopted_device_promoted);
    }
    if (e.adopted_host_pages > 0) {
      out += fmt::format("  adopted from the host: {} page(s) (pages x layers) were not resident on the device: they "
                         "stream from the host pool like any history\n",
                         e.adopted_host_pages);
    }
  }
  if (e.cache_pages_end > e.cache_pages_first) {
    out += fmt::format("  adopted from the prefix cache: pages {}..{} of every layer (copied host to host, not prefilled), "
                       "page shared by {} prefix(es)\n",
                       e.cache_pages_first, e.cache_pages_end - 1, e.cache_shared_prefixes);
  }
  if (e.cache_pages_end > e.cache_pages_first && e.window_layers != 0) {
    out += fmt::format("  window layers took from the prefix cache only the pages the next query's window needs, into "
                       "their host rings (token t at slot t mod {})\n",
                       e.ring_tokens);
  }
  if (e.cache_ring_cut_pages > 0) {
    out += fmt::format("  prefix cache: {} more matched page(s) not adopted: the window layers' rows their window needs "
                       "had left the finished history's rings before it was cached (prefilled instead)\n",
                       e.cache_ring_cut_pages);
  }
  if (e.cache_state_cut_pages > 0) {
    out += fmt::format("  prefix cache: {} more matched page(s) not adopted: no cached recurrent-state checkpoint lies "
                       "past the adopted boundary (prefilled instead)\n",
                       e.cache_state_cut_pages);
  }
  if (e.cache_partial_rows > 0) {
    out += fmt::format("  adopted from the prefix cache: the first {} row(s) of the partial page {} of every layer "
                       "(a finished answer filled it; copied to the host and the device, not prefilled)\n",
                       e.cache_partial_rows, e.cache_pages_end);
  }
  if (e.tier_pages_end > e.tier_pages_first) {
    out += fmt::format("  restored: pages {}..{} of every layer came from the shared KV tier (not prefilled)\n",
                       e.tier_pages_first, e.tier_pages_end - 1);
  }
  if (e.tier_pages_end > e.tier_pages_first && e.window_layers != 0) {
    out += fmt::format("  window layers took from the shared KV tier only the rows the next query's window needs, into "
                       "their host rings (token t at slot t mod {})\n",
                       e.ring_tokens);
  }
  if (e.tier_ring_cut_pages > 0) {
    out += fmt::format("  shared KV tier: {} more accepted page(s) not restored: the window layers' rows their window "
                       "needs are not in the blocks (gone from the writer's rings) (prefilled instead)\n",
                       e.tier_ring_cut_pages);
  }
  if (e.tier_state_cut_pages > 0) {
    out += fmt::format("  shared KV tier: {} more accepted page(s) not restored: no block past the restored end carries "
                       "the recurrent state (prefilled instead)\n",
                       e.tier_state_cut_pages);
  }
  if (e.state_bytes != 0) {
    out += fmt::format("  recurrent state: {} B in device slot {} ({}); host checkpoints: {} held, newest at token {}\n",
                       e.state_bytes, e.recurrent_slot,
                       e.state_restored_tokens == 0 ? std::string("started empty")
                                                    : fmt::format("restored from the checkpoint at token {}", e.state_restored_tokens),
                       e.state_checkpoints_held, e.state_checkpoint_newest);
  }
  if (e.window_layers != 0) {
    out += fmt::format("  window layers: {} attend to the last {} tokens; each keeps a host ring of {} tokens, and pages "
                       "below the window are neither staged nor read\n",
                       e.window_layers, e.window_tokens, e.ring_tokens);
  }
  out += fmt::format("  staged each step: {} pages (not resident; {})\n", e.pages_staged_per_step,
                     e.staged_in_place ? "read in place in the host pool: the backend's kernel reads host memory"
                                       : "copied through the tiles");
  if (!e.sparse_picks.empty()) {
    out += fmt::format("sparse selection in step {} ({} pages held per layer, score {}):\n", e.sparse_step,
                       e.sparse_pages_held, e.sparse_score.empty() ? "bound" : e.sparse_score);
    out += fmt::format("  pages not resident: {} read (copied after the query {}, predicted {}, missed {}), "
                       "{} copied but not read, {} not copied\n",
                       e.sparse_stage_selected + e.sparse_stage_predicted + e.sparse_stage_missed,
                       e.sparse_stage_selected, e.sparse_stage_predicted, e.sparse_stage_missed,
                       e.sparse_stage_unselected, e.sparse_stage_skipped);
    if (!e.sparse_layer_budget.empty()) {
      out += e.sparse_layer_signal.empty() ? std::string("  budget per layer:")
                                           : fmt::format("  budget per layer (layer budgets by {}):", e.sparse_layer_signal);
      for (std::uint32_t b : e.sparse_layer_budget) out += fmt::format(" {}", b);
      out += "\n";
    }
    for (const SparsePick& p : e.sparse_picks) {
      const std::string group = p.group == UINT32_MAX ? std::string{} : fmt::format(" group {:>2}", p.group);
      if (p.rank == UINT32_MAX) {
        out += fmt::format("  layer {:>3}{} page {:>6}  forced  {}\n", p.layer, group, p.logical,
                           pick_staging_text(p.staging));
      } else {
        out += fmt::format("  layer {:>3}{} page {:>6}  rank {:>5}  bound {:.4g}  {}\n", p.layer, group, p.logical,
                           p.rank, p.bound, pick_staging_text(p.staging));
      }
    }
  }
  out += fmt::format("decisions in step {}:\n", e.step);
  if (e.decisions.empty()) out += "  (none)\n";
  for (const Decision& d : e.decisions) {
    out += fmt::format("  {:<8} {:>4} page(s)", decision_kind_name(d.kind), d.pages);
    if (d.layer != UINT32_MAX) out += fmt::format(" layer {}", d.layer);
    if (d.logical_page != UINT32_MAX) out += fmt::format(" page {}", d.logical_page);
    if (d.pool_page != UINT32_MAX) out += fmt::format(" pool {}", d.pool_page);
    if (d.other_slot != UINT32_MAX) out += fmt::format(" for slot {}", d.other_slot);
    out += fmt::format(": {}\n", reason_text(d.reason));
  }
  return out;
}

const char* pick_staging_text(PickStaging staging) noexcept {
  switch (staging) {
    case PickStaging::resident: return "resident";
    case PickStaging::in_place: return "read in place";
    case PickStaging::staged: return "staged";
    case PickStaging::predicted: return "staged: predicted";
    case PickStaging::missed: return "staged: missed";
  }
  return "?";
}

std::string explanation_json(const Explanation& e, int indent) {
  nlohmann::json j;
  j["request_id"] = e.request_id;
  j["slot"] = e.slot;
  j["length_tokens"] = e.length_tokens;
  j["budget"] = {{"floor_pages", e.budget.floor_pages}, {"target_pages", e.budget.target_pages},
                 {"burst_pages", e.budget.burst_pages}};
  j["pages_assigned"] = e.pages_assigned;
  j["pages_reserved"] = e.pages_reserved;
  j["last_active_step"] = e.last_active_step;
  j["pages_staged_per_step"] = e.pages_staged_per_step;
  j["window_layers"] = e.window_layers;
  j["window_tokens"] = e.window_tokens;
  j["ring_tokens"] = e.ring_tokens;
  j["staged_in_place"] = e.staged_in_place;
  j["adopted_pages"] = e.adopted_pages;
  j["adopted_copied"] = e.adopted_copied;
  j["adopted_from_request"] = e.adopted_from_request;
  j["tier_pages_first"] = e.tier_pages_first;
  j["tier_pages_end"] = e.tier_pages_end;
  j["cache_pages_first"] = e.cache_pages_first;
  j["cache_pages_end"] = e.cache_pages_end;
  j["cache_shared_prefixes"] = e.cache_shared_prefixes;
  j["cache_partial_rows"] = e.cache_partial_rows;
  j["cache_ring_cut_pages"] = e.cache_ring_cut_pages;
  j["cache_state_cut_pages"] = e.cache_state_cut_pages;
  j["tier_ring_cut_pages"] = e.tier_ring_cut_pages;
  j["tier_state_cut_pages"] = e.tier_state_cut_pages;
  j["adopted_device_pages"] = e.adopted_device_pages;
  j["adopted_device_copied"] = e.adopted_device_copied;
  j["adopted_device_promoted"] = e.adopted_device_promoted;
  j["adopted_host_pages"] = e.adopted_host_pages;
  if (e.state_bytes != 0) {
    j["recurrent_state"] = {{"bytes", e.state_bytes},
                            {"slot", e.recurrent_slot},
                            {"restored_tokens", e.state_restored_tokens},
                            {"checkpoints_held", e.state_checkpoints_held},
                            {"checkpoint_newest", e.state_checkpoint_newest}};
  }
  if (!e.sparse_picks.empty()) {
    nlohmann::json picks = nlohmann::json::array();
    for (const SparsePick& p : e.sparse_picks) {
      nlohmann::json one = {{"layer", p.layer}, {"page", p.logical}, {"staging", pick_staging_text(p.staging)}};
      if (p.group != UINT32_MAX) one["group"] = p.group;
      if (p.rank == UINT32_MAX) {
        one["forced"] = true;
      } else {
        one["rank"] = p.rank;
        one["bound"] = p.bound;
      }
      picks.push_back(std::move(one));
    }
    j["sparse"] = {{"step", e.sparse_step},
                   {"pages_held", e.sparse_pages_held},
                   {"stage_selected", e.sparse_stage_selected},
                   {"stage_predicted", e.sparse_stage_predicted},
                   {"stage_missed", e.sparse_stage_missed},
                   {"stage_unselected", e.sparse_stage_unselected},
                   {"stage_skipped", e.sparse_stage_skipped},
                   {"score", e.sparse_score.empty() ? std::string("bound") : e.sparse_score},
                   {"budget_by_layer", e.sparse_layer_budget},
                   {"selected", std::move(picks)}};
    if (!e.sparse_layer_signal.empty()) j["sparse"]["layer_signal"] = e.sparse_layer_signal;
  }
  nlohmann::json runs = nlohmann::json::array();
  for (const ResidentRun& r : e.runs) {
    runs.push_back({{"layer", r.layer}, {"logical_first", r.logical_first}, {"pages", r.pages}, {"reason", r.reason},
                    {"pool_pages", r.pool_pages}});
  }
  j["resident"] = std::move(runs);
  j["step"] = e.step;
  nlohmann::json decisions = nlohmann::json::array();
  for (const Decision& d : e.decisions) {
    nlohmann::json x = {{"kind", decision_kind_name(d.kind)}, {"reason", reason_name(d.reason)},
                        {"why", reason_text(d.reason)}, {"pages", d.pages}};
    if (d.layer != UINT32_MAX) x["layer"] = d.layer;
    if (d.logical_page != UINT32_MAX) x["logical_page"] = d.logical_page;
    if (d.pool_page != UINT32_MAX) x["pool_page"] = d.pool_page;
    if (d.other_slot != UINT32_MAX) x["for_slot"] = d.other_slot;
    decisions.push_back(std::move(x));
  }
  j["decisions"] = std::move(decisions);
  return j.dump(indent);
}

}  // namespace activekv
