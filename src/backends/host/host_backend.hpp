// host_backend.hpp — an emulated device in host memory: the backend most tests use.
//
// The arena is one aligned host allocation; the host pool is pinned with
// mmap + mlock (core's PinnedRegion; a memlock refusal is an error, never a
// silent fallback). Four queues — compute, h2d, d2h, d2d — each hold a ring of
// commands reserved at allocate(); a command is a copy, an upload/download, an
// attention job, a marker, or a wait on a fence.
//
// Two ways to run the same commands:
//
//   threaded       one worker thread per queue, in order; the compute worker
//                  spreads a kernel over compute_threads threads (itself
//                  included). A wait command blocks its worker, never the host.
//   deterministic  no threads. A virtual clock: each command draws a duration
//                  (and its faults) from the seed when enqueued; it becomes
//                  eligible when the queue's rules allow (in order, or — with
//                  reorder — after every earlier wait on its queue and, for a
//                  marker, every earlier command), and completes at
//                  eligible time + duration, when the test advances the clock,
//                  polls, or waits on the host. Same seed, same calls: same
//                  completions, same faults, same bytes.
//
// The rules faults keep: a command that waited on a failed (unknown) fence does
// not run and its fence fails (is unknown); a failed copy writes at most a
// prefix of its bytes; an unknown fence's work may or may not have happened; a
// device loss tears copies in flight (a seeded prefix lands) and makes every
// pending fence unknown. A held queue starts nothing until released.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/pinned_memory.hpp"
#include "backends/host/attention_cpu.hpp"

