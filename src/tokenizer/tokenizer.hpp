// tokenizer.hpp — byte-level BPE built from a GGUF file's tokenizer metadata.
//
// This is the public header of target activekv_tokenizer (include it as
// "tokenizer/tokenizer.hpp"). What it reads from the file:
//
//   tokenizer.ggml.model        must be "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre          "smollm" (digits, then GPT-2 pattern) or "gpt2"/"default" (pattern only)
//   tokenizer.ggml.tokens       id -> token text (byte-level characters, see byte_level.hpp)
//   tokenizer.ggml.token_type   1 normal, 3 control, 4 user-defined, ... (optional)
//   tokenizer.ggml.merges       "left right" per line; line number = rank
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id   (optional)
//
// Encoding is, in order: (1) when the caller allows, cut the text at special
// tokens (control and user-defined tokens, matched leftmost-longest as whole
// strings) and emit their ids; (2) pre-tokenize each remaining stretch into
// pieces (pretokenizer.hpp); (3) map each piece's bytes to their single-byte
// tokens and merge them by rank (bpe.hpp). Decoding maps each token back to its
// bytes (byte-level map reversed; a token whose text is not byte-level, such as
// "<|im_end|>", stands for its own text).
//
// The invariant: every merge rule's two sides and its result are tokens of the
// vocabulary (loading refuses a file that breaks it, naming the key and the
// merge). Then decode(encode(text)) == text for every text whose bytes all have
// single-byte tokens (bytes_without_token() == 0 makes that every text). A byte
// without one — SmolLM2 lacks 21: control characters 4, 6, 19, 20, 22, 29 and
// bytes that never occur in UTF-8 — encodes as the unknown token when the file
// names one, as the reference BPE does with an unk_token, and is dropped otherwise.
//
// A Tokenizer is immutable after loading and safe to share between threads;
// per-call working memory lives in an EncodeScratch the caller owns, so encoding
// allocates nothing once the scratch and output vectors are warm.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/merge_table.hpp"
#include "tokenizer/piece_cache.hpp"
#include "tokenizer/pretokenizer.hpp"

namespace activekv::tokenizer {

using TokenId = std::int32_t;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

enum class Special {
  allow,  // "<|im_start|>" in the text becomes the control token
  plain,  // special-token text is encoded like any other text
};

struct EncodeScratch {
  PreTokenizerScratch pretokenizer;
  std::vector<Piece> pieces;
  std::vector<TokenId> byte_ids;
  BpeScratch bpe;
  PieceCache cache;  // BPE results of short pieces seen before (piece_cache.hpp)
};

class Tokenizer {
 public:
  static Result<Tokenizer> from_gguf(const gguf::File& file);

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, Special special, EncodeScratch& scratch, std::vector<TokenId>& out) const;
  std::vector<TokenId> encode(std::string_view text, Special special = Special::allow) const;

  // Appends the bytes of `id` to `out` (nothing for a control token when skip_special).
  void decode_token(TokenId id, bool skip_special, std::string& out) const;
  // The text of `ids`; bytes that are not valid UTF-8 become U+FFFD, as in the
  // reference decoder (use StreamDecoder to print tokens as they arrive).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  std::int32_t vocab_size() const noexcept { return static_cast<std::int32_t>(offsets_.size() - 1); }
  bool valid(TokenId id) const noexcept { return id >= 0 && id < vocab_size(); }
  std::string_view token_text(TokenId id) const noexcept;   // as in the vocabulary ("Ġthe")
  std::string_view token_bytes(TokenId id) const noexcept;  // what it stands for (" the")
  TokenType token_type(TokenId id) const noexcept;
  bool is_control(TokenId id) const noexcept { return token_type(id) == TokenType::control; }
  std::optional<TokenId> find(std::string_view token_text) const noexcept;
  std::size_t max_token_bytes() const noexcept { return max_token_bytes_; }
  PreTokenizerKind pre_tokenizer() const noexcept { return pre_; }
  std::size_t merge_count() const noexcept { return merges_.size(); }
  // Bytes with no single-byte token (they encode as unknown(), or vanish without one).
  std::size_t bytes_without_token() const noexcept { return bytes_without_token_; }

  // Ids named by the file; nullopt when absent.
  std::optional<TokenId> bos() const noexcept { return bos_; }
  std::optional<TokenId> eos() const noexcept { return eos_; }
  std::optional<TokenId> unknown() const noexcept { return unknown_; }
  std::optional<TokenId> padding() const noexcept { return padding_; }
  bool add_bos() const noexcept { return add_bos_; }  // tokenizer.ggml.add_bos_token
  // Distinct for every loaded tokenizer (copies and moves keep it): what a PieceCache is bound to.
  std::uint64_t instance_id() const noexcept { return instance_id_; }

 private:
  friend class Loader;
  Tokenizer() = default;

  void encode_plain(std::string_view text, EncodeScratch& scratch, std::vector<TokenId>& out) const;
  // The longest special token whose text starts at text[at], or -1.
  TokenId special_at(std::string_view text, std::size_t at) const noexcept;

  std::string texts_;                  // every token's text, back to back
  std::string bytes_;                  // every token's decoded bytes, back to back
  std::vector<std::uint32_t> offsets_;       // token i's text: texts_[offsets_[i], offsets_[i+1])
  std::vector<std::uint32_t> byte_offsets_;  // token i's bytes: bytes_[byte_offsets_[i], byte_offsets_[i+1])
  std::vector<TokenType> types_;
  // Ids are kept rather than views: views into texts_ would not survive a move of a short string.
  std::vector<TokenId> sorted_ids_;  // for find(): ids ordered by their text
  std::array<TokenId, 256> byte_token_{};  // each byte's single-byte token; unknown or -1 (dropped) if none
  std::size_t bytes_without_token_ = 0;
  MergeTable merges_;
  std::vector<TokenId> specials_;  // control and user-defined tokens, longest text first
  std::array<bool, 256> special_first_byte_{};
  PreTokenizerKind pre_ = PreTokenizerKind::smollm;
  std::size_t max_token_bytes_ = 0;
  std::optional<TokenId> bos_, eos_, unknown_, padding_;
  bool add_bos_ = false;
  std::uint64_t instance_id_ = 0;
};

}  // namespace activekv::tokenizer
