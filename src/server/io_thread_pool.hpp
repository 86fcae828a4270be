// io_thread_pool.hpp — a fixed pool of HTTP worker threads, every one marked as an I/O thread.
//
// The connection gate (connection_gate.hpp) hands each whole request to one of
// these pools (a cpp-httplib TaskQueue, so its interface). The workers mark
// themselves (testing::mark_io_thread) before taking work, so what they
// allocate — reading requests, building JSON — is left out of the engine
// thread's step-path allocation count. A fixed number of threads, made at
// construction; shutdown() lets queued connections run, then joins them.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::server {

class IoThreadPool final : public httplib::TaskQueue {
 public:
  explicit IoThreadPool(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        testing::mark_io_thread();
        while (true) {
          std::function<void()> fn;
          {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
            if (shutdown_ && jobs_.empty()) return;
            fn = std::move(jobs_.front());
            jobs_.pop_front();
          }
          fn();
        }
      });
    }
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
};

}  // namespace activekv::server
