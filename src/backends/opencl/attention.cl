// attention.cl — exact paged attention in OpenCL C.
//
// One launch covers a batch of tasks (one context x one dense layer each). The
// page table names, for each page, the arena byte offset of its first row (a
// pool page or a page inside a staged tile: the kernel cannot tell and must
// not care), the token index of that row and how many rows are valid.
//
//   a page's partial  (ak_page_partial) in fp32: pass 1 the maximum m_p of the
//                     visible scores, pass 2 s_p = Σ exp(score − m_p) and
//                     acc_p = Σ exp(score − m_p)·v over rows in ascending token
//                     order, K/V widened to fp32 first.
//   the merge         (ak_merge) of a page's partial into the running state
//                     (m, s, acc), pages in ascending order; out = acc / s.
//
// Two schedules compute exactly this, bit for bit:
//   ak_attention       sequential: one work-item per (query row, q_head) computes
//                      and merges each page in turn (no scratch beyond page mass).
//   ak_page_partials + page-parallel: one work-item per (page, q_head, query of
//   ak_merge_partials  the page's task) writes the page's partial to scratch;
//                      then one work-item per (query row, q_head) merges them in
//                      ascending page order. Same helper functions, same order,
//                      FP_CONTRACT off: the scratch round trip is exact, so the
//                      two schedules agree bit for bit (tested). The host picks
//                      the parallel one when the scratch holds the batch.
//   ak_page_mass       one work-item per page: the page's share of softmax mass
//                      over all (query, head) pairs of its task, from each pair's
//                      (m_p, s_p) and final (m, s). Fixed summation order.
//
// A page's partial is computed by the same code from the same bytes wherever
// they live, and the merge order is fixed, so outputs are bit-identical between
// an all-resident layout and a mixed one (DESIGN.md invariant 8). The host
// builds this program without -cl-fast-relaxed-math or -cl-mad-enable.
//
// Parameters arrive packed in one buffer (attention_pack.hpp):
//   page_offsets  ulong[pages]   page_first uint[pages]  page_tokens uint[pages]
//   page_task     uint[pages]    positions  uint[queries] query_task uint[queries]
//   task_page_begin, task_page_count, task_query_begin, task_query_count,
//   task_mass_first  uint[tasks] each, page_heads uint[pages]
// page_heads (sparse attention's per-KV-head page lists): bit k set = the query
// heads of KV head k read the page; for the others it counts as no visible row
// (s_p = 0: not merged, no mass), so each head merges its own pages in order.
// Data buffers (dense, row-major):
//   q      [queries][q_heads][head_dim]            fp32
//   out    [queries][q_heads][head_dim]            fp32
//   state  [queries][q_heads][2 + head_dim]        m, s, acc
//   pair_ms[task_mass_first[t] + (k·q_heads + h)·page_count + p][ms_stride]  m_p, s_p
//            (k: the query's row within its task; ms_stride 2 in the sequential
//            schedule, 2 + head_dim when the page-parallel partials double as it)
//   final_ms [queries][q_heads][2]                 the pair's final m, s
//   mass   [pages]
// dtype codes follow activekv::DType: 0 f32, 1 f16, 2 bf16. bf16 is widened by
// a 16-bit shift (exact); f16 by vload_half (exact; needs no cl_khr_fp16).
// AK_HEAD_DIM_MAX is defined by the host at build time (MemoryRequest::head_dim_max).

#pragma OPENCL FP_CONTRACT OFF

#define AK_DTYPE_F32 0u
#define AK_DTYPE_F16 1u
#define AK_DTYPE_BF16 2u

#define AK_LOAD_STATE 1u
#define AK_STORE_STATE 2u
#define AK_WRITE_OUTPUT 4u
#define AK_PAGE_MASS 8u

#ifndef AK_HEAD_DIM_MAX
#define AK_HEAD_DIM_MAX 256
#endif

typedef struct {
  uint pages;
  uint queries;
  uint tasks;
  uint q_heads;
  uint kv_heads;
  uint head_dim;
  uint dtype;
  uint flags;
  float scale;
  // Element offsets of each packed array inside the parameter slot (in units of its type).
  uint off_page_first;
  uint off_page_tokens;
  uint off_page_task;
  uint off_positions;
  uint off_query_task;
  uint off_task_page_begin;
  uint off_task_page_count;
  uint off_task_query_begin;
  uint off_task_query_count;
  uint off_task_mass_first;
  uint off_page_heads;
} ak_params;

