// piece_cache.hpp — remembers the BPE result of short, frequent pieces.
//
// Text repeats its words, and BPE of a piece depends on nothing but the piece's
// bytes, so the ids of a piece seen before can be copied instead of merged again
// (merging is over half the encode time: a hash probe per adjacent pair, heap
// pushes and pops). The cache is direct-mapped — a piece's hash picks one slot, a
// newer piece evicts an older one — with a fixed number of slots allocated on
// first use, so it never allocates after warm-up and costs nothing to keep
// consistent. It stores the piece's bytes and compares them on lookup: a hit is
// exact, never a hash collision. Only pieces of up to kPieceBytesMax bytes with
// up to kIdsMax ids are kept (most words); longer ones are merged every time.
//
// A cache belongs to an EncodeScratch, and so to one caller; it records which
// tokenizer filled it (Tokenizer::instance_id) and starts afresh when used with
// another.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace activekv::tokenizer {

class PieceCache {
 public:
  static constexpr std::size_t kSlots = 4096;  // a power of two
  static constexpr std::size_t kPieceBytesMax = 22;
  static constexpr std::size_t kIdsMax = 6;

  // Prepares the cache for the tokenizer `owner`: allocates on first use, clears
  // when the owner changes.
  void bind(std::uint64_t owner) {
    if (slots_.empty()) slots_.resize(kSlots);
    if (owner_ == owner) return;
    for (Slot& s : slots_) s.piece_bytes = 0;
    owner_ = owner;
  }

  // Appends the cached ids of `piece` to `out` and returns true, or returns false.
  bool find(std::string_view piece, std::vector<std::int32_t>& out) const {
    if (piece.size() > kPieceBytesMax) return false;
    const Slot& s = slots_[slot_of(piece)];
    if (s.piece_bytes != piece.size() || std::memcmp(s.piece, piece.data(), piece.size()) != 0) return false;
    out.insert(out.end(), s.ids, s.ids + s.id_count);
    return true;
  }

  // Remembers that `piece` encodes as `ids`, if both are small enough.
  void store(std::string_view piece, const std::int32_t* ids, std::size_t count) {
    if (piece.empty() || piece.size() > kPieceBytesMax || count > kIdsMax) return;
    Slot& s = slots_[slot_of(piece)];
    s.piece_bytes = static_cast<std::uint8_t>(piece.size());
    s.id_count = static_cast<std::uint8_t>(count);
    std::memcpy(s.piece, piece.data(), piece.size());
    if (count != 0) std::memcpy(s.ids, ids, count * sizeof(std::int32_t));  // a piece may encode to no ids (ids null)
  }

 private:
  struct Slot {
    std::uint8_t piece_bytes = 0;  // 0: empty (pieces are never empty)
    std::uint8_t id_count = 0;
    char piece[kPieceBytesMax];
    std::int32_t ids[kIdsMax];
  };
  static std::size_t slot_of(std::string_view piece) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (const char c : piece) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return static_cast<std::size_t>(h ^ (h >> 32)) & (kSlots - 1);
  }

  std::vector<Slot> slots_;
  std::uint64_t owner_ = 0;  // instance ids start at 1
};

}  // namespace activekv::tokenizer
