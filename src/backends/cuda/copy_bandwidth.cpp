// copy_bandwidth.cpp — h2d/d2h bandwidth of the CUDA backend's copies, against the link's peak.
//
//   cuda_copy_bandwidth [peak_GBps] [repeats]
//
// Through the Backend interface (pinned pool, non-blocking streams, one fence
// per call, batched copies where the runtime has cudaMemcpyBatchAsync):
//   large    one 256 MiB region per call
//   batched  4096 regions of 48 KiB (192 MiB) in one call
//   single   the same 4096 × 48 KiB, one call per region (what batching saves)
// Each figure is the median of `repeats` runs, timed from the first enqueue to
// the fence resolving on the host. peak_GBps is the link's peak per direction
// (default 64: PCIe 5.0 x16 as on an H200 SXM host link); the program prints
// each figure as a share of it. Prints one line per measurement, then JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "activekv/backend.hpp"
#include "activekv/size.hpp"

namespace {

using activekv::CopyDirection;
using activekv::CopyRegion;
using activekv::Fence;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double peak_gbps = argc > 1 ? std::atof(argv[1]) : 64.0;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 9;
  auto made = activekv::make_backend("cuda", activekv::BackendOptions{});
  if (!made) {
    std::fprintf(stderr, "cuda_copy_bandwidth: %s\n", made.error().describe().c_str());
    return 2;
  }
  activekv::Backend& backend = **made;
  constexpr std::uint64_t kLarge = 256 * activekv::MiB;
  constexpr std::uint64_t kSmall = 48 * activekv::KiB;
  constexpr std::uint32_t kRegions = 4096;
  activekv::MemoryRequest request;
  request.arena_bytes = kLarge;
  request.host_pool_bytes = kLarge;
  request.batch_queries_max = 16;
  request.batch_pages_max = 1024;
  request.copy_regions_max = kRegions;
  if (auto s = backend.allocate(request); !s.ok()) {
    std::fprintf(stderr, "cuda_copy_bandwidth: %s\n", s.error().describe().c_str());
    return 2;
  }
  std::printf("# %s\n# peak per direction: %.1f GB/s; median of %d runs\n", backend.describe().c_str(), peak_gbps, repeats);

  std::vector<CopyRegion> small(kRegions);
  for (std::uint32_t i = 0; i < kRegions; ++i) small[i] = {i * kSmall, (kRegions - 1 - i) * kSmall, kSmall};
  const CopyRegion large{0, 0, kLarge};

  std::string json = "{";
  auto measure = [&](const char* label, CopyDirection direction, bool batched, bool one_large) {
    std::vector<double> seconds;
    std::uint64_t bytes = 0;
    for (int r = 0; r < repeats + 1; ++r) {
      const auto start = std::chrono::steady_clock::now();
      Fence last{};
      bytes = 0;
      if (one_large) {
        last = backend.copy(direction, std::span(&large, 1)).value();
        bytes = kLarge;
      } else if (batched) {
        last = backend.copy(direction, small).value();
        bytes = kSmall * kRegions;
      } else {
        for (const CopyRegion& region : small) {
          if (last.recorded()) backend.release_fence(last);
          last = backend.copy(direction, std::span(&region, 1)).value();
          bytes += region.bytes;
        }
      }
      const auto outcome = backend.wait_host(last, std::chrono::seconds(60));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      backend.release_fence(last);
      if (!outcome.ok() || outcome.value() != activekv::FenceOutcome::signalled) {
        std::fprintf(stderr, "cuda_copy_bandwidth: %s did not signal\n", label);
        std::exit(3);
      }
      if (r > 0) seconds.push_back(s);  // the first run warms up
    }
    const double gbps = static_cast<double>(bytes) / median(seconds) / 1e9;
    std::printf("%-14s %-4s %8.2f GB/s  %5.1f%% of peak  (%s per call)\n", label, activekv::copy_direction_name(direction),
                gbps, 100.0 * gbps / peak_gbps, activekv::format_bytes(bytes).c_str());
    json += fmt::format("{}\"{}_{}\": {:.3f}", json.size() > 1 ? ", " : "", label, activekv::copy_direction_name(direction), gbps);
  };
  for (CopyDirection direction : {CopyDirection::h2d, CopyDirection::d2h}) {
    measure("large_256MiB", direction, false, true);
    measure("batched_48KiB", direction, true, false);
    measure("single_48KiB", direction, false, false);
  }
  json += fmt::format(", \"peak_gbps\": {:.1f}}}", peak_gbps);
  std::printf("%s\n", json.c_str());
  return 0;
}
