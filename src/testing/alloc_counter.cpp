// alloc_counter.cpp — the replaced global operator new that counts allocations.
#include "testing/alloc_counter.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<std::uint64_t> g_allocations_outside_io{0};
thread_local bool t_io_thread = false;  // constant-initialized: no allocation, no guard

void* counted_alloc(std::size_t size, std::size_t alignment) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (!t_io_thread) g_allocations_outside_io.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else {
    const std::size_t rounded = (size + alignment - 1) / alignment * alignment;
    p = std::aligned_alloc(alignment, rounded);
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

namespace activekv::testing {
std::uint64_t heap_allocations() noexcept { return g_allocations.load(std::memory_order_relaxed); }
bool heap_counter_linked() noexcept { return true; }
void mark_io_thread() noexcept { t_io_thread = true; }
std::uint64_t heap_allocations_outside_io() noexcept { return g_allocations_outside_io.load(std::memory_order_relaxed); }
}  // namespace activekv::testing

void* operator new(std::size_t size) { return counted_alloc(size, alignof(std::max_align_t)); }
void* operator new[](std::size_t size) { return counted_alloc(size, alignof(std::max_align_t)); }
void* operator new(std::size_t size, std::align_val_t al) { return counted_alloc(size, static_cast<std::size_t>(al)); }
void* operator new[](std::size_t size, std::align_val_t al) { return counted_alloc(size, static_cast<std::size_t>(al)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try { return counted_alloc(size, alignof(std::max_align_t)); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try { return counted_alloc(size, alignof(std::max_align_t)); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
