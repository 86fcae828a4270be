// retained_histories.hpp — the bound on retained histories (docs/PREFIX.md), one number shared by
// the run configuration (retained_histories) and `activekv plan --retained-histories`.
//
// Invariant: both accept 0 to retained_histories_max and name this bound, in the same words, when
// they refuse a value past it.
#pragma once

#include <cstdint>

namespace activekv::serve {

// Each retained history is a whole host history (max_context × row bytes × dense layers) that never
// runs a context.
inline constexpr std::uint32_t retained_histories_max = 1024;
inline constexpr const char* retained_histories_why =
    "each retained history is a whole host history (max_context × row bytes × dense layers)";

}  // namespace activekv::serve
