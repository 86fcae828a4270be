// attention_cpu_kernel.hpp — the body of the CPU kernel, compiled once per instruction set.
//
// Not a normal header: a translation unit defines, in its own namespace, the
// inner loops this body calls —
//
//   widen(src, dtype, n, dst)      n elements of K or V to fp32
//   dot(a, b, n)                   fp32 dot product, fixed summation order
//   axpy(acc, p, v, n)             acc += p * v
//   exp_shifted(x, n, m)           x[i] = exp(x[i] - m)
//
// — and then includes this file inside that namespace. attention_cpu_portable.cpp
// builds it with portable C++, attention_cpu_avx2.cpp with AVX2 + F16C + FMA
// (that file alone is compiled with those flags), and attention_cpu.cpp picks
// one per process. Inlining the loops into one body is what makes the kernel
// run near the speed of its arithmetic rather than of its calls.
//
// The algorithm is documented in attention_cpu.hpp.

constexpr std::uint32_t block_rows = 64;  // rows per score block inside a page
constexpr std::uint32_t prefetch_rows = 4; // rows ahead whose bytes are prefetched
constexpr float minus_infinity = -std::numeric_limits<float>::infinity();

inline std::uint32_t visible_rows(const AttentionPage& page, std::uint32_t position) {
  if (position < page.first_token) return 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(page.tokens, std::uint64_t{position} - page.first_token + 1));
}

// The heads one unit owns: kv heads [kv_begin, kv_end) and their query heads
// [kv_begin·G, kv_end·G) — contiguous bytes in every row, read front to back.
struct UnitHeads {
  std::uint32_t kv_begin, kv_end, group, dim;
  std::uint32_t q_heads() const { return (kv_end - kv_begin) * group; }
};

// One page's partial for every head of the unit, merged into the running
// state (m, s, acc in scratch). Per head the arithmetic is exactly the
// per-page algorithm of attention_cpu.hpp; heads do not interact.
inline void attend_page(const std::byte* page_bytes, std::uint32_t rows, const AttentionShape& shape,
                        const UnitHeads& unit, const float* q, AttentionScratch& scratch, float* page_log_mass) {
  const std::uint32_t dim = unit.dim;
  const std::uint32_t heads = unit.q_heads();
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint64_t head_bytes = std::uint64_t{dim} * dtype_bytes(shape.dtype);
  const std::uint64_t k_offset = unit.kv_begin * head_bytes;
  const std::uint64_t v_offset = (shape.kv_heads + unit.kv_begin) * head_bytes;
  const std::uint64_t span_bytes = (unit.kv_end - unit.kv_begin) * head_bytes;

  float* pm = scratch.page_m.data();
  float* ps = scratch.page_s.data();
  float* pacc = scratch.page_acc.data();
  float* scores = scratch.scores.data();  // [heads][block_rows]
  float* row = scratch.row.data();        // [kv heads of the unit][dim]
  for (std::uint32_t h = 0; h < heads; ++h) {
    pm[h] = minus_infinity;
    ps[h] = 0.0f;
  }
  std::fill(pacc, pacc + std::size_t{heads} * dim, 0.0f);

  for (std::uint32_t first = 0; first < rows; first += block_rows) {
    const std::uint32_t count = std::min(block_rows, rows - first);
    for (std::uint32_t r = 0; r < count; ++r) {
      const std::byte* row_bytes_at = page_bytes + (first + r) * row_bytes;
      if (first + r + prefetch_rows < rows) {
        const std::byte* ahead = row_bytes_at + prefetch_rows * row_bytes;
        for (std::uint64_t b = 0; b < span_bytes; b += 64) __builtin_prefetch(ahead + k_offset + b);
      }
      widen(row_bytes_at + k_offset, shape.dtype, (unit.kv_end - unit.kv_begin) * dim, row);
      for (std::uint32_t h = 0; h < heads; ++h) {
        scores[std::size_t{h} * block_rows + r] = dot(q + std::size_t{h} * dim, row + std::size_t{h / unit.group} * dim, dim) * shape.scale;
      }
    }
    for (std::uint32_t h = 0; h < heads; ++h) {
      float* sc = scores + std::size_t{h} * block_rows;
      float block_max = sc[0];
      for (std::uint32_t r = 1; r < count; ++r) block_max = std::max(block_max, sc[r]);
      const float m_new = std::max(pm[h], block_max);
      const float scale_old = std::exp(pm[h] - m_new);  // 0 for the first block (pm = -inf)
      ps[h] *= scale_old;
      exp_shifted(sc, count, m_new);
      for (std::uint32_t r = 0; r < count; ++r) ps[h] += sc[r];
      pm[h] = m_new;
      if (scale_old != 1.0f) {
        float* a = pacc + std::size_t{h} * dim;
        for (std::uint32_t d = 0; d < dim; ++d) a[d] *= scale_old;
      }
    }
    for (std::uint32_t r = 0; r < count; ++r) {
      const std::byte* row_bytes_at = page_bytes + (first + r) * row_bytes;
      if (first + r + prefetch_rows < rows) {
        const std::byte* ahead = row_bytes_at + prefetch_rows * row_bytes;
        for (std::uint64_t b = 0; b < span_bytes; b += 64) __builtin_prefetch(ahead + v_offset + b);
      }
      widen(row_bytes_at + v_offset, shape.dtype, (unit.kv_end - unit.kv_begin) * dim, row);
      for (std::uint32_t h = 0; h < heads; ++h) {
        axpy(pacc + std::size_t{h} * dim, scores[std::size_t{h} * block_rows + r], row + std::size_t{h / unit.group} * dim, dim);
      }
    }
  }

  float* m = scratch.run_m.data();
  float* s = scratch.run_s.data();
  for (std::uint32_t h = 0; h < heads; ++h) {
    const float m_new = std::max(m[h], pm[h]);
    const float old_scale = std::exp(m[h] - m_new);
    const float page_scale = std::exp(pm[h] - m_new);
    s[h] = s[h] * old_scale + ps[h] * page_scale;
    float* a = scratch.run_acc.data() + std::size_t{h} * dim;
    const float* p = pacc + std::size_t{h} * dim;
    for (std::uint32_t d = 0; d < dim; ++d) a[d] = a[d] * old_scale + p[d] * page_scale;
    m[h] = m_new;
    if (page_log_mass != nullptr) page_log_mass[h] = pm[h] + std::log(ps[h]);
  }
}

