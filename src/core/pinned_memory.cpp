// pinned_memory.cpp — mmap + mlock, and the refusal that names the memlock limit.
//
// The limit is checked before mlock so the error can say exactly which limit is in
// the way; mlock's own failure (EPERM, ENOMEM, EAGAIN) gives the same advice. A
// failed pin unmaps and returns an error: never a silent pageable fallback.
#include "activekv/pinned_memory.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "activekv/huge_pages.hpp"
#include "activekv/size.hpp"

namespace activekv {

namespace {

std::string limit_text(std::uint64_t limit) {
  return limit == UINT64_MAX ? std::string("unlimited") : format_bytes(limit);
}

Error memlock_error(std::uint64_t bytes, std::uint64_t limit, std::string_view setting, const char* detail) {
  return make_error(
      ErrorCode::io, std::string(setting),
      fmt::format("cannot pin {} of host memory: the memlock limit (RLIMIT_MEMLOCK) is {}{}. Raise it "
                  "(`ulimit -l unlimited` in the shell, LimitMEMLOCK=infinity in a systemd unit, "
                  "--ulimit memlock=-1 for a container) or lower {}; pageable memory is never used instead",
                  format_bytes(bytes), limit_text(limit), detail, setting));
}

}  // namespace

std::uint64_t memlock_limit_bytes(const PinOptions& options) noexcept {
  if (options.memlock_limit_bytes_override != 0) return options.memlock_limit_bytes_override;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 0;
  if (limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return static_cast<std::uint64_t>(limit.rlim_cur);
}

PinnedRegion::PinnedRegion(PinnedRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      locked_(std::exchange(other.locked_, false)) {}

PinnedRegion& PinnedRegion::operator=(PinnedRegion&& other) noexcept {
  if (this != &other) {
    this->~PinnedRegion();
    new (this) PinnedRegion(std::move(other));
  }
  return *this;
}

PinnedRegion::~PinnedRegion() {
  if (data_ == nullptr) return;
  if (locked_) munlock(data_, mapped_bytes_);
  munmap(data_, mapped_bytes_);
  data_ = nullptr;
}

Result<PinnedRegion> PinnedRegion::map(std::uint64_t bytes, std::string_view setting, const PinOptions& options) {
  AK_ASSERT(bytes > 0, "a pinned region has at least one byte");
  const std::uint64_t os_page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t mapped = (bytes + os_page - 1) / os_page * os_page;
  // Root (CAP_IPC_LOCK) may lock past the soft limit; an injected limit always applies.
  const std::uint64_t limit = memlock_limit_bytes(options);
  const bool limit_binds = options.memlock_limit_bytes_override != 0 || geteuid() != 0;
  if (limit_binds && mapped > limit) return memlock_error(mapped, limit, setting, "");

  // A region of a huge page or more starts on a huge page boundary (mapped with one huge page
  // extra, the unused head and tail unmapped), so all of it but a tail can be 2 MiB pages.
  const bool huge = huge_pages_enabled() && mapped >= huge_page_least;
  const std::uint64_t extra = huge ? huge_page_bytes : 0;
  void* data = mmap(nullptr, mapped + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return make_error(ErrorCode::io, std::string(setting),
                      fmt::format("cannot map {} of host memory ({}): lower {}", format_bytes(mapped),
                                  std::strerror(errno), setting));
  }
  if (huge) {
    const auto first = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t aligned = (first + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    const std::uint64_t head = aligned - first;
    if (head > 0) munmap(data, head);
    if (extra - head > 0) munmap(reinterpret_cast<void*>(aligned + mapped), extra - head);
    data = reinterpret_cast<void*>(aligned);
    advise_huge_pages(data, mapped);  // before mlock touches the pages
  }
  if (mlock(data, mapped) != 0) {
    const int error = errno;
    munmap(data, mapped);
    return memlock_error(mapped, limit, setting, fmt::format(" and mlock failed: {}", std::strerror(error)).c_str());
  }
  PinnedRegion region;
  region.data_ = static_cast<std::byte*>(data);
  region.size_bytes_ = bytes;
  region.mapped_bytes_ = mapped;
  region.locked_ = true;
  return region;
}

}  // namespace activekv
