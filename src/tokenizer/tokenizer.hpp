// tokenizer.hpp — the tokenizer a GGUF file's metadata describes: byte-level BPE
// or SentencePiece.
//
// This is the public header of target activekv_tokenizer (include it as
// "tokenizer/tokenizer.hpp"). What it reads from the file:
//
//   tokenizer.ggml.model        "gpt2" (byte-level BPE) or "llama" (SentencePiece, scores)
//   tokenizer.ggml.pre          BPE only: the pre-tokenizer, by name (pre_tokenizer_names();
//                               absent = "default"); any other name is refused, never guessed
//   tokenizer.ggml.tokens       id -> token text (BPE: byte-level characters, see byte_level.hpp;
//                               SPM: spaces as "▁", bytes as "<0xNN>")
//   tokenizer.ggml.scores       SPM: one score per token (merges take the highest first)
//   tokenizer.ggml.token_type   1 normal, 3 control, 4 user-defined, 6 byte ... (optional)
//   tokenizer.ggml.merges       BPE: "left right" per line; line number = rank
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id   (optional)
//   tokenizer.ggml.add_bos_token     default: true for SPM and Llama 3, else false
//   tokenizer.ggml.add_space_prefix  SPM: default true (a stretch of text gets a leading space)
//
// Encoding is, in order: (1) cut the text at special tokens (control and
// user-defined tokens, matched leftmost-longest as whole strings; which of them
// depends on Special) and emit their ids; (2) BPE: pre-tokenize each remaining
// stretch into pieces (pretokenizer.hpp), map each piece's bytes to their
// single-byte tokens and merge them by rank (bpe.hpp) — Llama 3 first takes a
// piece that is itself a token whole; SPM: prefix the stretch with a space when
// add_space_prefix, write spaces as "▁" and merge by score (spm.hpp), bytes
// without a token falling back to "<0xNN>" tokens. Decoding maps each token back
// to its bytes (byte-level map reversed, or "▁" -> space and "<0xNN>" -> the
// byte; a token whose text is neither, such as "<|im_end|>", stands for its own text).
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
#include "tokenizer/spm.hpp"
#include "tokenizer/text_index.hpp"

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
  allow,         // "<|im_start|>" in the text becomes the control token
  plain,         // special-token text is encoded like any other text
  user_defined,  // only user-defined tokens are matched, as llama.cpp and the reference
                 // `tokenizers` do when special tokens are not parsed (the vocabulary vectors)
};

enum class VocabKind {
  bpe,  // tokenizer.ggml.model = "gpt2": byte-level BPE with a merge list
  spm,  // tokenizer.ggml.model = "llama": SentencePiece, merges by token score
};

// The tokenizer.ggml.pre values ActiveKV reads (comma-separated), for messages.
std::string_view pre_tokenizer_names() noexcept;

struct EncodeScratch {
  PreTokenizerScratch pretokenizer;
  std::vector<Piece> pieces;
  std::vector<TokenId> byte_ids;
  BpeScratch bpe;
  SpmScratch spm;
  std::string escaped;  // SPM: the stretch with its space prefix and spaces as "▁"; BPE: a piece's byte-level text
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
  VocabKind kind() const noexcept { return kind_; }
  PreTokenizerKind pre_tokenizer() const noexcept { return pre_; }
  std::string_view pre_tokenizer_name() const noexcept { return pre_name_; }  // as the file says
  bool add_space_prefix() const noexcept { return add_space_prefix_; }     // SPM only
  std::size_t merge_count() const noexcept { return merges_.size(); }
  // Bytes with no single-byte token (they encode as unknown(), or vanish without one).
  std::size_t bytes_without_token() const noexcept { return bytes_without_token_; }
  // The token byte b becomes where its piece has no token of its own: its byte
  // token, else the unknown token; nullopt when the byte is dropped.
  std::optional<TokenId> byte_fallback(unsigned char b) const noexcept {
    return byte_token_[b] >= 0 ? std::optional<TokenId>(byte_token_[b]) : std::nullopt;
  }

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
  void encode_spm(std::string_view text, EncodeScratch& scratch, std::vector<TokenId>& out) const;
  // The longest special token allowed by `special` whose text starts at text[at], or -1.
  TokenId special_at(std::string_view text, std::size_t at, Special special) const noexcept;
  TokenId find_text(std::string_view text) const noexcept;

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
  VocabKind kind_ = VocabKind::bpe;
  PreTokenizerKind pre_ = PreTokenizerKind::smollm;
  std::string pre_name_;
  std::vector<float> scores_;  // SPM: one per token
  std::vector<std::uint64_t> joinable_;  // SPM: 65,536 bits, byte pairs some token holds (spm.hpp)
  TextIndex index_;            // text -> id (SPM merging, Llama 3's whole-piece tokens)
  bool ignore_merges_ = false; // Llama 3: a piece that is a token is emitted whole
  bool add_space_prefix_ = false;
  bool has_user_defined_ = false;
  std::size_t max_token_bytes_ = 0;
  std::optional<TokenId> bos_, eos_, unknown_, padding_;
  bool add_bos_ = false;
  std::uint64_t instance_id_ = 0;
};

}  // namespace activekv::tokenizer
