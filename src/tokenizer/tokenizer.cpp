// tokenizer.cpp — loading the vocabulary from GGUF, encoding and decoding.
//
// Loading copies what it needs out of the file (the Tokenizer outlives the
// mapping if the caller wants) and checks the invariant of tokenizer.hpp; every
// refusal is an Error naming the metadata key and the offending entry.
#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/unicode_class.hpp"

namespace activekv::tokenizer {

namespace {

// One accepted tokenizer.ggml.pre value and what llama.cpp does for it.
struct PreTokenizerName {
  std::string_view name;
  PreTokenizerKind kind;
  bool ignore_merges;  // a piece that is a token is taken whole (Llama 3's tokenizer.json)
  bool add_bos;        // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

constexpr PreTokenizerName kPreTokenizerNames[] = {
    {"gpt-2", PreTokenizerKind::gpt2, false, false},
    {"gpt2", PreTokenizerKind::gpt2, false, false},
    {"phi-2", PreTokenizerKind::gpt2, false, false},
    {"mpt", PreTokenizerKind::gpt2, false, false},
    {"olmo", PreTokenizerKind::gpt2, false, false},
    {"smollm", PreTokenizerKind::smollm, false, false},
    {"starcoder", PreTokenizerKind::smollm, false, false},
    {"refact", PreTokenizerKind::smollm, false, false},
    {"command-r", PreTokenizerKind::smollm, false, false},
    {"llama-bpe", PreTokenizerKind::llama3, true, true},
    {"llama3", PreTokenizerKind::llama3, true, true},
    {"llama-v3", PreTokenizerKind::llama3, true, true},
    {"falcon3", PreTokenizerKind::llama3, true, true},
    {"dbrx", PreTokenizerKind::llama3, false, false},
    {"smaug-bpe", PreTokenizerKind::llama3, false, false},
    {"qwen2", PreTokenizerKind::qwen2, false, false},
    {"deepseek-r1-qwen", PreTokenizerKind::qwen2, false, false},
    {"stablelm2", PreTokenizerKind::qwen2, false, false},
    {"qwen35", PreTokenizerKind::qwen35, false, false},
};

constexpr std::string_view kPreTokenizerList =
    "gpt-2, gpt2, phi-2, mpt, olmo, smollm, starcoder, refact, command-r, llama-bpe, llama3, llama-v3, falcon3, "
    "dbrx, smaug-bpe, qwen2, deepseek-r1-qwen, stablelm2, qwen35";

std::string_view spm_text_of(const void* owner, std::int32_t id) {
  return static_cast<const Tokenizer*>(owner)->token_text(id);
}

}  // namespace

std::string_view pre_tokenizer_names() noexcept { return kPreTokenizerList; }

// Friend of Tokenizer: fills it from a gguf::File, one key at a time.
class Loader {
 public:
  Loader(const gguf::File& file, Tokenizer& t) : file_(file), t_(t) {}

  Status run() {
    if (Status s = model(); !s) return s;
    if (Status s = pre(); !s) return s;
    if (Status s = tokens(); !s) return s;
    if (Status s = types(); !s) return s;
    decode_bytes();
    if (Status s = special_ids(); !s) return s;
    t_.index_.build(t_.vocab_size(), [this](TokenId id) { return t_.token_text(id); });
    if (t_.kind_ == VocabKind::spm) {
      if (Status s = scores(); !s) return s;
      spm_byte_tokens();
      spm_joinable();
    } else {
      byte_tokens();
      if (Status s = merges(); !s) return s;
    }
    specials();
    return {};
  }

 private:
  Error fail(ErrorCode code, std::string_view key, const std::string& what) const {
    return make_error(code, file_.name(), "tokenizer metadata '" + std::string(key) + "': " + what);
  }

