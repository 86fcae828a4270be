// clock.hpp — where the scheduler reads the time, so tests can own it.
//
// The run uses WallClock (seconds since the run started, steady_clock).
// Tests use ManualClock, which only moves when told to (the fake engine
// advances it by a cost per step), so latencies in tests are exact and a run
// never sleeps.
#pragma once

#include <chrono>
#include <thread>

namespace activekv::serve {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now_s() = 0;
  // Returns once now_s() >= t_s.
  virtual void wait_until(double t_s) = 0;
  // Time 0 is now: called when warm-up ends, so arrival times count from the first step.
  virtual void restart() = 0;
};

class WallClock final : public Clock {
 public:
  WallClock() : start_(std::chrono::steady_clock::now()) {}
  double now_s() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void wait_until(double t_s) override {
    const double wait_s = t_s - now_s();
    if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
  }
  void restart() override { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

class ManualClock final : public Clock {
 public:
  double now_s() override { return now_s_; }
  void wait_until(double t_s) override {
    if (t_s > now_s_) now_s_ = t_s;
  }
  void restart() override { now_s_ = 0.0; }
  void advance(double seconds) { now_s_ += seconds; }

 private:
  double now_s_ = 0.0;
};

}  // namespace activekv::serve
