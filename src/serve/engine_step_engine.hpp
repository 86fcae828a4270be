// engine_step_engine.hpp — the real engine behind the scheduler's StepEngine table.
//
// Owns, in destruction order (last built, first gone): the engine (model,
// forward pass, thread pool), the KV runtime (memory plan, arena, pinned host
// pool, budgets) and the backend it runs on, plus the tokenizer. Built once,
// at warm-up, from the run configuration: every size comes from the
// configuration file or the command line, none is automatic.
//
// Admission. The scheduler asks only for the head of its FIFO queue. The
// adapter says "no free history" without touching the runtime when every
// history is owned; otherwise it submits to the runtime, which either admits
// (history + floor reserved) or queues the request in its own FIFO with a
// reason (the floor does not fit even after reclamation). A request queued
// inside the runtime stays the adapter's one pending request: later admit()
// calls collect it through take_admitted() once a finish freed room, so the
// runtime's queue never holds more than the scheduler's head.
//
// Sampling is greedy (argmax, lowest id on ties) unless set_sampling() gives a
// context a temperature: then that context's own engine::Sampler (one per host
// history, built at warm-up, reseeded at set_sampling) draws nucleus samples
// from its seed. Greedy outputs are reproducible and comparable with the same
// request run alone; seeded ones are reproducible for the same seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serve/run_config.hpp"
#include "serve/step_engine.hpp"

namespace activekv::serve {

struct EngineStepEngineSettings {
  RunConfig config;           // sizes, threads, budgets
  std::string model_path;     // resolved GGUF path
  std::string backend = "host";
};

class EngineStepEngine final : public StepEngine {
 public:
  static Result<std::unique_ptr<EngineStepEngine>> create(const EngineStepEngineSettings& settings);
  ~EngineStepEngine() override;

  const EnginePlan& plan() const override;
  std::string plan_text() const override;
  std::string plan_json() const override;
  Result<std::vector<std::int32_t>> encode(std::string_view text) override;
  std::string decode(std::span<const std::int32_t> tokens) override;
  Admission admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max) override;
  void wait_admission(std::uint32_t timeout_ms) override;
  bool prefetch(std::span<const std::int32_t> prompt) override;
  void drop_prefetch(std::span<const std::int32_t> prompt) override;
  void set_sampling(ContextHandle context, const SamplingSettings& sampling) override;
  void finish(ContextHandle context) override;
  void cancel(ContextHandle context) override;
  std::uint32_t tokens_to_checkpoint(ContextHandle context) const override;
  Status step(std::span<const BatchEntry> batch, std::span<std::int32_t> tokens_out) override;
  ContextPages pages(ContextHandle context) const override;
  EngineCounters counters() const override;
  bool all_returned() const override;
  void release_retained() override;

  struct Parts;  // engine_step_engine.cpp

 private:
  explicit EngineStepEngine(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace activekv::serve