  Status model() {
    Result<std::string_view> model = file_.get_string("tokenizer.ggml.model");
    if (!model) return model.error();
    if (*model == "gpt2") {
      t_.kind_ = VocabKind::bpe;
    } else if (*model == "llama") {
      t_.kind_ = VocabKind::spm;
      t_.add_bos_ = true;           // llama.cpp's default for SentencePiece; the file may say otherwise
      t_.add_space_prefix_ = true;
    } else {
      return fail(ErrorCode::unsupported, "tokenizer.ggml.model",
                  "model '" + std::string(*model) +
                      "' is not supported; ActiveKV reads byte-level BPE ('gpt2') and SentencePiece ('llama')");
    }
    return {};
  }

  // tokenizer.ggml.pre names the pre-tokenizer; each accepted name is one that
  // llama.cpp maps to a pattern implemented here. Anything else — "default" and an
  // absent key included, for which llama.cpp falls back to a pattern not
  // implemented here — is refused by name.
  Status pre() {
    if (t_.kind_ == VocabKind::spm) return {};  // SentencePiece has no pre-tokenizer
    if (!file_.has("tokenizer.ggml.pre")) {
      return fail(ErrorCode::unsupported, "tokenizer.ggml.pre",
                  "is absent (llama.cpp then guesses its 'default' pre-tokenizer); ActiveKV does not guess: "
                  "supported values are " + std::string(pre_tokenizer_names()));
    }
    Result<std::string_view> pre = file_.get_string("tokenizer.ggml.pre");
    if (!pre) return pre.error();
    const PreTokenizerName* found = nullptr;
    for (const PreTokenizerName& entry : kPreTokenizerNames) {
      if (entry.name == *pre) found = &entry;
    }
    if (found == nullptr) {
      return fail(ErrorCode::unsupported, "tokenizer.ggml.pre",
                  "pre-tokenizer '" + std::string(*pre) + "' is not supported; supported values are " +
                      std::string(pre_tokenizer_names()));
    }
    t_.pre_ = found->kind;
    t_.pre_name_ = std::string(*pre);
    t_.ignore_merges_ = found->ignore_merges;
    t_.add_bos_ = found->add_bos;
    return {};
  }

  Status tokens() {
    Result<std::vector<std::string_view>> tokens = file_.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return tokens.error();
    if (tokens->empty() || tokens->size() > static_cast<std::size_t>(std::numeric_limits<TokenId>::max())) {
      return fail(ErrorCode::malformed, "tokenizer.ggml.tokens",
                  "has " + std::to_string(tokens->size()) + " tokens (1 to 2^31-1 allowed)");
    }
    std::size_t total = 0;
    for (const std::string_view text : *tokens) total += text.size();
    if (total > std::numeric_limits<std::uint32_t>::max()) {
      return fail(ErrorCode::malformed, "tokenizer.ggml.tokens", "token texts exceed 4 GiB");
    }
    t_.texts_.reserve(total);
    t_.offsets_.reserve(tokens->size() + 1);
    t_.offsets_.push_back(0);
    ids_.reserve(tokens->size());
    for (std::size_t i = 0; i < tokens->size(); ++i) {
      const std::string_view text = (*tokens)[i];
      t_.texts_.append(text);
      t_.offsets_.push_back(static_cast<std::uint32_t>(t_.texts_.size()));
      // A duplicate text keeps its first id for lookups (the vocabulary maps text -> id).
      ids_.emplace(text, static_cast<TokenId>(i));
    }
    t_.sorted_ids_.resize(tokens->size());
    for (std::size_t i = 0; i < tokens->size(); ++i) t_.sorted_ids_[i] = static_cast<TokenId>(i);
    std::stable_sort(t_.sorted_ids_.begin(), t_.sorted_ids_.end(),
                     [this](TokenId a, TokenId b) { return t_.token_text(a) < t_.token_text(b); });
    return {};
  }

