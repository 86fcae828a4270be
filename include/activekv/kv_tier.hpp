// kv_tier.hpp — the KV runtime's port to a shared tier below the host pool (docs/TIER.md).
//
// The runtime knows nothing of the store behind it (src/tier/ implements this
// port on Redis). It calls the port between steps, never inside one, and no
// call touches the network or copies rows:
//
//   arrival     lookup(): starts a background lookup of the prompt's whole
//               blocks past what the host pool holds (a prefetch: a bounded
//               number run at once; the queue head may evict one that waits).
//   queue head  attach(): the history the runtime reserved for the request;
//               the tier's reader writes the accepted blocks' rows straight
//               into it, off the engine thread, while writing_into() says so
//               (the runtime keeps the history off its free list meanwhile).
//   admission   adopt(): the end of the run written there; the context's length
//               starts after it, so only the rest is prefilled.
//   cancel      abandon(): the lookup goes unused; the history stays reserved
//               until writing_into() is false.
//   finish      offer(): the finished history's whole blocks, handed to a
//               background writer that reads the history's rows itself, under
//               a lease (the history): the runtime keeps that history off its
//               free list while lease_held() says the writer still reads it.
//   running     offer_running(): a running context's blocks from first_block on, when its history
//               has just reached their ends (window-layer models: the rings still hold the rows
//               those blocks need); the writer copies the ring rows at once and reads the full
//               layers' rows (final below the length) under the same lease.
//
// A block is block_tokens tokens (a whole number of pages) starting at a
// multiple of block_tokens; block b's rows of a full layer l are
// layer_segments[l][b × block_tokens × row_bytes, (b + 1) × block_tokens × row_bytes); a window
// layer's segment is its host ring (token t at slot t mod ring_tokens), whose rows a block carries
// only while the ring held them, and a hybrid's block carries the recurrent state at its end when
// the history held a checkpoint there. A restore ends only where every window layer's rows of the
// window and (hybrids) the state are there: the cut (adopt()'s TierAdoptCut; docs/TIER.md, "Cuts").
// A lookup is named by its prompt's blocks [first_block, blocks_end): the chain
// hash of block blocks_end − 1 names every token before it, and a lookup that
// started at or before first_block covers a request that needs less.
// A port never fails a caller: whatever goes wrong is a miss (fewer blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace activekv {

inline constexpr std::uint32_t kTierNoSlot = UINT32_MAX;

enum class TierLookupStatus : std::uint8_t {
  busy,     // no lookup of these blocks, and none could start now (every reader busy): ask again
  reading,  // the reader reads the store; no history attached yet
  read,     // read and checked; no history attached yet (attach)
  writing,  // a history is attached: the reader reads, then writes the accepted rows into it
  ready,    // the accepted rows are in the attached history: adopt()
};

// A recurrent-state checkpoint a finished history holds: the state after its first `token` tokens.
struct TierState {
  std::uint32_t token = 0;
  const std::byte* bytes = nullptr;  // the geometry's recurrent_state_bytes
};

// Where an adoption ended, and why not further (absolute block indexes, ends exclusive).
struct TierAdoptCut {
  std::uint32_t accepted_end = 0;  // the store's run: blocks accepted (checked) from it
  std::uint32_t window_end = 0;    // cut back to the last end whose window every window layer's rows cover
  std::uint32_t end = 0;           // cut back again to the last end with a state (hybrids): adopted
};

class KvTierPort {
 public:
  virtual ~KvTierPort() = default;
  virtual std::uint32_t block_tokens() const noexcept = 0;
  // Finds, or starts, the background lookup of blocks [first_block, blocks_end) of `prompt`
  // (blocks_end > first_block). With `evict`, a lookup of another prompt that is not in a history's
  // rows (read, or ready but not adopted) gives way when every reader is busy.
  virtual TierLookupStatus lookup(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                  std::uint32_t blocks_end, bool evict) = 0;
  // The lookup of these blocks (reading or read: none attached) writes its accepted rows into
  // `layer_segments` (history `slot`), rows from token `from_token` on only. False: not attached.
  virtual bool attach(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                      std::span<const std::span<std::byte>> layer_segments, std::uint32_t from_token,
                      std::uint32_t slot) = 0;
  // The ready lookup of these blocks: the history its rows are in, and the first token written
  // (kTierNoSlot when there is none).
  virtual std::uint32_t ready_slot(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                   std::uint32_t blocks_end, std::uint32_t& from_token) = 0;
  // Ends the ready lookup of these blocks: returns the end of the run written into its history
  // (first_block when none, and always when no lookup of these blocks is ready); `cut` says where
  // the store's run was cut. A hybrid's state at that end is copied into `state` (when not empty).
  virtual std::uint32_t adopt(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                              std::span<std::byte> state, TierAdoptCut& cut) = 0;
  // Lets the lookup of the blocks before blocks_end go unused (a no-op when there is none).
  virtual void abandon(std::span<const std::int32_t> prompt, std::uint32_t blocks_end) = 0;
  // True while a lookup's reader may still write into history `slot`.
  virtual bool writing_into(std::uint32_t slot) const = 0;
  // Offers the whole blocks of `tokens`, whose rows the segments hold (a history `length` tokens
  // long: a window layer's ring holds its last ring_tokens), with the state checkpoints `states`
  // (a block ending at one carries it), to be written behind: the writer reads the rows and states
  // after offer() returns, while lease_held(lease) is true.
  virtual void offer(std::span<const std::int32_t> tokens, std::uint32_t length,
                     std::span<const std::span<const std::byte>> layer_segments, std::span<const TierState> states,
                     std::uint32_t lease) = 0;
  // As offer(), for a history still running, `length` tokens long: only the whole blocks from
  // first_block on. The window layers' rows are copied before this returns (the rings move on);
  // the rest is read under `lease` as offer()'s.
  virtual void offer_running(std::span<const std::int32_t> tokens, std::uint32_t length, std::uint32_t first_block,
                             std::span<const std::span<const std::byte>> layer_segments,
                             std::span<const TierState> states, std::uint32_t lease) = 0;
  virtual bool lease_held(std::uint32_t lease) const = 0;
  // Waits up to timeout_ms for a reader to end its read or copy, or a write to finish (a waiting
  // admission with nothing else to step); true if one did.
  virtual bool wait(std::uint32_t timeout_ms) = 0;
};

}  // namespace activekv
