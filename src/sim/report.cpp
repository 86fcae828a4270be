// report.cpp — the simulation's findings as text tables and as JSON.
#include "sim/report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "activekv/size.hpp"

namespace activekv::sim {

double headroom_speedup(const SweepResult& sweep, std::uint32_t concurrency, std::uint32_t context_tokens) {
  const CellResult* plain = sweep.find(Variant::activekv, concurrency, context_tokens);
  const CellResult* headroom = sweep.find(Variant::activekv_headroom, concurrency, context_tokens);
  if (plain == nullptr || headroom == nullptr || !plain->ran || !headroom->ran) return 0.0;
  return plain->itl_seconds / headroom->itl_seconds;
}

namespace {

std::string ms(double seconds) {
  if (seconds >= 10.0) return fmt::format("{:.0f}", seconds * 1e3);
  return fmt::format("{:.1f}", seconds * 1e3);
}

std::string latency_table(const SweepResult& r, Variant variant) {
  const Scenario& s = r.scenario;
  std::string out = fmt::format("  {:>9}", "tokens");
  for (std::uint32_t n : s.concurrency) out += fmt::format(" {:>9}", fmt::format("N={}", n));
  out += '\n';
  for (std::uint32_t length : s.context_tokens) {
    out += fmt::format("  {:>9}", length);
    for (std::uint32_t n : s.concurrency) {
      const CellResult* c = r.find(variant, n, length);
      out += fmt::format(" {:>9}", c != nullptr && c->ran ? ms(c->itl_seconds) : "—");
    }
    out += '\n';
  }
  return out;
}

std::string speedup_table(const SweepResult& r) {
  const Scenario& s = r.scenario;
  std::string out = fmt::format("  {:>9}", "tokens");
  for (std::uint32_t n : s.concurrency) out += fmt::format(" {:>9}", fmt::format("N={}", n));
  out += '\n';
  for (std::uint32_t length : s.context_tokens) {
    out += fmt::format("  {:>9}", length);
    for (std::uint32_t n : s.concurrency) {
      const double x = headroom_speedup(r, n, length);
      out += fmt::format(" {:>9}", x > 0 ? fmt::format("{:.2f}x", x) : "—");
    }
    out += '\n';
  }
  return out;
}

std::string crossover_line(const Crossover& c) {
  if (c.stock_fits_until_tokens == 0) {
    return fmt::format("  N={:<3} stock cannot hold {} contexts at any probed length", c.concurrency, c.concurrency);
  }
  if (c.slower_from_tokens == 0) {
    return fmt::format("  N={:<3} never more than 5% slower than stock while stock fits (stock holds N={} up to {} tokens)",
                       c.concurrency, c.concurrency, c.stock_fits_until_tokens);
  }
  const ProbePoint* at = nullptr;
  for (const ProbePoint& p : c.probes) {
    if (p.context_tokens == c.slower_from_tokens) at = &p;
  }
  return fmt::format("  N={:<3} slower than stock from {} tokens (not slower at {}): {} ms vs {} ms; stock holds N={} up to {} tokens",
                     c.concurrency, c.slower_from_tokens, c.not_slower_until_tokens,
                     at != nullptr ? ms(at->activekv_seconds) : "?", at != nullptr ? ms(at->stock_seconds) : "?",
                     c.concurrency, c.stock_fits_until_tokens);
}

nlohmann::json cell_json(const CellResult& c) {
  nlohmann::json j;
  j["variant"] = variant_name(c.variant);
  j["concurrency"] = c.concurrency;
  j["context_tokens"] = c.context_tokens;
  j["ran"] = c.ran;
  if (!c.ran) {
    j["note"] = c.note;
    return j;
  }
  j["itl_seconds"] = c.itl_seconds;
  j["h2d_bytes_per_step"] = c.h2d_bytes_per_step;
  j["d2d_bytes_per_step"] = c.d2d_bytes_per_step;
  j["resident_bytes_per_step"] = c.resident_bytes_per_step;
  j["h2d_busy_seconds"] = c.h2d_busy_seconds;
  j["compute_busy_seconds"] = c.compute_busy_seconds;
  j["stall_seconds"] = c.stall_seconds;
  j["heap_allocations"] = c.heap_allocations;
  j["retained_pages"] = c.retained_pages;
  return j;
}

nlohmann::json plan_json(const MemoryPlan& p) {
  nlohmann::json j;
  j["segment_bytes"] = p.host.segment_bytes;
  j["history_bytes"] = p.host.history_bytes;
  j["segments"] = p.host.segments;
  j["histories"] = p.host.histories;
  j["leftover_segments"] = p.host.leftover_segments;
  j["concurrency"] = p.budget.concurrency;
  j["dense_layers"] = p.geometry.dense_layers;
  j["row_bytes"] = p.host.row_bytes;
  j["recurrent_slot_bytes"] = p.arena.recurrent_slot_bytes;
  j["recurrent_slots"] = p.arena.recurrent_slots;
  j["page_tokens"] = p.arena.page_tokens;
  j["page_bytes"] = p.arena.page_bytes;
  j["pages"] = p.arena.pages;
  j["tile_tokens"] = p.arena.tile_tokens;
  j["tiles"] = p.arena.tiles;
  j["arena"] = {{"device_pool_bytes", p.arena.device_pool_bytes},
                {"staging_tiles_bytes", p.arena.staging_tiles.size_bytes},
                {"page_pool_bytes", p.arena.page_pool.size_bytes},
                {"recurrent_bytes", p.arena.recurrent.size_bytes},
                {"headroom_bytes", p.arena.headroom.size_bytes},
                {"used_bytes", p.arena.used_bytes}};
  j["floor_pages"] = p.budget.floor_pages;
  j["target_pages"] = p.budget.target_pages;
  j["burst_pages"] = p.budget.burst_pages;
  return j;
}

}  // namespace

std::string report_text(const SimReport& report) {
  const SweepResult& r = report.sweep;
  const Scenario& s = r.scenario;
  const MemoryPlan& p = r.plan;
  const CostModel& c = report.cost;
  std::string out;
  out += fmt::format("activekv sim — scenario {}\n  {}\n", s.name, s.description);
  out += fmt::format("  card: {}\n", s.card.description);
  out += fmt::format(
      "  cost model: h2d/d2h {:.1f} GB/s + {:.0f} µs per copy; d2d {:.0f} GB/s; attention {:.0f} GB/s of KV read; "
      "non-attention {:.2f} ms per step + {:.3f} ms per token\n",
      c.h2d_bytes_per_second / 1e9, c.copy_latency_seconds * 1e6, c.d2d_bytes_per_second / 1e9,
      1.0 / c.attention_seconds_per_byte / 1e9, c.non_attention_seconds_per_step * 1e3, c.non_attention_seconds_per_token * 1e3);
  out += fmt::format("  device: {} = weights {} + runtime reserve {} + KV; stock keeps {} for KV\n",
                     format_bytes(s.card.device_memory_bytes), format_bytes(s.model.weight_bytes),
                     format_bytes(s.runtime_reserve_bytes), format_bytes(s.stock_kv_bytes()));
  out += "\nFrom the core's memory plan (make_memory_plan, as `activekv plan` prints it):\n";
  out += fmt::format("  segment {} (= {} tokens × {} B rows); history {} per {}-token context ({} dense layers)\n",
                     format_bytes(p.host.segment_bytes), p.host.max_context_tokens, p.host.row_bytes,
                     format_bytes(p.host.history_bytes), p.host.max_context_tokens, p.geometry.dense_layers);
  out += fmt::format("  host pool {} holds {} segments = {} histories (leftover {}); concurrency {}\n",
                     format_bytes(p.host.host_pool_bytes), p.host.segments, p.host.histories, p.host.leftover_segments,
                     p.budget.concurrency);
  out += fmt::format("  recurrent state {} per context, in {} slots\n", format_bytes(p.arena.recurrent_slot_bytes),
                     p.arena.recurrent_slots);
  out += fmt::format(
      "  one arena shared by all {} dense layers: tiles {} + page pool {} ({} pages of {}) + recurrent {} = {}; "
      "with headroom + {} = {}\n",
      p.geometry.dense_layers, format_bytes(p.arena.staging_tiles.size_bytes), format_bytes(p.arena.page_pool.size_bytes),
      p.arena.pages, format_bytes(p.arena.page_bytes), format_bytes(p.arena.recurrent.size_bytes),
      format_bytes(p.arena.used_bytes), format_bytes(r.plan_headroom.arena.headroom.size_bytes),
      format_bytes(r.plan_headroom.arena.used_bytes));
  out += fmt::format("  heap allocations over {} measured decode steps (plan + translate + schedule): {}\n",
                     r.measured_steps, r.heap_allocations);

  for (Variant v : {Variant::stock, Variant::activekv, Variant::activekv_headroom}) {
    out += fmt::format("\nInter-token latency, ms — {} (rows: context tokens; columns: concurrency; — : does not fit)\n",
                       v == Variant::activekv_headroom
                           ? fmt::format("ActiveKV with {} headroom", format_bytes(s.headroom_bytes))
                           : std::string(variant_label(v)));
    out += latency_table(r, v);
  }
  out += "\nWhat headroom buys: latency without headroom ÷ latency with it\n";
  out += speedup_table(r);
  out += "\nCrossover: where ActiveKV (no headroom) becomes slower per token than stock (> 5%, probed every "
         "max-context/32 tokens)\n";
  for (const Crossover& x : r.crossovers) {
    if (x.variant == Variant::activekv) out += crossover_line(x) + '\n';
  }
  out += "Crossover with headroom:\n";
  for (const Crossover& x : r.crossovers) {
    if (x.variant == Variant::activekv_headroom) out += crossover_line(x) + '\n';
  }
  if (report.saturation) {
    const SaturationResult& sat = *report.saturation;
    out += fmt::format(
        "\nSaturating workload: endless identical requests ({} prompt + {} output tokens), {} steps\n",
        sat.settings.prompt_tokens, sat.settings.output_tokens, sat.settings.steps);
    out += fmt::format(
        "  naive (all KV on device, {} pages of {} tokens, max {} running, evict newest on overflow):\n"
        "    evictions {}, recomputed tokens {}, decoded {}, finished {}, {:.1f} tokens/s\n",
        sat.naive_capacity_pages, s.page_tokens, sat.settings.naive_max_seqs, sat.naive.evictions,
        sat.naive.recompute_tokens, sat.naive.decoded_tokens, sat.naive.finished, sat.naive.tokens_per_second());
    out += fmt::format(
        "  ActiveKV ({}, the core's admission, concurrency {}):\n"
        "    evictions {}, decoded {}, finished {}, {:.1f} tokens/s; {} submissions waited in the core's queue; "
        "pages reclaimed {} in {} reclamation steps\n",
        variant_name(sat.settings.variant), sat.activekv_concurrency, sat.activekv.evictions, sat.activekv.decoded_tokens,
        sat.activekv.finished, sat.activekv.tokens_per_second(), sat.queued_by_core, sat.pages_reclaimed, sat.reclaim_steps);
    out += fmt::format(
        "    headroom takings {} ({} pages taken, {} lent pages revoked, {} retained pages dropped); "
        "heap allocations after the first window {}\n",
        sat.headroom_takings, sat.headroom_pages_taken, sat.headroom_pages_revoked, sat.retained_pages_dropped,
        sat.heap_allocations);
    out += "  evictions per window of " + std::to_string(sat.settings.window_steps) + " steps (naive):";
    for (const SaturationWindow& w : sat.windows) out += ' ' + std::to_string(w.naive_evictions);
    out += "\n  evictions per window (ActiveKV):";
    for (const SaturationWindow& w : sat.windows) out += ' ' + std::to_string(w.activekv_evictions);
    out += '\n';
  }
  out += fmt::format("\nsimulated in {:.2f} s of wall time\n", r.wall_seconds);
  return out;
}

std::string report_json(const SimReport& report, int indent) {
  const SweepResult& r = report.sweep;
  const Scenario& s = r.scenario;
  nlohmann::json j;
  j["command"] = report.command;
  j["scenario"] = {{"name", s.name},
                   {"description", s.description},
                   {"preset", s.preset},
                   {"card", s.card.name},
                   {"device_memory_bytes", s.card.device_memory_bytes},
                   {"weight_bytes", s.model.weight_bytes},
                   {"runtime_reserve_bytes", s.runtime_reserve_bytes},
                   {"stock_kv_bytes", s.stock_kv_bytes()},
                   {"host_pool_bytes", s.host_pool_bytes},
                   {"device_pool_bytes", s.device_pool_bytes},
                   {"headroom_bytes", s.headroom_bytes},
                   {"max_context_tokens", s.max_context_tokens},
                   {"context_tokens", s.context_tokens},
                   {"concurrency", s.concurrency},
                   {"measure_steps", s.measure_steps}};
  const CostModel& c = report.cost;
  j["cost_model"] = {{"h2d_bytes_per_second", c.h2d_bytes_per_second},
                     {"d2h_bytes_per_second", c.d2h_bytes_per_second},
                     {"d2d_bytes_per_second", c.d2d_bytes_per_second},
                     {"copy_latency_seconds", c.copy_latency_seconds},
                     {"attention_seconds_per_byte", c.attention_seconds_per_byte},
                     {"attention_launch_seconds", c.attention_launch_seconds},
                     {"non_attention_seconds_per_step", c.non_attention_seconds_per_step},
                     {"non_attention_seconds_per_token", c.non_attention_seconds_per_token},
                     {"h2d_queues", c.h2d_queues},
                     {"d2h_queues", c.d2h_queues},
                     {"d2d_queues", c.d2d_queues}};
  j["core_plan"] = plan_json(r.plan);
  j["core_plan_headroom"] = plan_json(r.plan_headroom);
  j["measured_steps"] = r.measured_steps;
  j["heap_allocations"] = r.heap_allocations;
  nlohmann::json cells = nlohmann::json::array();
  for (const CellResult& cell : r.cells) cells.push_back(cell_json(cell));
  j["cells"] = cells;
  nlohmann::json speedups = nlohmann::json::array();
  for (std::uint32_t n : s.concurrency) {
    for (std::uint32_t length : s.context_tokens) {
      speedups.push_back({{"concurrency", n}, {"context_tokens", length}, {"speedup", headroom_speedup(r, n, length)}});
    }
  }
  j["headroom_speedup"] = speedups;
  nlohmann::json crossovers = nlohmann::json::array();
  for (const Crossover& x : r.crossovers) {
    nlohmann::json probes = nlohmann::json::array();
    for (const ProbePoint& p : x.probes) {
      probes.push_back({{"context_tokens", p.context_tokens},
                        {"stock_seconds", p.stock_seconds},
                        {"activekv_seconds", p.activekv_seconds}});
    }
    crossovers.push_back({{"variant", variant_name(x.variant)},
                          {"concurrency", x.concurrency},
                          {"slower_from_tokens", x.slower_from_tokens},
                          {"not_slower_until_tokens", x.not_slower_until_tokens},
                          {"stock_fits_until_tokens", x.stock_fits_until_tokens},
                          {"probes", probes}});
  }
  j["crossovers"] = crossovers;
  if (report.saturation) {
    const SaturationResult& sat = *report.saturation;
    const auto totals = [](const SaturationTotals& t) {
      return nlohmann::json{{"decoded_tokens", t.decoded_tokens}, {"finished", t.finished},
                            {"admitted", t.admitted},           {"evictions", t.evictions},
                            {"recompute_tokens", t.recompute_tokens}, {"seconds", t.seconds},
                            {"tokens_per_second", t.tokens_per_second()}};
    };
    nlohmann::json windows = nlohmann::json::array();
    for (const SaturationWindow& w : sat.windows) {
      windows.push_back({{"first_step", w.first_step},
                         {"naive_evictions", w.naive_evictions},
                         {"activekv_evictions", w.activekv_evictions},
                         {"naive_running_min", w.naive_running_min},
                         {"naive_running_max", w.naive_running_max},
                         {"activekv_running_min", w.activekv_running_min},
                         {"activekv_running_max", w.activekv_running_max},
                         {"naive_decoded", w.naive_decoded},
                         {"activekv_decoded", w.activekv_decoded},
                         {"naive_recomputed", w.naive_recomputed},
                         {"naive_seconds", w.naive_seconds},
                         {"activekv_seconds", w.activekv_seconds},
                         {"headroom_takings", w.headroom_takings}});
    }
    j["saturation"] = {{"prompt_tokens", sat.settings.prompt_tokens},
                       {"output_tokens", sat.settings.output_tokens},
                       {"steps", sat.settings.steps},
                       {"window_steps", sat.settings.window_steps},
                       {"naive_max_seqs", sat.settings.naive_max_seqs},
                       {"naive_capacity_pages", sat.naive_capacity_pages},
                       {"prefill_workspace_bytes", sat.settings.prefill_workspace_bytes},
                       {"activekv_variant", variant_name(sat.settings.variant)},
                       {"activekv_concurrency", sat.activekv_concurrency},
                       {"naive", totals(sat.naive)},
                       {"activekv", totals(sat.activekv)},
                       {"queued_by_core", sat.queued_by_core},
                       {"pages_reclaimed", sat.pages_reclaimed},
                       {"reclaim_steps", sat.reclaim_steps},
                       {"headroom_takings", sat.headroom_takings},
                       {"headroom_pages_taken", sat.headroom_pages_taken},
                       {"headroom_pages_revoked", sat.headroom_pages_revoked},
                       {"retained_pages_dropped", sat.retained_pages_dropped},
                       {"heap_allocations", sat.heap_allocations},
                       {"windows", windows}};
  }
  j["wall_seconds"] = r.wall_seconds;
  return j.dump(indent);
}

}  // namespace activekv::sim
