// invariants.cpp — see invariants.hpp.
#include "tokenizer/invariants.hpp"

#include <algorithm>

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

// What the ids' bytes must be for text that encodes without special tokens: the
// input, each tokenless byte replaced by the unknown token's bytes (or removed
// when there is no unknown token).
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

// The control and user-defined tokens encode() may match, longest text first
// (tokenizer.hpp: leftmost-longest, whole strings).
std::vector<TokenId> special_tokens(const Tokenizer& t) {
  std::vector<TokenId> out;
  for (TokenId id = 0; id < t.vocab_size(); ++id) {
    if (is_special(t, id) && !t.token_text(id).empty()) out.push_back(id);
  }
  std::stable_sort(out.begin(), out.end(),
                   [&t](TokenId a, TokenId b) { return t.token_text(a).size() > t.token_text(b).size(); });
  return out;
}

// The longest special token `special` lets encode() match at bytes[at], or -1.
TokenId special_match(const Tokenizer& t, const std::vector<TokenId>& specials, std::string_view bytes,
                      std::size_t at, Special special) {
  if (special == Special::plain) return -1;
  for (const TokenId id : specials) {
    if (special == Special::user_defined && t.token_type(id) != TokenType::user_defined) continue;
    if (bytes.substr(at).starts_with(t.token_text(id))) return id;
  }
  return -1;
}

// What the ids' bytes must be when encoding with `special` (both sides later read
// with spm_input): each special token matched in the input stands for its own text,
// even where its bytes have no single-byte tokens (a control token " " in a
// vocabulary without a space token keeps the space that plain encoding drops), and
// the stretches between them follow expected_bytes.
std::string expected_for(const Tokenizer& t, const std::vector<TokenId>& specials, std::string_view bytes,
                         Special special) {
  std::string out;
  std::size_t start = 0;  // start of the stretch not yet matched
  for (std::size_t at = 0; at < bytes.size();) {
    const TokenId id = special_match(t, specials, bytes, at, special);
    if (id < 0) {
      ++at;
      continue;
    }
    out.append(expected_bytes(t, spm_input(t, bytes.substr(start, at - start))));
    out.append(t.token_text(id));
    at += t.token_text(id).size();
    start = at;
  }
  out.append(expected_bytes(t, spm_input(t, bytes.substr(start))));
  return spm_input(t, out);
}

}  // namespace

Status check_round_trip(const Tokenizer& t, std::string_view bytes) {
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  std::vector<TokenId> again;
  const std::vector<TokenId> specials = special_tokens(t);
  for (const Special special : {Special::allow, Special::plain, Special::user_defined}) {
    const std::string expected = expected_for(t, specials, bytes, special);
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
