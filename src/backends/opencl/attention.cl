// attention.cl — exact paged attention in OpenCL C.
//
// One launch covers a batch of tasks (one context x one dense layer each). The
// page table names, for each page, the arena byte offset of its first row (a
// pool page or a page inside a staged tile: the kernel cannot tell and must
// not care), the token index of that row and how many rows are valid.
//
//   ak_attention  one work-item per (query row, q_head). Walks its task's pages
//                 in ascending order. For each page it computes the page's
//                 partial softmax state in fp32 — pass 1 the maximum m_p of the
//                 visible scores, pass 2 s_p = Σ exp(score − m_p) and
//                 acc_p = Σ exp(score − m_p)·v over rows in ascending token
//                 order, K/V widened to fp32 first — and merges it into the
//                 running state (m, s, acc). out = acc / s.
//   ak_page_mass  one work-item per page: the page's share of softmax mass over
//                 all (query, head) pairs of its task, from the (m_p, s_p) each
//                 pair wrote and the pair's final (m, s). Fixed summation order.
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
//   task_mass_first  uint[tasks] each
// Data buffers (dense, row-major):
//   q      [queries][q_heads][head_dim]            fp32
//   out    [queries][q_heads][head_dim]            fp32
//   state  [queries][q_heads][2 + head_dim]        m, s, acc
//   pair_ms[task_mass_first[t] + (qi·q_heads + h)·page_count + p][2]   m_p, s_p
//   final_ms [queries][q_heads][2]                 the pair's final m, s
//   mass   [pages]
// dtype codes follow activekv::DType: 0 f32, 1 f16, 2 bf16. bf16 is widened by
// a 16-bit shift (exact); f16 by vload_half (exact; needs no cl_khr_fp16).
// AK_HEAD_DIM_MAX is defined by the host at build time (MemoryRequest::head_dim_max).

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
} ak_params;

inline float ak_load(__global const uchar* base, ulong element, uint dtype) {
  if (dtype == AK_DTYPE_F16) {
    return vload_half(0, (__global const half*)(base + element * 2ul));
  }
  if (dtype == AK_DTYPE_BF16) {
    __global const uchar* p = base + element * 2ul;
    uint bits = ((uint)p[0] | ((uint)p[1] << 8)) << 16;
    return as_float(bits);
  }
  __global const uchar* p = base + element * 4ul;
  uint bits = (uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24);
  return as_float(bits);
}

inline float ak_dot(__global const float* qv, __global const uchar* base, ulong first, uint head_dim, uint dtype) {
  float dot = 0.0f;
  for (uint d = 0; d < head_dim; ++d) dot += qv[d] * ak_load(base, first + d, dtype);
  return dot;
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
  __global const uint* page_first = words + a.off_page_first;
  __global const uint* page_tokens = words + a.off_page_tokens;
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

  float m = -INFINITY;
  float s = 0.0f;
  float acc[AK_HEAD_DIM_MAX];
  float acc_p[AK_HEAD_DIM_MAX];
  if ((a.flags & AK_LOAD_STATE) != 0u) {
    __global const float* st = state + pair * (2ul + a.head_dim);
    m = st[0];
    s = st[1];
    for (uint d = 0; d < a.head_dim; ++d) acc[d] = st[2 + d];
  } else {
    for (uint d = 0; d < a.head_dim; ++d) acc[d] = 0.0f;
  }

  for (uint i = 0; i < page_count; ++i) {
    const uint page = page_begin + i;
    const uint first_token = page_first[page];
    uint visible = 0;
    if (position >= first_token) visible = min(page_tokens[page], position - first_token + 1u);
    __global const uchar* base = arena + page_offsets[page];

    float m_p = -INFINITY;
    for (uint r = 0; r < visible; ++r) {
      m_p = fmax(m_p, ak_dot(qv, base, (ulong)r * row_elements + k_first, a.head_dim, a.dtype) * a.scale);
    }
    float s_p = 0.0f;
    for (uint d = 0; d < a.head_dim; ++d) acc_p[d] = 0.0f;
    for (uint r = 0; r < visible; ++r) {
      const ulong row = (ulong)r * row_elements;
      const float w = exp(ak_dot(qv, base, row + k_first, a.head_dim, a.dtype) * a.scale - m_p);
      s_p += w;
      for (uint d = 0; d < a.head_dim; ++d) acc_p[d] += w * ak_load(base, row + v_first + d, a.dtype);
    }
    if ((a.flags & AK_PAGE_MASS) != 0u) {
      __global float* ms = pair_ms + 2ul * (mass_first + ((ulong)(qi - query_begin) * a.q_heads + head) * page_count + i);
      ms[0] = m_p;
      ms[1] = s_p;
    }
    if (s_p == 0.0f) continue;  // no visible token in this page
    const float mm = fmax(m, m_p);
    const float x = (s == 0.0f) ? 0.0f : exp(m - mm);
    const float y = exp(m_p - mm);
    s = s * x + s_p * y;
    for (uint d = 0; d < a.head_dim; ++d) acc[d] = acc[d] * x + acc_p[d] * y;
    m = mm;
  }

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

__kernel void ak_page_mass(const ak_params a,
                           __global const ulong* page_offsets,
                           __global const float* pair_ms,
                           __global const float* final_ms,
                           __global float* mass) {
  const uint page = (uint)get_global_id(0);
  if (page >= a.pages) return;
  __global const uint* words = (__global const uint*)page_offsets;
  const uint task = words[a.off_page_task + page];
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
      __global const float* ms = pair_ms + 2ul * (mass_first + ((ulong)k * a.q_heads + head) * page_count + i);
      if (s == 0.0f || ms[1] == 0.0f) continue;
      sum += ms[1] * exp(ms[0] - m) / s;
    }
  }
  const uint pairs = query_count * a.q_heads;
  mass[page] = (pairs == 0u) ? 0.0f : sum / (float)pairs;
}
