// machine_memory.hpp — the machine's memory, the limit a size that will be
// allocated on the host is checked against before it is allocated.
//
// A host pool or an emulated device arena (the host backend) larger than the
// machine's physical memory can never be allocated and used; it is refused up
// front with the setting's name, never left to fail as a std::bad_alloc.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "activekv/result.hpp"
#include "activekv/size.hpp"

namespace activekv::cli {

inline std::uint64_t machine_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;  // unknown: no limit from here
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

inline Status check_fits_machine(std::uint64_t bytes, const std::string& setting) {
  const std::uint64_t machine = machine_memory_bytes();
  if (bytes <= machine) return Status::success();
  return make_error(ErrorCode::refused, setting,
                    fmt::format("{} is more than this machine's memory ({}); it could never be allocated: lower it",
                                format_bytes(bytes), format_bytes(machine)));
}

}  // namespace activekv::cli
