// invariants.cpp — see invariants.hpp.
#include "tokenizer/invariants.hpp"

#include "tokenizer/stream_decoder.hpp"

namespace activekv::tokenizer {
namespace {

Error broken(const std::string& what) { return make_error(ErrorCode::malformed, "tokenizer", what); }

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

bool is_special(const Tokenizer& t, TokenId id) {
  const TokenType type = t.token_type(id);
  return type == TokenType::control || type == TokenType::user_defined;
}

// The ids' bytes, with the space prefix of each SentencePiece stretch taken off.
std::string ids_bytes(const Tokenizer& t, const std::vector<TokenId>& ids) {
  const bool strip = t.kind() == VocabKind::spm && t.add_space_prefix();
  std::string back;
  bool stretch_start = true;
  for (const TokenId id : ids) {
    const std::size_t at = back.size();
    t.decode_token(id, false, back);
    if (is_special(t, id) && back.compare(at, std::string::npos, t.token_text(id)) == 0) {
      stretch_start = true;
      continue;
    }
    if (strip && stretch_start && back.size() > at && back[at] == ' ') back.erase(at, 1);
    stretch_start = false;
  }
  return back;
}

// What the ids' bytes must be: the input, each tokenless byte replaced by the
// unknown token's bytes (or removed when there is no unknown token). Special-token
// text matched as a control token stands for itself, so it needs no adjustment.
std::string expected_bytes(const Tokenizer& t, std::string_view bytes) {
  if (t.bytes_without_token() == 0) return std::string(bytes);
  std::string out;
  for (const char c : bytes) {
    const std::vector<TokenId> one = t.encode(std::string_view(&c, 1), Special::plain);
    out.append(ids_bytes(t, one));
  }
  return out;
}

// SentencePiece reads "▁" in the input as a space, and a byte fallback after a
// stray lead byte can give a space back as the bytes of "▁" (llama.cpp cuts
// symbols by lead byte): both sides are compared with "▁" read as a space.
std::string spm_input(const Tokenizer& t, std::string_view bytes) {
  std::string out(bytes);
  if (t.kind() != VocabKind::spm) return out;
  for (std::size_t at = out.find(kSpmSpace); at != std::string::npos; at = out.find(kSpmSpace, at + 1)) {
    out.replace(at, kSpmSpace.size(), " ");
  }
  return out;
}

}  // namespace

Status check_round_trip(const Tokenizer& t, std::string_view bytes) {
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  std::vector<TokenId> again;
  const std::string expected = expected_bytes(t, spm_input(t, bytes));
  for (const Special special : {Special::allow, Special::plain, Special::user_defined}) {
    ids.clear();
    t.encode(bytes, special, scratch, ids);
    for (const TokenId id : ids) {
      if (!t.valid(id)) return broken("id " + std::to_string(id) + " is outside the vocabulary");
    }
    if (spm_input(t, ids_bytes(t, ids)) != expected) return broken("the ids' bytes are not the input's");
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
