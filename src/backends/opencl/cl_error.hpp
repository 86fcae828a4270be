// cl_error.hpp — OpenCL status codes as names and as activekv::Error values.
//
// Every OpenCL call returns a cl_int. A negative value is a failure; this file
// turns it into an Error that names the call and the code ("clEnqueueWriteBuffer:
// CL_OUT_OF_RESOURCES (-5)") so a log line says what failed without a lookup
// table. Fence outcomes use the same names: an event whose execution status is
// negative failed with that code.
#pragma once

#include <string_view>

#include "activekv/result.hpp"
#include "backends/opencl/cl_include.hpp"

namespace activekv::opencl {

// "CL_OUT_OF_RESOURCES", or "CL_UNKNOWN_ERROR" for a code this table lacks.
const char* cl_status_name(cl_int status) noexcept;

// An ErrorCode::backend Error: "<call>: <name> (<code>)[: <what to do>]".
Error cl_error(std::string_view call, cl_int status, std::string_view advice = {});

}  // namespace activekv::opencl
