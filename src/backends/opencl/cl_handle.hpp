// cl_handle.hpp — owning wrappers for OpenCL objects.
//
// OpenCL objects are reference counted by the runtime; a Handle owns exactly
// one reference and releases it once, so a backend's destructor cannot leak a
// queue or release an event twice. Handles move, never copy (retain() makes a
// second owner explicitly, which the fence table uses).
#pragma once

#include <utility>

#include "backends/opencl/cl_include.hpp"

namespace activekv::opencl {

template <typename T, cl_int (*Release)(T), cl_int (*Retain)(T)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T object) noexcept : object_(object) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }
  ~Handle() { reset(); }

  T get() const noexcept { return object_; }
  explicit operator bool() const noexcept { return object_ != nullptr; }
  void reset() noexcept {
    if (object_ != nullptr) Release(object_);
    object_ = nullptr;
  }
  // A second owner of the same object.
  static Handle retain(T object) noexcept {
    if (object != nullptr) Retain(object);
    return Handle(object);
  }

 private:
  T object_ = nullptr;
};

using ContextHandle = Handle<cl_context, clReleaseContext, clRetainContext>;
using QueueHandle = Handle<cl_command_queue, clReleaseCommandQueue, clRetainCommandQueue>;
using MemHandle = Handle<cl_mem, clReleaseMemObject, clRetainMemObject>;
using ProgramHandle = Handle<cl_program, clReleaseProgram, clRetainProgram>;
using KernelHandle = Handle<cl_kernel, clReleaseKernel, clRetainKernel>;
using EventHandle = Handle<cl_event, clReleaseEvent, clRetainEvent>;

}  // namespace activekv::opencl
