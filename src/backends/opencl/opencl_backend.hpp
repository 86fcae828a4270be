// opencl_backend.hpp — the Backend interface on real OpenCL queues, events and kernels.
//
// What it owns (all created by make_opencl_backend and allocate(), none later):
//   one context on one device; three command queues — compute (which also runs
//   d2d copies), h2d and d2h — out-of-order where the device supports it;
//   the arena (one cl_mem); the host pool (one CL_MEM_ALLOC_HOST_PTR buffer,
//   mapped once and kept mapped: the pinned-memory idiom, its pointer is the
//   host side of every h2d/d2h copy); the attention program; scratch for one
//   attention batch (queries, outputs, state, page-mass pairs) sized from the
//   MemoryRequest; a ring of parameter slots for page tables.
//
// Fences are cl_events. A slot of the shared FenceTable holds the event of the
// command (or marker) that covers the call. Outcomes come from
// CL_EVENT_COMMAND_EXECUTION_STATUS: CL_COMPLETE is signalled, a NEGATIVE value
// is failed (never complete), anything else is pending. An OpenCL call that
// fails after part of a call's work was enqueued cannot be pinned on one fence:
// the backend is marked lost and every pending fence becomes unknown.
//
// Ordering: the host never waits on the compute queue. Device-side waits are
// event wait lists; enqueue_wait is a barrier with a wait list; the attention
// calls chain on the previous call's final event because they share scratch.
// hold_queue enqueues a barrier gated by a user event (clCreateUserEvent), so a
// held copy really is pending in the runtime; release_queue completes the user
// event, fail_held_queue (tests) completes it with an error.
//
// Threading: like every backend, one thread drives it; OpenCL's own threads
// only run the commands. Nothing here resolves fences from a callback.
#pragma once

#include <memory>

#include "activekv/backend.hpp"

namespace activekv::opencl {

// Choices the OpenCL backend makes that BackendOptions does not carry.
struct OpenClTuning {
  // Scratch for the page-parallel attention schedule: (2 + head_dim) floats per
  // (query, head, page) triple of a batch. A batch that fits runs page-parallel;
  // one that does not runs the sequential schedule — the results are the same
  // bit for bit, only the speed differs. 0 always runs sequentially.
  std::uint64_t split_scratch_bytes = 64ull << 20;
};

Result<std::unique_ptr<Backend>> make_opencl_backend_tuned(const BackendOptions& options, const OpenClTuning& tuning);

// Test hook, OpenCL only: completes the user event of a held queue with an
// error status, so every command gated by it reports a negative execution
// status. Refused when the queue is not held.
Status fail_held_queue(Backend& backend, QueueKind queue);

// The device list as lines ("[0] Portable Computing Language / pthread-..."),
// for `activekv` diagnostics and test skip messages.
std::string describe_devices();

}  // namespace activekv::opencl
