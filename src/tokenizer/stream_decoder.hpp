// stream_decoder.hpp — turns generated tokens into printable text as they arrive.
//
// One token may end in the middle of a UTF-8 character (byte-level BPE splits
// CJK and emoji across tokens), so printing each token's bytes at once would
// print broken characters. The stream decoder holds back the bytes of a
// character that is still incomplete (at most 3) and releases them when the
// token that completes it arrives; bytes that can never form a character become
// U+FFFD, one per maximal subpart, exactly as the whole-sequence decode does. The
// concatenation of everything push() and finish() return therefore equals
// Tokenizer::decode(all ids).
//
// It allocates only at construction: its output buffer is sized for the
// longest token, so decoding on the generation path allocates nothing.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);

  // The text that `id` completes; valid until the next call.
  std::string_view push(TokenId id);
  // The held-back bytes of an unfinished character, as U+FFFD; then starts afresh.
  std::string_view finish();
  void reset() noexcept { pending_bytes_ = 0; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  char pending_[4] = {};
  std::size_t pending_bytes_ = 0;
  std::string input_;   // pending bytes + the token's bytes
  std::string output_;  // reserved for the worst case: every byte a U+FFFD
};

}  // namespace activekv::tokenizer