// Typed loads: `element` counts elements of the row's dtype from `base`. The host
// refuses page offsets that are not a multiple of the element size, so the
// typed pointers are aligned.
inline float ak_load_f32(__global const uchar* base, ulong element) {
  return ((__global const float*)base)[element];
}
inline float ak_load_f16(__global const uchar* base, ulong element) {
  return vload_half(element, (__global const half*)base);
}
inline float ak_load_bf16(__global const uchar* base, ulong element) {
  return as_float((uint)((__global const ushort*)base)[element] << 16);
}

// The page's partial for one (query, head): m_p, s_p and acc_p[head_dim]. One
// body per dtype (the macro), so the inner loops carry no dtype branch.
#define AK_DEFINE_PAGE_PARTIAL(TYPE)                                                                         \
  inline void ak_page_partial_##TYPE(__global const float* qv, __global const uchar* base, uint visible,      \
                                     ulong row_elements, ulong k_first, ulong v_first, uint head_dim,        \
                                     float scale, float* m_out, float* s_out, float* acc_p) {                \
    float m_p = -INFINITY;                                                                                   \
    for (uint r = 0; r < visible; ++r) {                                                                     \
      const ulong k = (ulong)r * row_elements + k_first;                                                     \
      float dot = 0.0f;                                                                                      \
      for (uint d = 0; d < head_dim; ++d) dot += qv[d] * ak_load_##TYPE(base, k + d);                       \
      m_p = fmax(m_p, dot * scale);                                                                          \
    }                                                                                                        \
    float s_p = 0.0f;                                                                                        \
    for (uint d = 0; d < head_dim; ++d) acc_p[d] = 0.0f;                                                     \
    for (uint r = 0; r < visible; ++r) {                                                                     \
      const ulong k = (ulong)r * row_elements + k_first;                                                     \
      const ulong v = (ulong)r * row_elements + v_first;                                                     \
      float dot = 0.0f;                                                                                      \
      for (uint d = 0; d < head_dim; ++d) dot += qv[d] * ak_load_##TYPE(base, k + d);                       \
      const float w = exp(dot * scale - m_p);                                                                \
      s_p += w;                                                                                              \
      for (uint d = 0; d < head_dim; ++d) acc_p[d] += w * ak_load_##TYPE(base, v + d);                      \
    }                                                                                                        \
    *m_out = m_p;                                                                                            \
    *s_out = s_p;                                                                                            \
  }
AK_DEFINE_PAGE_PARTIAL(f32)
AK_DEFINE_PAGE_PARTIAL(f16)
AK_DEFINE_PAGE_PARTIAL(bf16)

inline void ak_page_partial(__global const float* qv, __global const uchar* base, uint visible, ulong row_elements,
                            ulong k_first, ulong v_first, uint head_dim, uint dtype, float scale,
                            float* m_out, float* s_out, float* acc_p) {
  if (dtype == AK_DTYPE_F16) {
    ak_page_partial_f16(qv, base, visible, row_elements, k_first, v_first, head_dim, scale, m_out, s_out, acc_p);
  } else if (dtype == AK_DTYPE_BF16) {
    ak_page_partial_bf16(qv, base, visible, row_elements, k_first, v_first, head_dim, scale, m_out, s_out, acc_p);
  } else {
    ak_page_partial_f32(qv, base, visible, row_elements, k_first, v_first, head_dim, scale, m_out, s_out, acc_p);
  }
}

// Merges a page's partial into the running state.
inline void ak_merge(float* m, float* s, float* acc, float m_p, float s_p, const float* acc_p, uint head_dim) {
  if (s_p == 0.0f) return;  // no visible token in this page
  const float mm = fmax(*m, m_p);
  const float x = (*s == 0.0f) ? 0.0f : exp(*m - mm);
  const float y = exp(m_p - mm);
  *s = *s * x + s_p * y;
  for (uint d = 0; d < head_dim; ++d) acc[d] = acc[d] * x + acc_p[d] * y;
  *m = mm;
}

inline void ak_start(const ak_params a, __global const float* state, ulong pair, float* m, float* s, float* acc) {
  *m = -INFINITY;
  *s = 0.0f;
  if ((a.flags & AK_LOAD_STATE) != 0u) {
    __global const float* st = state + pair * (2ul + a.head_dim);
    *m = st[0];
    *s = st[1];
    for (uint d = 0; d < a.head_dim; ++d) acc[d] = st[2 + d];
  } else {
    for (uint d = 0; d < a.head_dim; ++d) acc[d] = 0.0f;
  }
}