void run_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin, std::uint32_t unit_end,
               AttentionScratch& scratch) {
  const AttentionShape& shape = job.shape;
  const std::uint32_t group = shape.q_heads / shape.kv_heads;
  const std::uint32_t dim = shape.head_dim;
  const std::uint32_t splits = job.kv_splits;
  AK_ASSERT(splits >= 1 && splits <= shape.kv_heads, "attention: kv head splits out of range");
  AK_ASSERT(std::size_t{shape.q_heads} * dim <= scratch.run_acc.size(), "attention: scratch smaller than the shape");
  const bool want_mass = job.page_mass != nullptr;
  float* m = scratch.run_m.data();
  float* s = scratch.run_s.data();
  float* acc_all = scratch.run_acc.data();

  for (std::uint32_t unit = unit_begin; unit < unit_end; ++unit) {
    const std::uint32_t query = unit / splits;
    const std::uint32_t split = unit % splits;
    const UnitHeads heads{shape.kv_heads * split / splits, shape.kv_heads * (split + 1) / splits, group, dim};
    const std::uint32_t head_count = heads.q_heads();
    const std::uint32_t task_index = job.query_task[query];
    if (task_index == UINT32_MAX || head_count == 0) continue;  // a row no task owns: left untouched
    const AttentionTask& task = job.tasks[task_index];
    const std::uint32_t position = job.positions[query];
    const std::uint32_t head0 = heads.kv_begin * group;
    const float* q = job.queries + (std::size_t{query} * shape.q_heads + head0) * dim;

    for (std::uint32_t h = 0; h < head_count; ++h) {
      float* acc = acc_all + std::size_t{h} * dim;
      if (job.load_state) {
        const float* st = job.state + (std::size_t{query} * shape.q_heads + head0 + h) * (2 + dim);
        m[h] = st[0];
        s[h] = st[1];
        std::memcpy(acc, st + 2, std::size_t{dim} * 4);
      } else {
        m[h] = minus_infinity;
        s[h] = 0.0f;
        std::fill(acc, acc + dim, 0.0f);
      }
    }

    for (std::uint32_t i = 0; i < task.page_count; ++i) {
      const AttentionPage& page = job.pages[task.page_begin + i];
      const std::uint32_t rows = visible_rows(page, position);
      if (rows == 0) continue;
      float* log_mass = want_mass ? scratch.log_mass.data() + std::size_t{task.page_begin + i} * shape.q_heads : nullptr;
      attend_page(arena + page.arena_offset, rows, shape, heads, q, scratch, log_mass);
    }

    for (std::uint32_t h = 0; h < head_count; ++h) {
      const std::size_t head = std::size_t{query} * shape.q_heads + head0 + h;
      const float* acc = acc_all + std::size_t{h} * dim;
      if (job.write_output) {
        float* out = job.output + head * dim;
        const float inv = s[h] > 0.0f ? 1.0f / s[h] : 0.0f;
        for (std::uint32_t d = 0; d < dim; ++d) out[d] = acc[d] * inv;
      }
      if (job.store_state) {
        float* st = job.state + head * (2 + dim);
        st[0] = m[h];
        st[1] = s[h];
        std::memcpy(st + 2, acc, std::size_t{dim} * 4);
      }
    }

    if (want_mass) {
      for (std::uint32_t i = 0; i < task.page_count; ++i) {
        const std::uint32_t p = task.page_begin + i;
        if (visible_rows(job.pages[p], position) == 0) continue;
        const float* log_mass = scratch.log_mass.data() + std::size_t{p} * shape.q_heads;
        float sum = 0.0f;
        for (std::uint32_t h = 0; h < head_count; ++h) {
          if (s[h] > 0.0f) sum += std::exp(log_mass[h] - m[h]) / s[h];
        }
        scratch.mass[p] += sum;
      }
    }
  }
}