  void decode_bytes() {
    const auto n = static_cast<TokenId>(t_.offsets_.size() - 1);
    t_.bytes_.reserve(t_.texts_.size());
    t_.byte_offsets_.reserve(t_.offsets_.size());
    t_.byte_offsets_.push_back(0);
    for (TokenId id = 0; id < n; ++id) {
      const std::string_view text = t_.token_text(id);
      if (t_.kind_ == VocabKind::spm) {
        decode_spm(text, t_.token_type(id) == TokenType::byte, t_.bytes_);
      } else if (!decode_byte_level(text, t_.bytes_)) {
        t_.bytes_.append(text);
      }
      t_.byte_offsets_.push_back(static_cast<std::uint32_t>(t_.bytes_.size()));
      t_.max_token_bytes_ = std::max<std::size_t>(t_.max_token_bytes_, t_.byte_offsets_.back() - t_.byte_offsets_[static_cast<std::size_t>(id)]);
    }
  }

  // SentencePiece text: a byte token "<0xNN>" is the byte NN, "▁" a space, the rest itself.
  static void decode_spm(std::string_view text, bool byte_token, std::string& out) {
    if (const int byte = byte_token ? spm_byte_value(text) : -1; byte >= 0) {
      out.push_back(static_cast<char>(byte));
      return;
    }
    for (std::size_t at = 0; at < text.size();) {
      if (text.compare(at, kSpmSpace.size(), kSpmSpace) == 0) {
        out.push_back(' ');
        at += kSpmSpace.size();
      } else {
        out.push_back(text[at++]);
      }
    }
  }

  // The byte a "<0xNN>" token text names (hex digits upper case, as SentencePiece writes them), or -1.
  static int spm_byte_value(std::string_view text) {
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
    int value = 0;
    for (const char c : text.substr(3, 2)) {
      const int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (digit < 0) return -1;
      value = value * 16 + digit;
    }
    return value;
  }

  Status scores() {
    Result<std::vector<float>> scores = file_.get_array<float>("tokenizer.ggml.scores");
    if (!scores) return scores.error();
    if (scores->size() != static_cast<std::size_t>(t_.vocab_size())) {
      return fail(ErrorCode::malformed, "tokenizer.ggml.scores",
                  "has " + std::to_string(scores->size()) + " entries for " + std::to_string(t_.vocab_size()) + " tokens");
    }
    for (std::size_t i = 0; i < scores->size(); ++i) {
      if (!std::isfinite((*scores)[i])) {
        return fail(ErrorCode::malformed, "tokenizer.ggml.scores", "token " + std::to_string(i) + " has a score that is not finite");
      }
    }
    t_.scores_ = std::move(*scores);
    // Byte tokens stand for a byte, not for their text: merging never forms them
    // (their bytes come only from fallback), so their merge score is -infinity.
    for (std::size_t i = 0; i < t_.scores_.size(); ++i) {
      if (t_.types_[i] == TokenType::byte) t_.scores_[i] = -std::numeric_limits<float>::infinity();
    }
    return {};
  }

  // Each byte's fallback token: "<0xNN>", else the one-byte text itself (as
  // llama.cpp looks it up), else the unknown token, else none (the byte is dropped).
  void spm_byte_tokens() {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned b = 0; b < 256; ++b) {
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const char raw = static_cast<char>(b);
      TokenId id = t_.find_text(std::string_view(name, 6));
      if (id < 0) id = t_.find_text(std::string_view(&raw, 1));
      if (id < 0) ++t_.bytes_without_token_;
      t_.byte_token_[b] = id >= 0 ? id : t_.unknown_.value_or(-1);
    }
  }

  void spm_joinable() {
    t_.joinable_.assign(65536 / 64, 0);
    for (TokenId id = 0; id < t_.vocab_size(); ++id) {
      const std::string_view text = t_.token_text(id);
      for (std::size_t i = 1; i < text.size(); ++i) {
        const std::size_t bit = std::size_t{static_cast<unsigned char>(text[i - 1])} * 256 + static_cast<unsigned char>(text[i]);
        t_.joinable_[bit / 64] |= std::uint64_t{1} << (bit % 64);
      }
    }
  }

