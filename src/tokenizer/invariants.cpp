// invariants.cpp — see invariants.hpp.
#include "tokenizer/invariants.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/spm.hpp"
#include "tokenizer/stream_decoder.hpp"

namespace activekv::tokenizer {
namespace {

Error broken(const std::string& what) { return make_error(ErrorCode::malformed, "tokenizer", what); }

// Bytes as C-escaped text, cut at 160 characters, so a fuzzer's report shows them.
std::string escaped(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes.substr(0, 160)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F && u != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

const char* mode_name(Special s) {
  switch (s) {
    case Special::allow: return "special tokens allowed";
    case Special::plain: return "plain";
    case Special::user_defined: return "user-defined only";
  }
  return "?";
}

bool is_special(const Tokenizer& t, TokenId id) {
  const TokenType type = t.token_type(id);
  return type == TokenType::control || type == TokenType::user_defined;
}

// What a unit gives back when it falls back byte by byte: each byte's fallback
// token (a byte token, or the unknown token), nothing for a byte without one.
std::string fallback_bytes(const Tokenizer& t, std::string_view unit) {
  std::string out;
  for (const char c : unit) {
    if (const std::optional<TokenId> id = t.byte_fallback(static_cast<unsigned char>(c))) t.decode_token(*id, false, out);
  }
  return out;
}

// Checks that `ids`, the encoding of one stretch (text between matched special
// tokens), give back its bytes. The stretch is cut into the units encoding
// starts from — SentencePiece: the symbols of the escaped stretch (space prefix,
// spaces as "▁"); BPE: bytes — and each unit must come back either as itself
// (through a token; "▁" as a space) or through its byte fallback. Which of the
// two a tokenless unit takes depends on its neighbours (a merge can take it into
// a token), so the check follows every way at once: the set of offsets in the
// ids' bytes each prefix of units can reach.
Status check_stretch(const Tokenizer& t, std::string_view stretch, const std::vector<TokenId>& ids, Special mode) {
  const bool spm = t.kind() == VocabKind::spm;
  std::string got;
  for (const TokenId id : ids) t.decode_token(id, false, got);
  std::string text;
  if (spm && !stretch.empty()) {
    if (t.add_space_prefix()) text.append(kSpmSpace);
    for (const char c : stretch) {
      if (c == ' ') {
        text.append(kSpmSpace);
      } else {
        text.push_back(c);
      }
    }
  } else {
    text.assign(stretch);
  }
  std::vector<std::size_t> reach{0};
  std::vector<std::size_t> next;
  std::string expected;  // the units as themselves, for the report
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = spm ? std::min<std::size_t>(lead_length(static_cast<unsigned char>(text[at])), text.size() - at) : 1;
    const std::string_view unit = std::string_view(text).substr(at, length);
    const std::string_view itself = spm && unit == kSpmSpace ? std::string_view(" ") : unit;
    const std::string fallback = fallback_bytes(t, unit);
    expected.append(itself);
    next.clear();
    for (const std::size_t j : reach) {
      if (got.compare(j, itself.size(), itself) == 0) next.push_back(j + itself.size());
      if (got.compare(j, fallback.size(), fallback) == 0) next.push_back(j + fallback.size());
    }
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    reach.swap(next);
    if (reach.empty()) break;
    at += length;
  }
  if (std::find(reach.begin(), reach.end(), got.size()) == reach.end()) {
    return broken(std::string("the ids' bytes are not the input's (") + mode_name(mode) + "): expected \"" +
                  escaped(expected) + "\" (each unit as itself or through its byte fallback), got \"" + escaped(got) + "\"");
  }
  return {};
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

}  // namespace

Status check_round_trip(const Tokenizer& t, std::string_view bytes) {
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  std::vector<TokenId> again;
  std::vector<TokenId> composed;  // each stretch encoded alone, then the special token that ends it
  std::vector<TokenId> stretch_ids;
  const std::vector<TokenId> specials = special_tokens(t);
  for (const Special special : {Special::allow, Special::plain, Special::user_defined}) {
    ids.clear();
    t.encode(bytes, special, scratch, ids);
    for (const TokenId id : ids) {
      if (!t.valid(id)) return broken("id " + std::to_string(id) + " is outside the vocabulary");
    }
    // The text splits at the special tokens the mode matches (leftmost, longest);
    // each stretch between them encodes on its own, and its ids give back its bytes.
    composed.clear();
    std::size_t start = 0;
    for (std::size_t at = 0; at <= bytes.size();) {
      const TokenId id = at < bytes.size() ? special_match(t, specials, bytes, at, special) : -1;
      if (id < 0 && at < bytes.size()) {
        ++at;
        continue;
      }
      const std::string_view stretch = bytes.substr(start, at - start);
      stretch_ids.clear();
      t.encode(stretch, special, scratch, stretch_ids);
      if (Status s = check_stretch(t, stretch, stretch_ids, special); !s) return s;
      composed.insert(composed.end(), stretch_ids.begin(), stretch_ids.end());
      if (id < 0) break;
      composed.push_back(id);
      at += t.token_text(id).size();
      start = at;
    }
    if (composed != ids) {
      return broken(std::string("the text did not split at its special tokens (") + mode_name(special) + ")");
    }
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
