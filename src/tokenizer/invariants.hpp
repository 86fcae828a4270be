// invariants.hpp — the tokenizer's promises, checked on one input (tests and fuzzers).
//
// check_round_trip(tokenizer, bytes) encodes `bytes` every way (special tokens
// allowed, plain, user-defined only) and checks what tokenizer.hpp promises:
//   - every id is inside the vocabulary;
//   - the ids' bytes are the input, when every byte has a token
//     (bytes_without_token() == 0) — otherwise, the input with each tokenless
//     byte replaced by the unknown token's bytes, or removed, except inside the
//     special tokens the mode matches: those stand for their own text, whether or
//     not their bytes have tokens (a control token " " in a vocabulary with no
//     space token: "a b" gives back "a b" with specials allowed, "ab" plain);
//   - SentencePiece: the same, with "▁" read as the space it stands for on both
//     sides, and the space prefix each stretch gets (at the start and after
//     each special token) taken off the ids' bytes;
//   - streaming decode, token by token, equals the whole decode;
//   - encoding the same text again gives the same ids (no state leaks through
//     the scratch).
// It returns the first broken promise as an Error (code malformed, setting
// "tokenizer") so a fuzz target can abort on it; it never crashes on any input.
#pragma once

#include <string_view>

#include "activekv/result.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {

Status check_round_trip(const Tokenizer& tokenizer, std::string_view bytes);

}  // namespace activekv::tokenizer
