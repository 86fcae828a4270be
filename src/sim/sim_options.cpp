// sim_options.cpp — option text to a validated simulation configuration.
#include "sim/sim_options.hpp"

#include <limits>
#include <string_view>
#include <vector>

#include "activekv/headroom.hpp"
#include "activekv/size.hpp"

namespace activekv::sim {

namespace {

Result<std::vector<std::uint32_t>> parse_list(const std::string& text, const char* setting, std::uint64_t hi) {
  std::vector<std::uint32_t> values;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    Result<std::uint64_t> value = parse_count(item, setting);
    if (!value) return value.error();
    if (*value == 0 || *value > hi) {
      return make_error(ErrorCode::invalid_argument, setting,
                        "'" + std::string(item) + "' must be between 1 and " + std::to_string(hi));
    }
    if (values.size() == 256) return make_error(ErrorCode::invalid_argument, setting, "more than 256 values");
    values.push_back(static_cast<std::uint32_t>(*value));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) {
      return make_error(ErrorCode::invalid_argument, setting, "a trailing comma: give a list such as 1,8,32");
    }
  }
  if (values.empty()) return make_error(ErrorCode::invalid_argument, setting, "give a list such as 1,8,32");
  return values;
}

// Bounds of the counts: a simulated run does work in proportion to each (steps × cells), so each is capped
// where a run would take hours, not where a u32 wraps.
constexpr std::uint64_t steps_max = 1u << 16;             // --steps: measured decode steps per cell
constexpr std::uint64_t saturation_steps_max = 1u << 20;  // --saturation-steps
constexpr std::uint64_t tokens_max = 1u << 24;            // --prompt-tokens, --output-tokens, --lengths

Status count_into(const std::string& text, const char* setting, std::uint32_t& out, std::uint64_t hi) {
  if (text.empty()) return Status::success();
  Result<std::uint64_t> value = parse_count(text, setting);
  if (!value) return value.error();
  if (*value == 0 || *value > hi) {
    return make_error(ErrorCode::invalid_argument, setting, "'" + text + "' must be between 1 and " + std::to_string(hi));
  }
  out = static_cast<std::uint32_t>(*value);
  return Status::success();
}

Status size_into(const std::string& text, const char* setting, std::uint64_t& out, bool zero_allowed) {
  if (text.empty()) return Status::success();
  Result<std::uint64_t> value = parse_size(text, setting, zero_allowed);
  if (!value) return value.error();
  out = *value;
  return Status::success();
}

void make_quick(Scenario& s, SaturationSettings& saturation) {
  // Three lengths spread over the range, three concurrencies, two measured steps.
  const std::vector<std::uint32_t> all = s.context_tokens;
  s.context_tokens = {all[all.size() / 3], all[2 * all.size() / 3], all.back()};
  s.concurrency = {1, 4, 16};
  s.measure_steps = 2;
  saturation.steps = 2048;
  saturation.prompt_tokens = 512;
  saturation.output_tokens = 512;
  saturation.window_steps = 128;
}

}  // namespace

Result<SimConfig> make_sim_config(const SimOptions& o) {
  Result<Scenario> scenario = make_scenario(o.scenario);
  if (!scenario) return scenario.error();
  SimConfig config;
  config.scenario = std::move(scenario.value());
  Scenario& s = config.scenario;
  SaturationSettings saturation;
  saturation.prefill_workspace_bytes = GiB;  // assumption (docs/SIMULATION.md): a prefill chunk's workspace
  if (o.quick) make_quick(s, saturation);
  if (!o.lengths.empty()) {
    Result<std::vector<std::uint32_t>> lengths = parse_list(o.lengths, "--lengths", tokens_max);
    if (!lengths) return lengths.error();
    s.context_tokens = std::move(lengths.value());
  }
  if (!o.concurrency.empty()) {
    Result<std::vector<std::uint32_t>> concurrency = parse_list(o.concurrency, "--concurrency", 1u << 16);
    if (!concurrency) return concurrency.error();
    s.concurrency = std::move(concurrency.value());
  }
  if (Status st = count_into(o.steps, "--steps", s.measure_steps, steps_max); !st) return st.error();
  if (Status st = size_into(o.host_pool, "--host-pool", s.host_pool_bytes, false); !st) return st.error();
  if (Status st = size_into(o.device_pool, "--device-pool", s.device_pool_bytes, false); !st) return st.error();
  if (!o.headroom.empty()) {
    Result<std::uint64_t> headroom = parse_headroom(o.headroom);
    if (!headroom) return headroom.error();
    s.headroom_bytes = *headroom;
  }
  if (Status st = count_into(o.saturation_steps, "--saturation-steps", saturation.steps, saturation_steps_max); !st) return st.error();
  if (Status st = count_into(o.prompt_tokens, "--prompt-tokens", saturation.prompt_tokens, tokens_max); !st) return st.error();
  if (Status st = count_into(o.output_tokens, "--output-tokens", saturation.output_tokens, tokens_max); !st) return st.error();
  if (Status st = size_into(o.prefill_workspace, "--prefill-workspace", saturation.prefill_workspace_bytes, true); !st) {
    return st.error();
  }
  // Each part of the card is checked alone before the sum (Scenario::validate) is taken: no sum wraps.
  if (s.device_pool_bytes > s.card.device_memory_bytes) {
    return make_error(ErrorCode::refused, "--device-pool",
                      format_bytes(s.device_pool_bytes) + " is more than the card's " + format_bytes(s.card.device_memory_bytes));
  }
  if (s.headroom_bytes > s.card.device_memory_bytes) {
    return make_error(ErrorCode::refused, "--headroom",
                      format_bytes(s.headroom_bytes) + " is more than the card's " + format_bytes(s.card.device_memory_bytes));
  }
  if (Status st = s.validate(); !st) return st.error();
  if (saturation.prompt_tokens + static_cast<std::uint64_t>(saturation.output_tokens) > s.max_context_tokens) {
    return make_error(ErrorCode::invalid_argument, "--output-tokens",
                      "prompt + output tokens exceed the scenario's max context " + std::to_string(s.max_context_tokens));
  }
  if (saturation.steps < saturation.window_steps) {
    return make_error(ErrorCode::invalid_argument, "--saturation-steps",
                      "must be at least one window (" + std::to_string(saturation.window_steps) + " steps)");
  }
  if (!o.no_saturation) config.saturation = saturation;
  config.sweep.probes = !o.no_probes && !o.quick;
  config.out_dir = o.out_dir;
  config.json = o.json;
  return config;
}

}  // namespace activekv::sim
