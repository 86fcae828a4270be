// opencl_attention.cpp — the OpenCL backend's attention: the program built at
// allocation (no relaxed math: the kernels keep the contract's arithmetic) and
// one batch launched as page tables in a parameter slot, the kernels, and a
// marker whose event becomes the batch's fence. Attention calls share scratch,
// so each waits for the last; a parameter slot is reused only after its
// previous upload resolved.
#include <cstring>

#include "backends/opencl/attention_pack.hpp"
#include "backends/opencl/attention_source.hpp"
#include "backends/opencl/opencl_backend_impl.hpp"

namespace activekv::opencl::detail {

Status OpenClBackend::build_program(const MemoryRequest& request) {
  const char* source = attention_cl_source;
  cl_int status = CL_SUCCESS;
  program_ = ProgramHandle(clCreateProgramWithSource(context_.get(), 1, &source, nullptr, &status));
  if (status != CL_SUCCESS) return cl_error("clCreateProgramWithSource", status);
  // No -cl-fast-relaxed-math, no -cl-mad-enable: the math must be the contract's.
  const std::string options = fmt::format("-cl-std=CL1.2 -DAK_HEAD_DIM_MAX={}", request.head_dim_max);
  status = clBuildProgram(program_.get(), 1, &device_.device, options.c_str(), nullptr, nullptr);
  if (status != CL_SUCCESS) {
    std::size_t log_bytes = 0;
    clGetProgramBuildInfo(program_.get(), device_.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_bytes);
    std::string log(log_bytes, '\0');
    clGetProgramBuildInfo(program_.get(), device_.device, CL_PROGRAM_BUILD_LOG, log_bytes, log.data(), nullptr);
    return cl_error("clBuildProgram", status, log);
  }
  attention_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_attention", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_attention)", status);
  mass_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_page_mass", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_page_mass)", status);
  partials_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_page_partials", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_page_partials)", status);
  merge_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_merge_partials", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_merge_partials)", status);
  return Status::success();
}

