// host_pool_test.cpp — pinning works, or fails loudly naming the memlock limit; rows land where
// the shared layout says.
#include "activekv/host_pool.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "activekv/size.hpp"

namespace activekv {
namespace {

HostPoolPlan small_plan() {
  MemorySettings s;
  s.geometry = Geometry{4, 0, 2, 8, DType::f16, 0};  // 64-byte rows
  s.max_context_tokens = 256;
  s.page_tokens = 16;
  s.host_pool_bytes = 3 * 4 * 256 * 64 + 100;  // 3 histories and change
  s.device_pool_bytes = 1 * MiB;
  s.max_seqs = 8;
  return make_memory_plan(s).value().host;
}

TEST(HostPool, PinsAndLaysOutRowsBySegment) {
  const HostPoolPlan plan = small_plan();
  EXPECT_EQ(plan.histories, 3u);
  EXPECT_EQ(plan.concurrency, 3u);
  Result<HostPool> pool = HostPool::create(plan);
  if (!pool.ok() && geteuid() != 0) GTEST_SKIP() << pool.error().describe();
  ASSERT_TRUE(pool.ok()) << pool.error().describe();
  EXPECT_EQ(pool->size_bytes(), 3u * 4 * 256 * 64);
  // Row (h, l, t) is at (h × L + l) × segment + t × row.
  for (std::uint32_t h = 0; h < 3; ++h) {
    for (std::uint32_t l = 0; l < 4; ++l) {
      auto row = pool->row(h, l, 17);
      EXPECT_EQ(row.data() - pool->data(), static_cast<std::ptrdiff_t>((h * 4 + l) * 256 * 64 + 17 * 64));
      std::memset(row.data(), static_cast<int>(h * 4 + l), row.size());
    }
  }
  EXPECT_EQ(static_cast<int>(pool->segment(2, 3)[17 * 64]), 11);
}

TEST(PinnedMemory, AnInjectedMemlockLimitIsRefusedByName) {
  PinOptions options;
  options.memlock_limit_bytes_override = 64 * KiB;
  const auto region = PinnedRegion::map(16 * MiB, "--host-pool", options);
  ASSERT_FALSE(region.ok());
  const Error& e = region.error();
  EXPECT_EQ(e.setting, "--host-pool");
  EXPECT_NE(e.message.find("RLIMIT_MEMLOCK"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("64 KiB"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("ulimit -l"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("LimitMEMLOCK"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("never used instead"), std::string::npos) << e.message;
}

// A real lowered limit, in a child: an unprivileged process cannot pin past RLIMIT_MEMLOCK.
// Root ignores the limit (CAP_IPC_LOCK), so there the child drops to nobody first where it can.
TEST(PinnedMemory, ALoweredProcessLimitIsRefusedInAChild) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) _exit(3);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(4);
    const auto region = PinnedRegion::map(16 * MiB, "--host-pool");
    if (region.ok()) _exit(1);
    if (region.error().message.find("RLIMIT_MEMLOCK") == std::string::npos) _exit(2);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 4) GTEST_SKIP() << "cannot drop root privileges here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: pinned past the limit; 2: the error does not name RLIMIT_MEMLOCK";
}

}  // namespace
}  // namespace activekv
