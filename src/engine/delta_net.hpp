// delta_net.hpp — the Gated DeltaNet's per-token update of one head's state, the kernel the
// recurrent layers (delta_net.cpp) and the cost measurement (delta_net_bench.cpp) share.
//
// m is one value head's state, S × S fp32, row j for value element j, column i for key element i.
// One token: m = decay · m;  m_j += β (v_j − m_j·k) k;  o_j = m_j·q  (q already × 1/√S), computed as
// d = β (v_j − decay (m_j·k)), m_j = decay m_j + d k: one read pass and one write pass per row.
// The sums over i run in a fixed order (8 lanes, added in order), row by row: the bits depend on
// the inputs alone.
#pragma once

#include <cstdint>

namespace activekv::engine {

void delta_rule_token(float* m, const float* q, const float* k, const float* v, float decay, float beta, float* o,
                      std::uint32_t S) noexcept;

// The same rule in the baseline instruction set only: delta_rule_token takes an AVX2 copy where the
// processor has it, and the two give the same bits (no fused multiply-add in either); the tests
// compare them.
void delta_rule_token_baseline(float* m, const float* q, const float* k, const float* v, float decay, float beta,
                               float* o, std::uint32_t S) noexcept;

}  // namespace activekv::engine