Result<Fence> OpenClBackend::do_attention(const AttentionBatch& batch, std::span<const Fence> waits) {
  const std::uint32_t element_bytes = dtype_bytes(batch.shape.dtype);
  for (const AttentionPage& page : batch.pages) {
    if (page.arena_offset % element_bytes != 0) {
      return make_error(ErrorCode::invalid_argument, "",
                        fmt::format("attention page at arena offset {} is not aligned to its {}-byte elements",
                                    page.arena_offset, element_bytes));
    }
  }
  const bool wants_mass = !batch.page_mass.empty();
  const std::uint64_t triples = gpu::pair_page_count(batch);
  const bool split = partials_ && triples * (2ull + batch.shape.head_dim) * 4 <= tuning_.split_scratch_bytes;
  if (wants_mass && !split && triples > pair_ms_capacity_) {
    return make_error(ErrorCode::exhausted, "page_mass",
                      fmt::format("page mass for {} (query, head, page) triples exceeds the scratch sized at warm-up "
                                  "({} = batch_pages_max x q_heads_max); ask for page mass on decode batches or split the batch",
                                  gpu::pair_page_count(batch), pair_ms_capacity_));
  }
  // The host staging slot must no longer be read by its previous upload.
  const std::uint32_t slot = param_next_;
  if (cl_event previous = param_uploads_[slot]; previous != nullptr) {
    cl_int execution = CL_QUEUED;
    clGetEventInfo(previous, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
    if (execution > CL_COMPLETE) {
      return make_error(ErrorCode::exhausted, "attention",
                        fmt::format("{} attention calls are already in flight; wait on an earlier attention fence first",
                                    kParamSlots));
    }
    release_event(param_uploads_[slot]);
  }
  if (!make_room(12)) {
    return make_error(ErrorCode::exhausted, "opencl", "too many unresolved OpenCL commands in flight; wait on earlier fences");
  }
  Result<Fence> opened = open_fence(QueueKind::compute);
  if (!opened) return opened.error();
  const Fence fence = opened.value();
  param_next_ = (param_next_ + 1) % kParamSlots;

  const std::span<std::byte> host_slot(params_host_ptr_ + slot * param_slot_bytes_, param_slot_bytes_);
  const gpu::PackedParams params = gpu::pack_attention(batch, host_slot);
  const auto queries = static_cast<std::uint64_t>(batch.query_positions.size());
  const std::uint64_t head_elements = std::uint64_t{batch.shape.q_heads} * batch.shape.head_dim;
  const std::uint64_t state_floats = queries * batch.shape.q_heads * (2ull + batch.shape.head_dim);
  const std::uint64_t table_bytes = gpu::packed_slot_bytes(params.pages, params.queries, params.tasks);
  cl_command_queue compute = queue(QueueKind::compute);

  collect_waits(waits);
  if (last_attention_ != nullptr) {
    // Chain on the previous call only while it runs: a finished one needs no wait,
    // and a failed one must not fail every later call through the wait list.
    cl_int execution = CL_QUEUED;
    clGetEventInfo(last_attention_, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
    if (execution <= CL_COMPLETE) {
      release_event(last_attention_);
    } else {
      wait_list_.push_back(last_attention_);
    }
  }
  const auto wait_count = static_cast<cl_uint>(wait_list_.size());
  const cl_event* wait_events = wait_list_.empty() ? nullptr : wait_list_.data();

  std::array<cl_event, 3> uploads{};
  std::uint32_t upload_count = 0;
  std::array<cl_event, 3> reads{};
  std::uint32_t read_count = 0;
  cl_event attention_done = nullptr;
  cl_event mass_done = nullptr;
  cl_event final_event = nullptr;
  auto release_all = [&] {
    for (cl_event e : uploads) retire(e);
    for (cl_event e : reads) retire(e);
    retire(attention_done);
    retire(mass_done);
  };
  auto fail = [&](const char* call, cl_int status) {
    release_all();
    return lose(fence, cl_error(call, status));
  };

  cl_int status = clEnqueueWriteBuffer(compute, param_slots_[slot].get(), CL_FALSE, 0, table_bytes, host_slot.data(),
                                       wait_count, wait_events, &uploads[upload_count]);
  if (status != CL_SUCCESS) {
    release_all();
    return abandon(fence, cl_error("clEnqueueWriteBuffer(page table)", status));
  }
  param_uploads_[slot] = uploads[upload_count];
  clRetainEvent(param_uploads_[slot]);
  ++upload_count;
  status = clEnqueueWriteBuffer(compute, q_.get(), CL_FALSE, 0, queries * head_elements * 4, batch.queries.data(),
                                wait_count, wait_events, &uploads[upload_count]);
  if (status != CL_SUCCESS) return fail("clEnqueueWriteBuffer(queries)", status);
  ++upload_count;
  if (batch.load_state) {
    status = clEnqueueWriteBuffer(compute, state_.get(), CL_FALSE, 0, state_floats * 4, batch.state.data(), wait_count,
                                  wait_events, &uploads[upload_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueWriteBuffer(state)", status);
    ++upload_count;
  }

  cl_mem arena = arena_.get(), table = param_slots_[slot].get(), q = q_.get(), out = out_.get(), state = state_.get(),
         pair_ms = pair_ms_.get(), final_ms = final_ms_.get(), mass = mass_.get(), partials = partials_.get();
  // CPU devices run one work-group per thread: single work-items spread the pairs over
  // every core. GPUs choose their own work-group shape.
  const std::size_t local_one[2] = {1, 1};
  const std::size_t* local_2d = device_.is_gpu ? nullptr : local_one;
  const std::size_t global_pairs[2] = {static_cast<std::size_t>(queries), batch.shape.q_heads};
  if (split) {
    std::uint32_t rows_max = 0;
    for (const AttentionTask& task : batch.tasks) rows_max = std::max(rows_max, task.query_count);
    cl_kernel pk = partials_kernel_.get();
    clSetKernelArg(pk, 0, sizeof(params), &params);
    clSetKernelArg(pk, 1, sizeof(cl_mem), &arena);
    clSetKernelArg(pk, 2, sizeof(cl_mem), &table);
    clSetKernelArg(pk, 3, sizeof(cl_mem), &q);
    clSetKernelArg(pk, 4, sizeof(cl_mem), &partials);
    const std::size_t global_triples[3] = {batch.pages.size(), batch.shape.q_heads, rows_max};
    cl_event partials_done = nullptr;
    status = clEnqueueNDRangeKernel(compute, pk, 3, nullptr, global_triples, nullptr, upload_count, uploads.data(), &partials_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_page_partials)", status);
    retire(partials_done);
    cl_kernel mk = merge_kernel_.get();
    clSetKernelArg(mk, 0, sizeof(params), &params);
    clSetKernelArg(mk, 1, sizeof(cl_mem), &table);
    clSetKernelArg(mk, 2, sizeof(cl_mem), &partials);
    clSetKernelArg(mk, 3, sizeof(cl_mem), &out);
    clSetKernelArg(mk, 4, sizeof(cl_mem), &state);
    clSetKernelArg(mk, 5, sizeof(cl_mem), &final_ms);
    status = clEnqueueNDRangeKernel(compute, mk, 2, nullptr, global_pairs, local_2d, 1, &partials_done, &attention_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_merge_partials)", status);
  } else {
    cl_kernel kernel = attention_kernel_.get();
    clSetKernelArg(kernel, 0, sizeof(params), &params);
    clSetKernelArg(kernel, 1, sizeof(cl_mem), &arena);
    clSetKernelArg(kernel, 2, sizeof(cl_mem), &table);
    clSetKernelArg(kernel, 3, sizeof(cl_mem), &q);
    clSetKernelArg(kernel, 4, sizeof(cl_mem), &out);
    clSetKernelArg(kernel, 5, sizeof(cl_mem), &state);
    clSetKernelArg(kernel, 6, sizeof(cl_mem), &pair_ms);
    clSetKernelArg(kernel, 7, sizeof(cl_mem), &final_ms);
    status = clEnqueueNDRangeKernel(compute, kernel, 2, nullptr, global_pairs, local_2d, upload_count, uploads.data(), &attention_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_attention)", status);
  }

  if (wants_mass) {
    // The page-parallel partials hold (m_p, s_p) at the same index, with a wider stride.
    cl_kernel mk = mass_kernel_.get();
    const cl_uint ms_stride = split ? 2u + batch.shape.head_dim : 2u;
    clSetKernelArg(mk, 0, sizeof(params), &params);
    clSetKernelArg(mk, 1, sizeof(cl_mem), &table);
    clSetKernelArg(mk, 2, sizeof(cl_mem), split ? &partials : &pair_ms);
    clSetKernelArg(mk, 3, sizeof(cl_uint), &ms_stride);
    clSetKernelArg(mk, 4, sizeof(cl_mem), &final_ms);
    clSetKernelArg(mk, 5, sizeof(cl_mem), &mass);
    const std::size_t pages = batch.pages.size();
    status = clEnqueueNDRangeKernel(compute, mk, 1, nullptr, &pages, nullptr, 1, &attention_done, &mass_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_page_mass)", status);
    status = clEnqueueReadBuffer(compute, mass, CL_FALSE, 0, batch.page_mass.size() * 4, batch.page_mass.data(), 1,
                                 &mass_done, &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(page mass)", status);
    ++read_count;
  }
  if (batch.write_output) {
    status = clEnqueueReadBuffer(compute, out, CL_FALSE, 0, queries * head_elements * 4, batch.output.data(), 1,
                                 &attention_done, &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(output)", status);
    ++read_count;
  }
  if (batch.store_state) {
    status = clEnqueueReadBuffer(compute, state, CL_FALSE, 0, state_floats * 4, batch.state.data(), 1, &attention_done,
                                 &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(state)", status);
    ++read_count;
  }
  status = clEnqueueMarkerWithWaitList(compute, read_count, reads.data(), &final_event);
  if (status != CL_SUCCESS) return fail("clEnqueueMarkerWithWaitList(attention)", status);
  release_all();
  release_event(last_attention_);
  last_attention_ = final_event;
  clRetainEvent(last_attention_);
  return bind(fence, final_event, QueueKind::compute);
}

}  // namespace activekv::opencl::detail
