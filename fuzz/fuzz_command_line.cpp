// fuzz_command_line.cpp — what the command line reaches: sizes, counts and the memory plan.
//
// The input is split at newlines into option values. The first few feed
// parse_size and parse_count (`--host-pool 12GiB`, `--tiles 4`); every
// accepted size is printed back with format_bytes and must not exceed what was
// parsed. The rest of the bytes become MemorySettings — geometry, pools, page
// and tile sizes, concurrency, chunk — exactly what `activekv plan` builds
// from its options, and make_memory_plan must either refuse them with an error
// naming a setting or return a plan whose parts fit the pools. Never a crash,
// an overflow the sanitizers see, or a plan larger than its pool.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"

namespace {

struct Reader {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;
  std::uint64_t take(unsigned bytes) {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v = (v << 8) | (at < size ? data[at++] : 0u);
    return v;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace activekv;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::size_t begin = 0;
  for (int field = 0; field < 4 && begin <= text.size(); ++field) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view value = text.substr(begin, end - begin);
    auto bytes = parse_size(value, "--host-pool", field % 2 == 0);
    if (bytes.ok()) {
      (void)format_bytes(*bytes);
    } else if (bytes.error().setting != "--host-pool") {
      std::abort();  // a refusal names the option it came from
    }
    auto count = parse_count(value, "--tiles");
    if (!count.ok() && count.error().setting != "--tiles") std::abort();
    begin = end + 1;
  }

  Reader r{data, size};
  MemorySettings s;
  s.geometry.dense_layers = static_cast<std::uint32_t>(r.take(1));
  s.geometry.recurrent_layers = static_cast<std::uint32_t>(r.take(1) % 4);
  s.geometry.kv_heads = static_cast<std::uint32_t>(r.take(1));
  s.geometry.head_dim = static_cast<std::uint32_t>(r.take(2));
  s.geometry.dtype = (r.take(1) & 1) != 0 ? DType::f16 : DType::bf16;
  s.geometry.recurrent_state_bytes = r.take(2);
  s.host_pool_bytes = r.take(5);
  s.device_pool_bytes = r.take(5);
  s.page_tokens = static_cast<std::uint32_t>(r.take(2));
  s.tile_tokens = static_cast<std::uint32_t>(r.take(2));
  s.tiles = static_cast<std::uint32_t>(r.take(1));
  s.max_context_tokens = static_cast<std::uint32_t>(r.take(3));
  s.max_seqs = static_cast<std::uint32_t>(r.take(2));
  s.chunk_tokens = static_cast<std::uint32_t>(r.take(2));
  auto plan = make_memory_plan(s);
  if (!plan.ok()) {
    if (plan.error().setting.empty()) std::abort();  // every refusal names the setting to change
    return 0;
  }
  if (plan->budget.concurrency == 0) std::abort();
  if (plan->host.used_bytes > s.host_pool_bytes) std::abort();  // the histories fit the host pool
  const ArenaPart& pool = plan->arena.page_pool;
  if (pool.offset_bytes + pool.size_bytes > s.device_pool_bytes) std::abort();  // the page pool fits the arena
  return 0;
}