namespace activekv::host {

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const BackendOptions& options);
  ~HostBackend() override;

  std::string_view name() const noexcept override { return "host"; }
  const Capabilities& capabilities() const noexcept override { return capabilities_; }
  std::string describe() const override;
  // Threaded mode: a kernel run on the caller's thread (an idle compute queue) runs on these.
  bool set_parallel(const ParallelChunks& parallel) override;
  std::span<std::byte> host_pool() noexcept override;
  std::span<std::byte> arena_host_view() noexcept override;

  std::uint32_t poll() override;

  // Deterministic mode only: move the virtual clock forward and complete what
  // falls due. Returns the fences resolved.
  std::uint32_t advance(std::uint64_t ticks);
  std::uint64_t now() const noexcept { return now_; }
  // Commands enqueued and not yet complete, all queues.
  std::uint32_t outstanding() const;
  // The device is lost: copies in flight may tear, every pending fence becomes
  // unknown, later enqueues are refused.
  void lose_device();

  // Deterministic mode only: the next batched copy (copy(), not upload/download) in `direction`
  // fails as an injected failed copy would — a targeted fault for tests of what follows one.
  void fail_next_copy(CopyDirection direction);

  struct FaultCounts {
    std::uint64_t late = 0, failed_fences = 0, unknown_fences = 0, failed_copies = 0, torn_copies = 0, poisoned = 0;
  };
  const FaultCounts& faults_injected() const noexcept { return faults_; }

 protected:
  Status do_allocate(const MemoryRequest& request) override;
  Result<Fence> do_copy(CopyDirection direction, std::span<const CopyRegion> regions,
                        std::span<const Fence> waits) override;
  Result<Fence> do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                          std::span<const Fence> waits) override;
  Result<Fence> do_download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                            std::span<const Fence> waits) override;
  Result<Fence> do_attention(const AttentionBatch& batch, std::span<const Fence> waits) override;
  Result<Fence> do_record(QueueKind queue) override;
  Status do_enqueue_wait(QueueKind queue, std::span<const Fence> fences) override;
  FenceOutcome do_query(Fence fence) override;
  Result<FenceOutcome> do_wait_host(Fence fence, std::chrono::nanoseconds timeout) override;
  Status do_synchronize(QueueKind queue) override;
  Status do_hold_queue(QueueKind queue, bool hold) override;

 private:
  enum class Kind : std::uint8_t { copy, upload, download, attention, marker, wait };
  enum class Fault : std::uint8_t { none, failed_fence, unknown_fence, failed_copy };

  struct Command {
    Kind kind = Kind::marker;
    CopyDirection direction = CopyDirection::h2d;
    Fence fence{};                    // the command's own fence (none for a wait)
    Fence awaited{};                  // wait: the fence it waits for (retained)
    std::uint64_t seq = 0;            // enqueue order, all queues
    std::uint64_t region_begin = 0;   // copy: absolute position in the queue's region ring
    std::uint32_t region_count = 0;
    std::uint64_t region_end = 0;     // ring position after this command's regions
    std::uint32_t job = 0;            // attention: job slot
    std::uint64_t arena_offset = 0;   // upload/download
    const std::byte* source = nullptr;
    std::byte* destination = nullptr;
    std::uint64_t bytes = 0;
    // deterministic mode
    std::uint64_t enqueued_at = 0;
    std::uint64_t duration = 0;
    std::uint64_t done_at = 0;
    Fault fault = Fault::none;
    bool effect_on_unknown = false;   // unknown fence: did the work happen?
    std::uint64_t torn_fraction = 0;  // failed / torn copy: per-mille of bytes that land
    bool done = false;
    FenceOutcome outcome = FenceOutcome::pending;
    FenceOutcome poisoned = FenceOutcome::signalled;  // an awaited fence failed: do not run, report this
  };

  struct Queue {
    QueueKind kind = QueueKind::compute;
    std::vector<Command> ring;         // capacity commands_max
    std::uint64_t head = 0, tail = 0;  // absolute command positions
    std::vector<CopyRegion> regions;   // region ring
    std::uint64_t region_head = 0, region_tail = 0;
    bool held = false;
    std::uint64_t released_at = 0;     // deterministic: when the hold ended
    std::uint64_t retired_done_at = 0;        // deterministic: latest completion among retired commands
    std::uint64_t retired_waits_done_at = 0;  // ... among retired waits
    FenceOutcome poison = FenceOutcome::signalled;  // a failed wait with no command after it yet
    FenceOutcome worst = FenceOutcome::signalled;   // over every retired command (markers)
    std::uint64_t dispatched = 0;      // threaded: commands taken by the worker
    std::condition_variable work;      // threaded: new command / hold released / stop
    std::thread worker;
  };

  struct ComputePool;  // threaded: helper threads for the kernel

  Queue& queue(QueueKind kind) noexcept { return queues_[static_cast<std::size_t>(kind)]; }
  Status check_room(Queue& q, std::uint32_t commands, std::uint32_t regions) const;
  Command& push(Queue& q, Kind kind);   // under mutex_
  Status push_waits(Queue& q, std::span<const Fence> waits);  // under mutex_
  Fence open_fence(Queue& q, Command& command);
  void draw(Command& command, bool is_copy);
  void publish(Queue& q);
  bool can_run_here(const Queue& q, std::span<const Fence> waits) const;               // under mutex_
  Fence run_here(std::unique_lock<std::mutex>& lock, Queue& q, Command& command);     // under mutex_

  // Executing a command's effect (both modes).
  void apply_copy(Queue& q, const Command& command, std::uint64_t permille);
  // here: the command runs on the thread that enqueued it (run_here), which may use the lent threads.
  void apply_attention(const Command& command, bool threaded, bool here);
  FenceOutcome execute(Queue& q, Command& command, bool threaded, bool here = false);
  void retire(Queue& q);  // under mutex_: frees done commands at the head
  // under mutex_: a wait saw `awaited`; a failure poisons the next command.
  void propagate(Queue& q, std::uint64_t wait_position, FenceOutcome awaited);

  // threaded mode
  void worker_loop(Queue& q);

  // deterministic mode
  bool eligible_at(const Queue& q, std::uint64_t position, std::uint64_t* at) const;
  bool next_event(std::uint64_t* due, Queue** q, std::uint64_t* position) const;
  std::uint32_t run_until(std::uint64_t time);
  void resolve_at(Fence fence, FenceOutcome outcome, std::uint64_t time);

  BackendOptions options_;
  Capabilities capabilities_{};
  Queue queues_[queue_kind_count];
  mutable std::mutex mutex_;
  bool stop_ = false;
  // Prefill tiles balanced over the compute threads (AttentionJob::balance_tiles); false keeps
  // assign's tiles of 8: ACTIVEKV_HOST_TILES=fixed, for benchmarks comparing the two in one run.
  bool balance_tiles_ = true;
  std::uint64_t seq_ = 0;

  // The arena and an unpinned pool start on a 4 KiB boundary, as a device allocation does (see
  // do_allocate: glibc's memmove on AMD Zen 3 copies a few KiB into a destination 16 bytes off
  // a page boundary several times slower per byte than into an aligned one).
  struct AlignedFree {
    void operator()(std::byte* bytes) const noexcept;
  };
  using AlignedBytes = std::unique_ptr<std::byte[], AlignedFree>;
  PinnedRegion pinned_pool_;
  AlignedBytes plain_pool_;
  AlignedBytes arena_;
  std::span<std::byte> pool_view_;

  std::vector<AttentionJob> jobs_;            // attention jobs in flight
  std::vector<std::uint32_t> free_jobs_;
  std::vector<AttentionScratch> scratch_;     // one per compute thread
  AttentionSplit split_;                      // decode: a query's pages cut over the threads
  std::unique_ptr<ComputePool> pool_;
  ParallelChunks lent_;                       // the caller's threads (set_parallel), for run_here

  // deterministic mode
  std::uint64_t now_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::uint64_t> resolved_at_;    // [fence slots]: when each fence resolved
  FaultCounts faults_{};
  bool fail_next_copy_[3] = {false, false, false};  // [CopyDirection]
};

}  // namespace activekv::host
