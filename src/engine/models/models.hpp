// models.hpp — the layer builders, one file per architecture in this folder.
//
// Each builder is one decoder layer written with the shared blocks
// (blocks.hpp): norms, projections, RoPE, attention through the KV, the FFN.
// arch.cpp maps each `general.architecture` name to its builder.
#pragma once

#include "engine/arch.hpp"

namespace activekv::engine::models {

Status llama_layer(Blocks& b, std::uint32_t layer);   // llama.cpp: also Mistral-style files
Status qwen2_layer(Blocks& b, std::uint32_t layer);   // qwen2.cpp
Status qwen3_layer(Blocks& b, std::uint32_t layer);   // qwen3.cpp
Status gemma3_layer(Blocks& b, std::uint32_t layer);  // gemma3.cpp
Status qwen35_layer(Blocks& b, std::uint32_t layer);  // qwen35.cpp: Gated DeltaNet or gated attention

}  // namespace activekv::engine::models