  Status types() {
    const auto n = static_cast<std::size_t>(t_.vocab_size());
    if (!file_.has("tokenizer.ggml.token_type")) {
      t_.types_.assign(n, TokenType::normal);
      return {};
    }
    Result<std::vector<std::int32_t>> types = file_.get_array<std::int32_t>("tokenizer.ggml.token_type");
    if (!types) return types.error();
    if (types->size() != n) {
      return fail(ErrorCode::malformed, "tokenizer.ggml.token_type",
                  "has " + std::to_string(types->size()) + " entries for " + std::to_string(n) + " tokens");
    }
    t_.types_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int32_t type = (*types)[i];
      if (type < 0 || type > static_cast<std::int32_t>(TokenType::byte)) {
        return fail(ErrorCode::malformed, "tokenizer.ggml.token_type",
                    "token " + std::to_string(i) + " has unknown type " + std::to_string(type));
      }
      t_.types_.push_back(static_cast<TokenType>(type));
    }
    return {};
  }

  // A byte without a single-byte token (SmolLM2 has none for 21 bytes: six control
  // characters and the 15 bytes that never occur in UTF-8) encodes as the unknown
  // token when the file names one, and is dropped otherwise — what the reference
  // BPE does with and without an unk_token.
  void byte_tokens() {
    for (unsigned b = 0; b < 256; ++b) {
      std::string text;
      append_byte_level(static_cast<std::uint8_t>(b), text);
      const auto it = ids_.find(text);
      t_.byte_token_[b] = it != ids_.end() ? it->second : t_.unknown_.value_or(-1);
      if (it == ids_.end()) ++t_.bytes_without_token_;
    }
  }

