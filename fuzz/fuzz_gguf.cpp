// fuzz_gguf.cpp — the GGUF reader on arbitrary bytes.
//
// gguf::walk parses the bytes and, when they parse, walks every metadata value
// and every tensor's byte range. The reader's promise: any input is either
// refused with an error or yields a File whose every offset lies inside the
// bytes — never a crash, an out-of-bounds read (ASan) or undefined behaviour
// (UBSan).
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)activekv::gguf::walk(data, size);
  return 0;
}
