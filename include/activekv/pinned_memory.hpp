// pinned_memory.hpp — page-locked host memory, or a clear refusal.
//
// The host pool must be pinned: DMA engines read it while the CPU is busy
// elsewhere, and a page the kernel swapped out would stall or corrupt a copy.
// For the emulated device (and wherever the backend does not pin for us) this
// is mmap + mlock. When the memlock limit (RLIMIT_MEMLOCK) forbids it the
// result is an Error naming the limit and the settings that change it
// (`ulimit -l`, systemd `LimitMEMLOCK=`, or a smaller --host-pool). There is
// no silent fallback to pageable memory.
//
// A PinnedRegion owns its mapping: move-only, unmapped (and unlocked) on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv {

struct PinOptions {
  // Tests inject a memlock limit here instead of lowering the process's own;
  // 0 means "use getrlimit(RLIMIT_MEMLOCK)".
  std::uint64_t memlock_limit_bytes_override = 0;
};

class PinnedRegion {
 public:
  PinnedRegion() = default;
  PinnedRegion(PinnedRegion&& other) noexcept;
  PinnedRegion& operator=(PinnedRegion&& other) noexcept;
  PinnedRegion(const PinnedRegion&) = delete;
  PinnedRegion& operator=(const PinnedRegion&) = delete;
  ~PinnedRegion();

  // Maps `bytes` (rounded up to the OS page), locks them, and touches every page.
  // `setting` names the option whose size this is ("--host-pool").
  static Result<PinnedRegion> map(std::uint64_t bytes, std::string_view setting, const PinOptions& options = {});

  std::byte* data() const noexcept { return data_; }
  std::uint64_t size_bytes() const noexcept { return size_bytes_; }
  bool locked() const noexcept { return locked_; }

 private:
  std::byte* data_ = nullptr;
  std::uint64_t size_bytes_ = 0;   // what the caller asked for
  std::uint64_t mapped_bytes_ = 0; // rounded to the OS page size
  bool locked_ = false;
};

// The effective memlock limit in bytes (UINT64_MAX when unlimited).
std::uint64_t memlock_limit_bytes(const PinOptions& options = {}) noexcept;

}  // namespace activekv
