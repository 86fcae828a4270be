// invariants.cpp — see invariants.hpp.
#include "tokenizer/invariants.hpp"

#include "tokenizer/stream_decoder.hpp"

namespace activekv::tokenizer {
namespace {

Error broken(const std::string& what) { return make_error(ErrorCode::malformed, "tokenizer", what); }

// What the ids' bytes must be: the input, each tokenless byte replaced by the
// unknown token's bytes (or removed when there is no unknown token). Special-token
// text matched as a control token stands for itself, so it needs no adjustment.
std::string expected_bytes(const Tokenizer& t, std::string_view bytes) {
  if (t.bytes_without_token() == 0) return std::string(bytes);
  std::string out;
  for (const char c : bytes) {
    const std::vector<TokenId> one = t.encode(std::string_view(&c, 1), Special::plain);
    for (const TokenId id : one) out.append(t.token_bytes(id));
  }
  return out;
}

}  // namespace

Status check_round_trip(const Tokenizer& t, std::string_view bytes) {
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  std::vector<TokenId> again;
  const std::string expected = expected_bytes(t, bytes);
  for (const Special special : {Special::allow, Special::plain}) {
    ids.clear();
    t.encode(bytes, special, scratch, ids);
    std::string back;
    for (const TokenId id : ids) {
      if (!t.valid(id)) return broken("id " + std::to_string(id) + " is outside the vocabulary");
      t.decode_token(id, false, back);
    }
    if (back != expected) return broken("the ids' bytes are not the input's");
    again.clear();
    t.encode(bytes, special, scratch, again);
    if (again != ids) return broken("encoding the same text twice gave different ids");
    StreamDecoder stream(t, false);
    std::string streamed;
    for (const TokenId id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != t.decode(ids)) return broken("streaming decode differs from the whole decode");
  }
  return {};
}

}  // namespace activekv::tokenizer
