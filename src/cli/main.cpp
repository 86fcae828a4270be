// main.cpp — the `activekv` tool: a thin shell that parses the command line
// and runs the one subcommand chosen. Subcommands register themselves
// (command.hpp); this file knows none of them by name.
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <string>

#include "cli/command.hpp"

namespace activekv::cli {

namespace {
constexpr int commands_max = 32;
std::array<Command, commands_max> g_commands{};
int g_command_count = 0;
}  // namespace

Registration::Registration(const char* name, const char* description, int order, Setup setup) {
  if (g_command_count == commands_max) {
    std::fprintf(stderr, "activekv: too many subcommands (raise commands_max)\n");
    std::abort();
  }
  g_commands[static_cast<std::size_t>(g_command_count++)] = Command{name, description, order, setup};
}

const Command* commands(int* count) {
  std::sort(g_commands.begin(), g_commands.begin() + g_command_count,
            [](const Command& a, const Command& b) { return a.order < b.order; });
  *count = g_command_count;
  return g_commands.data();
}

}  // namespace activekv::cli

int main(int argc, char** argv) {
  CLI::App app{"ActiveKV: accelerator memory for LLM inference as an owned, budgeted, leased resource"};
  app.require_subcommand(1);
  int count = 0;
  const activekv::cli::Command* all = activekv::cli::commands(&count);
  std::map<CLI::App*, activekv::cli::Action> actions;
  for (int i = 0; i < count; ++i) {
    CLI::App* sub = app.add_subcommand(all[i].name, all[i].description);
    actions[sub] = all[i].setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse error is bad
    // command-line syntax: one line, exit 2 (the documented code), never
    // CLI11's own codes (104-114).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "activekv: %s (see --help)\n", e.what());
    return 2;
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    // The top-level handler: no exception leaves a command. Every size is checked
    // against a limit before it is allocated; should an allocation fail anyway
    // (a limit on the process's address space, a machine short of memory), the
    // refusal names the command and what to lower.
    try {
      return action();
    } catch (const std::bad_alloc&) {
      const char* what = activekv::cli::AllocationScope::current();
      std::fprintf(stderr, "activekv %s: out of memory while allocating %s (lower it, or raise the process's memory limit)\n",
                   sub->get_name().c_str(), what != nullptr ? what : "its working memory (--host-pool, --device-pool, --max-context)");
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "activekv %s: internal error: %s\n", sub->get_name().c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "activekv: no subcommand given (try --help)\n");
  return 2;
}
