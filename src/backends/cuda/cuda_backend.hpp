// cuda_backend.hpp — the CUDA backend's extras beyond the Backend interface.
//
// make_cuda_backend (declared in activekv/backend.hpp) is the way in. These are
// for tests and diagnostics; plain C++, no CUDA header.
#pragma once

#include "activekv/backend.hpp"

namespace activekv::cuda {

// cudaGetDeviceCount, 0 when the runtime finds no device or no driver.
int visible_devices() noexcept;

// Tests only: puts one of the backend's streams into graph capture, so the next
// enqueue on it must be refused; end_capture_for_test ends it.
Status begin_capture_for_test(Backend& backend, QueueKind queue);
Status end_capture_for_test(Backend& backend, QueueKind queue);

}  // namespace activekv::cuda
