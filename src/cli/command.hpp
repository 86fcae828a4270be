// command.hpp — how a subcommand joins the `activekv` tool.
//
// Each subcommand lives in its own file, src/cli/<name>_command.cpp, next to
// nothing else, and registers itself with a static Registration:
//
//   static activekv::cli::Registration plan{"plan", "Print the memory plan", 10, setup_plan};
//
// setup() declares the subcommand's options on `sub` and returns the action to
// run once parsing succeeded; the action returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>

namespace activekv::cli {

using Action = std::function<int()>;
using Setup = Action (*)(CLI::App& sub);

struct Registration {
  Registration(const char* name, const char* description, int order, Setup setup);
};

struct Command {
  const char* name;
  const char* description;
  int order;  // position in --help
  Setup setup;
};

// All registered commands, sorted by order.
const Command* commands(int* count);

// What a command is allocating now, named by its settings, for the top-level
// handler in main.cpp: should a std::bad_alloc escape the command while a scope
// is open, the refusal says "out of memory while allocating <what>" (exit 1).
// Sizes are checked against limits before allocation; this is the last line.
class AllocationScope {
 public:
  explicit AllocationScope(const char* what) noexcept
      : previous_(current_), exceptions_(std::uncaught_exceptions()) {
    current_ = what;
  }
  // Left while an exception unwinds the command, the scope stays named for the handler.
  ~AllocationScope() {
    if (std::uncaught_exceptions() == exceptions_) current_ = previous_;
  }
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
  static const char* current() noexcept { return current_; }

 private:
  const char* previous_;
  int exceptions_;
  static inline const char* current_ = nullptr;
};

}  // namespace activekv::cli