  Status merges() {
    Result<std::vector<std::string_view>> merges = file_.get_string_array("tokenizer.ggml.merges");
    if (!merges) return merges.error();
    if (merges->size() > std::numeric_limits<std::uint32_t>::max()) {
      return fail(ErrorCode::malformed, "tokenizer.ggml.merges", "too many merges");
    }
    t_.merges_ = MergeTable(merges->size());
    std::string joined;
    for (std::size_t rank = 0; rank < merges->size(); ++rank) {
      const std::string_view line = (*merges)[rank];
      const std::size_t space = line.find(' ');
      if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string_view::npos) {
        return fail(ErrorCode::malformed, "tokenizer.ggml.merges",
                    "merge " + std::to_string(rank) + " ('" + std::string(line) + "') is not two tokens separated by one space");
      }
      const std::string_view left = line.substr(0, space);
      const std::string_view right = line.substr(space + 1);
      joined.assign(left).append(right);
      const auto l = ids_.find(left);
      const auto r = ids_.find(right);
      const auto m = ids_.find(joined);
      if (l == ids_.end() || r == ids_.end() || m == ids_.end()) {
        const std::string_view missing = l == ids_.end() ? left : r == ids_.end() ? right : std::string_view(joined);
        return fail(ErrorCode::malformed, "tokenizer.ggml.merges",
                    "merge " + std::to_string(rank) + " ('" + std::string(line) + "') names '" + std::string(missing) +
                        "', which is not in tokenizer.ggml.tokens");
      }
      t_.merges_.insert(l->second, r->second, MergeRule{static_cast<std::uint32_t>(rank), m->second});
    }
    return {};
  }

  Status optional_id(std::string_view key, std::optional<TokenId>& out) {
    if (!file_.has(key)) return {};
    Result<std::uint32_t> id = file_.get_u32(key);
    if (!id) return id.error();
    if (*id >= static_cast<std::uint32_t>(t_.vocab_size())) {
      return fail(ErrorCode::malformed, key,
                  "id " + std::to_string(*id) + " is not below the vocabulary size " + std::to_string(t_.vocab_size()));
    }
    out = static_cast<TokenId>(*id);
    return {};
  }

  Status special_ids() {
    if (Status s = optional_id("tokenizer.ggml.bos_token_id", t_.bos_); !s) return s;
    if (Status s = optional_id("tokenizer.ggml.eos_token_id", t_.eos_); !s) return s;
    if (Status s = optional_id("tokenizer.ggml.unknown_token_id", t_.unknown_); !s) return s;
    if (Status s = optional_id("tokenizer.ggml.padding_token_id", t_.padding_); !s) return s;
    if (file_.has("tokenizer.ggml.add_bos_token")) {
      Result<bool> add = file_.get_bool("tokenizer.ggml.add_bos_token");
      if (!add) return add.error();
      t_.add_bos_ = *add;
    }
    if (t_.kind_ == VocabKind::spm && file_.has("tokenizer.ggml.add_space_prefix")) {
      Result<bool> add = file_.get_bool("tokenizer.ggml.add_space_prefix");
      if (!add) return add.error();
      t_.add_space_prefix_ = *add;
    }
    return {};
  }

  void specials() {
    for (TokenId id = 0; id < t_.vocab_size(); ++id) {
      const TokenType type = t_.token_type(id);
      if ((type == TokenType::control || type == TokenType::user_defined) && !t_.token_text(id).empty()) {
        t_.specials_.push_back(id);
        if (type == TokenType::user_defined) t_.has_user_defined_ = true;
        t_.special_first_byte_[static_cast<unsigned char>(t_.token_text(id)[0])] = true;
      }
    }
    std::stable_sort(t_.specials_.begin(), t_.specials_.end(), [this](TokenId a, TokenId b) {
      return t_.token_text(a).size() > t_.token_text(b).size();
    });
  }

  const gguf::File& file_;
  Tokenizer& t_;
  std::unordered_map<std::string_view, TokenId> ids_;  // views into the file's bytes, load time only
};

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  static std::atomic<std::uint64_t> next_instance_id{1};
  Tokenizer t;
  Loader loader(file, t);
  if (Status s = loader.run(); !s) return s.error();
  t.instance_id_ = next_instance_id.fetch_add(1, std::memory_order_relaxed);
  return t;
}

