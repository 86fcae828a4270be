// registry.cpp — make_backend: a backend by name, or an error that says why not.
//
// Which backends exist is decided by the build (a backend folder that found its
// SDK defines its target; src/backends/CMakeLists.txt turns that into
// ACTIVEKV_HAVE_<NAME>). The registry never guesses: an unknown name, a backend
// this build lacks, and a backend without a usable device are three different
// errors, each naming --backend and what to do.
#include <array>

#include <fmt/format.h>

#include "activekv/backend.hpp"

namespace activekv {

namespace {

constexpr std::array<std::string_view, 3> names = {"host", "opencl", "cuda"};

}  // namespace

std::span<const std::string_view> backend_names() noexcept { return names; }

bool backend_built(std::string_view name) noexcept {
#ifdef ACTIVEKV_HAVE_HOST
  if (name == "host") return true;
#endif
#ifdef ACTIVEKV_HAVE_OPENCL
  if (name == "opencl") return true;
#endif
#ifdef ACTIVEKV_HAVE_CUDA
  if (name == "cuda") return true;
#endif
  (void)name;
  return false;
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options) {
  if (options.fences_max == 0 || options.commands_max == 0 || options.compute_threads == 0) {
    return make_error(ErrorCode::invalid_argument, "--backend", "fences_max, commands_max and compute_threads must be at least 1");
  }
  bool known = false;
  for (const std::string_view n : names) known = known || n == name;
  if (!known) {
    return make_error(ErrorCode::invalid_argument, "--backend",
                      fmt::format("unknown backend '{}'; choose one of: host, opencl, cuda", name));
  }
  if (!backend_built(name)) {
    return make_error(ErrorCode::unsupported, "--backend",
                      fmt::format("the {} backend is not built into this binary (its SDK was not found at configure "
                                  "time); rebuild with it, or choose --backend host",
                                  name));
  }
#ifdef ACTIVEKV_HAVE_HOST
  if (name == "host") return make_host_backend(options);
#endif
#ifdef ACTIVEKV_HAVE_OPENCL
  if (name == "opencl") return make_opencl_backend(options);
#endif
#ifdef ACTIVEKV_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend(options);
#endif
  return make_error(ErrorCode::unsupported, "--backend", fmt::format("the {} backend is not built", name));
}

}  // namespace activekv