inline void ak_finish(const ak_params a, ulong pair, float m, float s, const float* acc, __global float* out,
                      __global float* state, __global float* final_ms) {
  if ((a.flags & AK_STORE_STATE) != 0u) {
    __global float* st = state + pair * (2ul + a.head_dim);
    st[0] = m;
    st[1] = s;
    for (uint d = 0; d < a.head_dim; ++d) st[2 + d] = acc[d];
  }
  if ((a.flags & AK_WRITE_OUTPUT) != 0u) {
    __global float* o = out + pair * a.head_dim;
    for (uint d = 0; d < a.head_dim; ++d) o[d] = (s == 0.0f) ? 0.0f : acc[d] / s;
  }
  if ((a.flags & AK_PAGE_MASS) != 0u) {
    final_ms[2ul * pair] = m;
    final_ms[2ul * pair + 1ul] = s;
  }
}

// Rows of a page a query at `position` may see.
inline uint ak_visible(uint position, uint first_token, uint tokens) {
  return position >= first_token ? min(tokens, position - first_token + 1u) : 0u;
}

__kernel void ak_attention(const ak_params a,
                           __global const uchar* arena,
                           __global const ulong* page_offsets,  // the parameter slot; uint arrays follow
                           __global const float* q,
                           __global float* out,
                           __global float* state,
                           __global float* pair_ms,
                           __global float* final_ms) {
  const uint qi = (uint)get_global_id(0);
  const uint head = (uint)get_global_id(1);
  if (qi >= a.queries || head >= a.q_heads) return;
  __global const uint* words = (__global const uint*)page_offsets;
  const uint task = words[a.off_query_task + qi];
  if (task >= a.tasks) return;  // a row no task owns
  const uint position = words[a.off_positions + qi];
  const uint page_begin = words[a.off_task_page_begin + task];
  const uint page_count = words[a.off_task_page_count + task];
  const uint query_begin = words[a.off_task_query_begin + task];
  const uint mass_first = words[a.off_task_mass_first + task];
  const uint kv_head = head / (a.q_heads / a.kv_heads);
  const ulong row_elements = 2ul * a.kv_heads * a.head_dim;
  const ulong k_first = (ulong)kv_head * a.head_dim;
  const ulong v_first = (ulong)a.kv_heads * a.head_dim + k_first;
  const ulong pair = (ulong)qi * a.q_heads + head;
  __global const float* qv = q + pair * a.head_dim;

  float m, s;
  float acc[AK_HEAD_DIM_MAX];
  float acc_p[AK_HEAD_DIM_MAX];
  ak_start(a, state, pair, &m, &s, acc);
  for (uint i = 0; i < page_count; ++i) {
    const uint page = page_begin + i;
    const uint visible = ((words[a.off_page_heads + page] >> kv_head) & 1u) == 0u
                             ? 0u
                             : ak_visible(position, words[a.off_page_first + page], words[a.off_page_tokens + page]);
    float m_p, s_p;
    ak_page_partial(qv, arena + page_offsets[page], visible, row_elements, k_first, v_first, a.head_dim, a.dtype,
                    a.scale, &m_p, &s_p, acc_p);
    if ((a.flags & AK_PAGE_MASS) != 0u) {
      __global float* ms = pair_ms + 2ul * (mass_first + ((ulong)(qi - query_begin) * a.q_heads + head) * page_count + i);
      ms[0] = m_p;
      ms[1] = s_p;
    }
    ak_merge(&m, &s, acc, m_p, s_p, acc_p, a.head_dim);
  }
  ak_finish(a, pair, m, s, acc, out, state, final_ms);
}

