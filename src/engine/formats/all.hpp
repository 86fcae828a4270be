// formats/all.hpp — the one table of weight formats on the 16-bit-activation
// path: q16_format_of(type, fn) calls fn(Format{}) for the format that reads
// `type` and returns true, or returns false where the path does not read it
// (F32, F16 and BF16 take the fp32 path, matmul.hpp). A new format is one
// file in this folder and one line here.
#pragma once

#include "engine/formats/q2_k.hpp"
#include "engine/formats/q3_k.hpp"
#include "engine/formats/q4_0.hpp"
#include "engine/formats/q4_1.hpp"
#include "engine/formats/q4_k.hpp"
#include "engine/formats/q5_0.hpp"
#include "engine/formats/q6_k.hpp"
#include "engine/formats/q8_0.hpp"

namespace activekv::engine::formats {
namespace {

// A format with a minimum per 16-element group (Q2_K): a second integer product per block, Σ m × q_x, with
// factor mw (formats/q2_k.hpp).
template <class F>
concept GroupMins = requires(const std::uint8_t* row, std::size_t k, int* m) { F::group_mins(row, k, m); };

template <class Fn>
static inline bool q16_format_of(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::q4_0: fn(Q4_0{}); return true;
    case GgmlType::q4_1: fn(Q4_1{}); return true;
    case GgmlType::q5_0: fn(Q5_0{}); return true;
    case GgmlType::q5_1: fn(Q5_1{}); return true;
    case GgmlType::q8_0: fn(Q8_0{}); return true;
    case GgmlType::q2_k: fn(Q2_K{}); return true;
    case GgmlType::q3_k: fn(Q3_K{}); return true;
    case GgmlType::q4_k: fn(Q4_K{}); return true;
    case GgmlType::q5_k: fn(Q5_K{}); return true;
    case GgmlType::q6_k: fn(Q6_K{}); return true;
    default: return false;  // the enum lists every type a file may name; the rest are not on this path
  }
}

// The legacy formats on the 8-bit-activation path (matmul_q8_0.hpp): q8_0_format_of(type, fn) calls fn(Format{})
// for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 and returns true, or returns false.
template <class Fn>
static inline bool q8_0_format_of(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::q4_0: fn(Q4_0{}); return true;
    case GgmlType::q4_1: fn(Q4_1{}); return true;
    case GgmlType::q5_0: fn(Q5_0{}); return true;
    case GgmlType::q5_1: fn(Q5_1{}); return true;
    case GgmlType::q8_0: fn(Q8_0{}); return true;
    default: return false;  // K-quants take matmul_q8.hpp's 256-value blocks; the rest are not on this path
  }
}

}  // namespace
}  // namespace activekv::engine::formats
