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

}  // namespace activekv::cli