std::string_view Tokenizer::token_text(TokenId id) const noexcept {
  AK_ASSERT(valid(id), "Tokenizer::token_text: id outside the vocabulary");
  const auto i = static_cast<std::size_t>(id);
  return std::string_view(texts_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

std::string_view Tokenizer::token_bytes(TokenId id) const noexcept {
  AK_ASSERT(valid(id), "Tokenizer::token_bytes: id outside the vocabulary");
  const auto i = static_cast<std::size_t>(id);
  return std::string_view(bytes_).substr(byte_offsets_[i], byte_offsets_[i + 1] - byte_offsets_[i]);
}

TokenType Tokenizer::token_type(TokenId id) const noexcept {
  AK_ASSERT(valid(id), "Tokenizer::token_type: id outside the vocabulary");
  return types_[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::find(std::string_view text) const noexcept {
  const auto it = std::lower_bound(sorted_ids_.begin(), sorted_ids_.end(), text,
                                   [this](TokenId id, std::string_view t) { return token_text(id) < t; });
  if (it == sorted_ids_.end() || token_text(*it) != text) return std::nullopt;
  return *it;
}

TokenId Tokenizer::find_text(std::string_view text) const noexcept {
  return index_.find(text, [this](TokenId id) { return token_text(id); });
}

TokenId Tokenizer::special_at(std::string_view text, std::size_t at, Special special) const noexcept {
  if (!special_first_byte_[static_cast<unsigned char>(text[at])]) return -1;
  const std::string_view rest = text.substr(at);
  for (const TokenId id : specials_) {
    if (special == Special::user_defined && token_type(id) != TokenType::user_defined) continue;
    if (rest.starts_with(token_text(id))) return id;
  }
  return -1;
}

void Tokenizer::encode(std::string_view text, Special special, EncodeScratch& scratch,
                       std::vector<TokenId>& out) const {
  if (special == Special::plain || specials_.empty() || (special == Special::user_defined && !has_user_defined_)) {
    encode_plain(text, scratch, out);
    return;
  }
  std::size_t start = 0;  // start of the stretch not yet encoded
  for (std::size_t at = 0; at < text.size();) {
    const TokenId id = special_at(text, at, special);
    if (id < 0) {
      ++at;
      continue;
    }
    encode_plain(text.substr(start, at - start), scratch, out);
    out.push_back(id);
    at += token_text(id).size();
    start = at;
  }
  encode_plain(text.substr(start), scratch, out);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, Special special) const {
  EncodeScratch scratch;
  std::vector<TokenId> out;
  encode(text, special, scratch, out);
  return out;
}

// A stretch of text (the whole input, or what lies between special tokens) gets
// the space prefix, as llama.cpp gives every raw-text fragment after the start or
// a special token.
void Tokenizer::encode_spm(std::string_view text, EncodeScratch& scratch, std::vector<TokenId>& out) const {
  std::string& escaped = scratch.escaped;
  escaped.clear();
  if (add_space_prefix_) escaped.append(kSpmSpace);
  for (const char c : text) {
    if (c == ' ') {
      escaped.append(kSpmSpace);
    } else {
      escaped.push_back(c);
    }
  }
  const SpmVocab vocab{&index_, &spm_text_of, this, scores_.data(), &byte_token_, &joinable_};
  spm_merge(vocab, escaped, scratch.spm, out);
}

void Tokenizer::encode_plain(std::string_view text, EncodeScratch& scratch, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  if (kind_ == VocabKind::spm) {
    encode_spm(text, scratch, out);
    return;
  }
  scratch.pieces.clear();
  pretokenize(pre_, text, scratch.pretokenizer, scratch.pieces);
  scratch.cache.bind(instance_id_);
  for (const Piece& piece : scratch.pieces) {
    const std::string_view bytes = text.substr(piece.begin, piece.end - piece.begin);
    if (scratch.cache.find(bytes, out)) continue;
    if (ignore_merges_) {
      scratch.escaped.clear();
      for (const char c : bytes) append_byte_level(static_cast<std::uint8_t>(c), scratch.escaped);
      if (const TokenId whole = find_text(scratch.escaped); whole >= 0) {
        out.push_back(whole);
        scratch.cache.store(bytes, out.data() + out.size() - 1, 1);
        continue;
      }
    }
    scratch.byte_ids.clear();
    for (const char c : bytes) {
      const TokenId id = byte_token_[static_cast<unsigned char>(c)];
      if (id >= 0) scratch.byte_ids.push_back(id);
    }
    const std::size_t first = out.size();
    bpe_merge(merges_, scratch.byte_ids, scratch.bpe, out);
    scratch.cache.store(bytes, out.data() + first, out.size() - first);
  }
}

void Tokenizer::decode_token(TokenId id, bool skip_special, std::string& out) const {
  if (skip_special && is_control(id)) return;
  out.append(token_bytes(id));
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string raw;
  for (const TokenId id : ids) decode_token(id, skip_special, raw);
  // Replace what is not well-formed UTF-8 with U+FFFD, one per maximal subpart.
  std::string out;
  out.reserve(raw.size());
  for (std::size_t at = 0; at < raw.size();) {
    char32_t c = 0;
    const std::size_t n = decode_utf8(raw, at, c);
    if (c == kReplacementCharacter && !(n == 3 && raw.compare(at, 3, "\xEF\xBF\xBD") == 0)) {
      out.append("\xEF\xBF\xBD");
    } else {
      out.append(raw, at, n);
    }
    at += n;
  }
  return out;
}

}  // namespace activekv::tokenizer
