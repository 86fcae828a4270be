// stream_decoder.cpp — hold back incomplete characters (see stream_decoder.hpp).
#include "tokenizer/stream_decoder.hpp"

#include "tokenizer/unicode_class.hpp"

namespace activekv::tokenizer {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {
  const std::size_t most = tokenizer.max_token_bytes() + sizeof pending_;
  input_.reserve(most);
  output_.reserve(most * kReplacement.size());
}

std::string_view StreamDecoder::push(TokenId id) {
  input_.assign(pending_, pending_bytes_);
  pending_bytes_ = 0;
  tokenizer_->decode_token(id, skip_special_, input_);
  AK_ASSERT(input_.size() <= input_.capacity(), "StreamDecoder::push: a token longer than the longest token");
  output_.clear();
  for (std::size_t at = 0; at < input_.size();) {
    char32_t c = 0;
    const std::size_t n = decode_utf8(input_, at, c);
    const bool is_replacement = c == kReplacementCharacter && input_.compare(at, n, kReplacement) != 0;
    if (!is_replacement) {
      output_.append(input_, at, n);
    } else if (at + n == input_.size() && n < utf8_sequence_length(static_cast<unsigned char>(input_[at]))) {
      // A well-formed start of a character that the next token may finish.
      input_.copy(pending_, n, at);
      pending_bytes_ = n;
    } else {
      output_.append(kReplacement);
    }
    at += n;
  }
  return output_;
}

std::string_view StreamDecoder::finish() {
  output_.clear();
  if (pending_bytes_ != 0) output_.append(kReplacement);
  pending_bytes_ = 0;
  return output_;
}

}  // namespace activekv::tokenizer
