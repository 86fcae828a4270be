// test_model.hpp — where tests find the default model (SmolLM2-135M-Instruct Q4_1).
//
// $ACTIVEKV_MODEL wins; otherwise scripts/find-model.sh (which looks in Python's
// site-packages without importing anything) is asked. An empty result means
// the model is not installed and a test that needs it skips, saying so.
// ACTIVEKV_SOURCE_DIR is defined by the test's CMake target.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace activekv::gguf::testing {

inline std::string find_default_model() {
  if (const char* env = std::getenv("ACTIVEKV_MODEL"); env != nullptr && env[0] != '\0') return env;
  const std::string command = std::string(ACTIVEKV_SOURCE_DIR) + "/scripts/find-model.sh 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string path;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) path += buffer;
  ::pclose(pipe);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return path;
}

}  // namespace activekv::gguf::testing
