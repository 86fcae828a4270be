// sim_command.cpp — `activekv sim`: the seed's scenario (or llama-3.1-8b on an H200) on paper.
//
// Drives the real core (admission, budgets, reclamation, residency planning,
// retained history in revocable headroom) with a cost model instead of a
// device, and prints what comes out: inter-token latency against context
// length and concurrency for stock, ActiveKV and ActiveKV with headroom, the
// crossover where staging makes ActiveKV slower than all-on-device, and a
// saturating workload where a naive admit-and-evict policy falls into its
// limit cycle. --out DIR writes index.html (tables and SVG charts, one
// self-contained page), results.json and report.txt; --json prints the JSON.
//
// Exit codes: 0 simulated; 2 bad settings (message on stderr); 1 an output
// file could not be written.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/command.hpp"
#include "sim/report.hpp"
#include "sim/sim_options.hpp"

namespace activekv::cli {

namespace {

constexpr int exit_bad_settings = 2;
constexpr int exit_io = 1;

int fail(const Error& error) {
  std::fprintf(stderr, "activekv sim: %s\n", error.describe().c_str());
  return exit_bad_settings;
}

bool write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) {
    std::fprintf(stderr, "activekv sim: cannot write %s\n", path.string().c_str());
    return false;
  }
  return true;
}

int run_sim(const sim::SimOptions& options, const std::string& command) {
  Result<sim::SimConfig> config = sim::make_sim_config(options);
  if (!config) return fail(config.error());
  Result<sim::SweepResult> sweep = sim::run_sweep(config->scenario, config->sweep);
  if (!sweep) return fail(sweep.error());
  sim::SimReport report;
  report.sweep = std::move(sweep.value());
  report.cost = sim::make_cost_model(config->scenario.card, config->scenario.model);
  report.command = command;
  if (config->saturation) {
    Result<sim::SaturationResult> saturation = sim::run_saturation(config->scenario, *config->saturation);
    if (!saturation) return fail(saturation.error());
    report.saturation = std::move(saturation.value());
  }
  const std::string text = sim::report_text(report);
  const std::string json = sim::report_json(report);
  std::fputs(config->json ? (json + "\n").c_str() : text.c_str(), stdout);
  if (config->out_dir.empty()) return 0;
  std::error_code ec;
  std::filesystem::create_directories(config->out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "activekv sim: cannot create --out %s: %s\n", config->out_dir.c_str(), ec.message().c_str());
    return exit_io;
  }
  const std::filesystem::path dir(config->out_dir);
  if (!write_file(dir / "index.html", sim::report_html(report)) || !write_file(dir / "results.json", json) ||
      !write_file(dir / "report.txt", text)) {
    return exit_io;
  }
  if (!config->json) std::printf("wrote %s/index.html, results.json, report.txt\n", config->out_dir.c_str());
  return 0;
}

Action setup_sim(CLI::App& sub) {
  auto options = std::make_shared<sim::SimOptions>();
  sub.add_option("--scenario", options->scenario, "hybrid-27b (the seed's, on a 32 GB Arc Pro class card) or llama-3.1-8b (H200)")
      ->capture_default_str();
  sub.add_option("--out", options->out_dir, "Directory for index.html (tables + SVG charts), results.json, report.txt");
  sub.add_flag("--json", options->json, "Print the results as JSON instead of tables");
  sub.add_flag("--quick", options->quick, "A reduced sweep (3 lengths × N = 1, 4, 16) and a short saturating run");
  sub.add_flag("--no-probes", options->no_probes, "Skip the fine crossover probes");
  sub.add_flag("--no-saturation", options->no_saturation, "Skip the saturating workload (naive vs ActiveKV admission)");
  sub.add_option("--lengths", options->lengths, "Context lengths to measure, comma-separated (tokens)");
  sub.add_option("--concurrency", options->concurrency, "Concurrencies to measure, comma-separated");
  sub.add_option("--steps", options->steps, "Measured decode steps per cell");
  sub.add_option("--host-pool", options->host_pool, "Host pool size (e.g. 64GiB)");
  sub.add_option("--device-pool", options->device_pool, "ActiveKV arena without headroom (e.g. 8GiB)");
  sub.add_option("--headroom", options->headroom, "Headroom lent to retained history (e.g. 8GiB; 0 for none)");
  sub.add_option("--saturation-steps", options->saturation_steps, "Steps of the saturating workload");
  sub.add_option("--prompt-tokens", options->prompt_tokens, "Saturating workload: prompt tokens per request");
  sub.add_option("--output-tokens", options->output_tokens, "Saturating workload: output tokens per request");
  sub.add_option("--prefill-workspace", options->prefill_workspace, "Headroom a running prefill takes back (e.g. 1GiB; 0: none)");
  return [options] {
    // The command as given, for the report's header (every option that was set).
    const sim::SimOptions& o = *options;
    std::string command = "activekv sim --scenario " + o.scenario;
    const auto add = [&command](const char* flag, const std::string& value) {
      if (!value.empty()) command += std::string(" ") + flag + " " + value;
    };
    if (o.quick) command += " --quick";
    if (o.no_probes) command += " --no-probes";
    if (o.no_saturation) command += " --no-saturation";
    add("--lengths", o.lengths);
    add("--concurrency", o.concurrency);
    add("--steps", o.steps);
    add("--host-pool", o.host_pool);
    add("--device-pool", o.device_pool);
    add("--headroom", o.headroom);
    add("--saturation-steps", o.saturation_steps);
    add("--prompt-tokens", o.prompt_tokens);
    add("--output-tokens", o.output_tokens);
    add("--prefill-workspace", o.prefill_workspace);
    add("--out", o.out_dir);
    if (o.json) command += " --json";
    return run_sim(o, command);
  };
}

}  // namespace

static Registration registration{"sim", "Simulate the seed's scenario on the real core with a cost model", 60, setup_sim};

}  // namespace activekv::cli
