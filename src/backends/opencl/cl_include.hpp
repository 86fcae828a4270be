// cl_include.hpp — the one place that includes the OpenCL C API.
//
// The target version is fixed here (1.2 entry points plus the 2.0
// clCreateCommandQueueWithProperties where the platform has it), so every file
// sees the same declarations and no header prints a "defaulting" warning.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
// clCreateCommandQueue (1.2) is used on purpose: it exists on every platform,
// 1.2-only ones included, and takes the two properties this backend sets.
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif
#include <CL/cl.h>
