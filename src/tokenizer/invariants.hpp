// invariants.hpp — the tokenizer's promises, checked on one input (tests and fuzzers).
//
// check_round_trip(tokenizer, bytes) encodes `bytes` every way (special tokens
// allowed, plain, user-defined only) and checks what tokenizer.hpp promises:
//   - every id is inside the vocabulary;
//   - the text splits at the special tokens the mode matches (leftmost,
//     longest): the ids are each stretch between them encoded alone, each
//     followed by the special token that ends it;
//   - a stretch's ids give back its bytes: cut into the units encoding starts
//     from (SentencePiece: the symbols of the escaped stretch, with its space
//     prefix and spaces as "▁"; BPE: bytes), each unit comes back as itself
//     (through a token; "▁" as a space) or through its byte fallback (its bytes'
//     byte tokens, the unknown token, or nothing) — itself always when every
//     byte has a token and the unit is not "▁";
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