// Page-parallel schedule, step 1: global (pages, q_heads, largest query_count).
__kernel void ak_page_partials(const ak_params a,
                               __global const uchar* arena,
                               __global const ulong* page_offsets,
                               __global const float* q,
                               __global float* partials) {
  const uint page = (uint)get_global_id(0);
  const uint head = (uint)get_global_id(1);
  const uint k = (uint)get_global_id(2);
  if (page >= a.pages || head >= a.q_heads) return;
  __global const uint* words = (__global const uint*)page_offsets;
  const uint task = words[a.off_page_task + page];
  if (task >= a.tasks || k >= words[a.off_task_query_count + task]) return;
  const uint page_begin = words[a.off_task_page_begin + task];
  const uint page_count = words[a.off_task_page_count + task];
  const uint qi = words[a.off_task_query_begin + task] + k;
  const uint mass_first = words[a.off_task_mass_first + task];
  const uint kv_head = head / (a.q_heads / a.kv_heads);
  const ulong row_elements = 2ul * a.kv_heads * a.head_dim;
  const ulong k_first = (ulong)kv_head * a.head_dim;
  const ulong v_first = (ulong)a.kv_heads * a.head_dim + k_first;
  __global const float* qv = q + ((ulong)qi * a.q_heads + head) * a.head_dim;
  const uint visible = ((words[a.off_page_heads + page] >> kv_head) & 1u) == 0u
                           ? 0u
                           : ak_visible(words[a.off_positions + qi], words[a.off_page_first + page],
                                        words[a.off_page_tokens + page]);

  float m_p, s_p;
  float acc_p[AK_HEAD_DIM_MAX];
  ak_page_partial(qv, arena + page_offsets[page], visible, row_elements, k_first, v_first, a.head_dim, a.dtype, a.scale,
                  &m_p, &s_p, acc_p);
  __global float* part = partials + (2ul + a.head_dim) *
                                        (mass_first + ((ulong)k * a.q_heads + head) * page_count + (page - page_begin));
  part[0] = m_p;
  part[1] = s_p;
  for (uint d = 0; d < a.head_dim; ++d) part[2 + d] = acc_p[d];
}

// Page-parallel schedule, step 2: global (queries, q_heads).
__kernel void ak_merge_partials(const ak_params a,
                                __global const ulong* page_offsets,
                                __global const float* partials,
                                __global float* out,
                                __global float* state,
                                __global float* final_ms) {
  const uint qi = (uint)get_global_id(0);
  const uint head = (uint)get_global_id(1);
  if (qi >= a.queries || head >= a.q_heads) return;
  __global const uint* words = (__global const uint*)page_offsets;
  const uint task = words[a.off_query_task + qi];
  if (task >= a.tasks) return;
  const uint page_count = words[a.off_task_page_count + task];
  const uint k = qi - words[a.off_task_query_begin + task];
  const uint mass_first = words[a.off_task_mass_first + task];
  const ulong pair = (ulong)qi * a.q_heads + head;

  float m, s;
  float acc[AK_HEAD_DIM_MAX];
  float acc_p[AK_HEAD_DIM_MAX];
  ak_start(a, state, pair, &m, &s, acc);
  for (uint i = 0; i < page_count; ++i) {
    __global const float* part = partials + (2ul + a.head_dim) * (mass_first + ((ulong)k * a.q_heads + head) * page_count + i);
    for (uint d = 0; d < a.head_dim; ++d) acc_p[d] = part[2 + d];
    ak_merge(&m, &s, acc, part[0], part[1], acc_p, a.head_dim);
  }
  ak_finish(a, pair, m, s, acc, out, state, final_ms);
}

__kernel void ak_page_mass(const ak_params a,
                           __global const ulong* page_offsets,
                           __global const float* pair_ms,
                           const uint ms_stride,
                           __global const float* final_ms,
                           __global float* mass) {
  const uint page = (uint)get_global_id(0);
  if (page >= a.pages) return;
  __global const uint* words = (__global const uint*)page_offsets;
  const uint task = words[a.off_page_task + page];
  if (task >= a.tasks) {  // a page no task names
    mass[page] = 0.0f;
    return;
  }
  const uint page_begin = words[a.off_task_page_begin + task];
  const uint page_count = words[a.off_task_page_count + task];
  const uint query_begin = words[a.off_task_query_begin + task];
  const uint query_count = words[a.off_task_query_count + task];
  const uint mass_first = words[a.off_task_mass_first + task];
  const uint i = page - page_begin;

  float sum = 0.0f;
  for (uint k = 0; k < query_count; ++k) {
    for (uint head = 0; head < a.q_heads; ++head) {
      const ulong pair = (ulong)(query_begin + k) * a.q_heads + head;
      const float m = final_ms[2ul * pair];
      const float s = final_ms[2ul * pair + 1ul];
      __global const float* ms = pair_ms + (ulong)ms_stride * (mass_first + ((ulong)k * a.q_heads + head) * page_count + i);
      if (s == 0.0f || ms[1] == 0.0f) continue;
      sum += ms[1] * exp(ms[0] - m) / s;
    }
  }
  const uint pairs = query_count * a.q_heads;
  mass[page] = (pairs == 0u) ? 0.0f : sum / (float)pairs;
}
