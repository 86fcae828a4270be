// assert.hpp — the three tiers of assertion, and what a failed one does.
//
// A programming error aborts with a message that names the broken part; an
// operating condition (a pool is full, a file is malformed) is a returned
// Result, never an assertion. Tiers, as in mimalloc:
//   AK_ASSERT            always on, release included: cheap checks at entry and exit.
//   AK_DEBUG_ASSERT      on unless NDEBUG.
//   AK_EXPENSIVE_ASSERT  only with ACTIVEKV_EXPENSIVE_ASSERTS (the debug and asan presets):
//                        whole-structure walkers such as validate().
// Split compound conditions so a failure names the one that broke.
#pragma once

namespace activekv {

[[noreturn]] void assert_fail(const char* expression, const char* message, const char* file, int line) noexcept;

}  // namespace activekv

#define AK_ASSERT(cond, message)                                                   \
  do {                                                                             \
    if (!(cond)) [[unlikely]] ::activekv::assert_fail(#cond, message, __FILE__, __LINE__); \
  } while (0)

#ifdef NDEBUG
#define AK_DEBUG_ASSERT(cond, message) \
  do {                                 \
  } while (0)
#else
#define AK_DEBUG_ASSERT(cond, message) AK_ASSERT(cond, message)
#endif

#ifdef ACTIVEKV_EXPENSIVE_ASSERTS
#define AK_EXPENSIVE_ASSERT(cond, message) AK_ASSERT(cond, message)
inline constexpr bool ak_expensive_asserts = true;
#else
#define AK_EXPENSIVE_ASSERT(cond, message) \
  do {                                     \
  } while (0)
inline constexpr bool ak_expensive_asserts = false;
#endif
