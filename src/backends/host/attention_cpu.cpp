// attention_cpu.cpp — the host backend's paged attention kernel (see attention_cpu.hpp).
//
// Two builds of the three inner loops (widen to fp32, dot, axpy): AVX2 + F16C +
// FMA where the CPU has them (chosen once per process), portable C++ elsewhere.
// Each path sums in a fixed order, so results are reproducible on one machine;
// the paths differ from each other only by rounding.
#include "backends/host/attention_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AK_HAVE_X86 1
#endif

namespace activekv::host {

namespace {

constexpr std::uint32_t block_rows = 64;    // rows per score block inside a page
constexpr std::uint32_t group_max = 16;     // query heads per kv head the stack arrays hold
constexpr std::uint32_t dim_max = 512;      // head_dim the stack arrays hold
constexpr float minus_infinity = -std::numeric_limits<float>::infinity();

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

float bf16_to_f32(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// ---- portable inner loops ----------------------------------------------------

void widen_portable(const std::byte* src, DType dtype, std::uint32_t n, float* dst) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst, src, std::size_t{n} * 4); return;
    case DType::f16:
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::bf16:
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
  }
}

float dot_portable(const float* a, const float* b, std::uint32_t n) {
  float lanes[8] = {};
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::uint32_t l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) lanes[i % 8] += a[i] * b[i];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

void axpy_portable(float* acc, float p, const float* v, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) acc[i] += p * v[i];
}

// ---- AVX2 + F16C + FMA ---------------------------------------------------------

#ifdef AK_HAVE_X86
__attribute__((target("avx2,fma,f16c"))) void widen_avx2(const std::byte* src, DType dtype, std::uint32_t n, float* dst) {
  std::uint32_t i = 0;
  if (dtype == DType::f16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  } else if (dtype == DType::bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(wide));
    }
  }
  if (i < n) widen_portable(src + std::size_t{i} * dtype_bytes(dtype), dtype, n - i, dst + i);
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, std::uint32_t n) {
  __m256 sum = _mm256_setzero_ps();
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) sum = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), sum);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  for (; i < n; ++i) lanes[i % 8] += a[i] * b[i];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float* acc, float p, const float* v, std::uint32_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += p * v[i];
}

bool detect_avx2() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#else
bool detect_avx2() noexcept { return false; }
#endif

struct Ops {
  void (*widen)(const std::byte*, DType, std::uint32_t, float*);
  float (*dot)(const float*, const float*, std::uint32_t);
  void (*axpy)(float*, float, const float*, std::uint32_t);
};

const Ops& ops() noexcept {
#ifdef AK_HAVE_X86
  static const Ops chosen = detect_avx2() ? Ops{widen_avx2, dot_avx2, axpy_avx2}
                                          : Ops{widen_portable, dot_portable, axpy_portable};
#else
  static const Ops chosen{widen_portable, dot_portable, axpy_portable};
#endif
  return chosen;
}

std::uint32_t visible_rows(const AttentionPage& page, std::uint32_t position) {
  if (position < page.first_token) return 0;
  return std::min<std::uint64_t>(page.tokens, std::uint64_t{position} - page.first_token + 1) & 0xffffffffu;
}

// The running state of one unit: G heads' (m, s, acc).
struct UnitState {
  float m[group_max];
  float s[group_max];
  float acc[group_max * dim_max];
};

// One page's partial for the G heads of one unit, merged into `run`.
void attend_page(const Ops& op, const std::byte* page_bytes, std::uint32_t rows, const AttentionShape& shape,
                 std::uint32_t kv_head, const float* q, std::uint32_t group, UnitState& run, float* page_log_mass) {
  const std::uint32_t dim = shape.head_dim;
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint64_t head_bytes = std::uint64_t{dim} * dtype_bytes(shape.dtype);
  const std::uint64_t k_offset = kv_head * head_bytes;
  const std::uint64_t v_offset = shape.kv_heads * head_bytes + kv_head * head_bytes;

  float pm[group_max], ps[group_max];
  float pacc[group_max * dim_max];
  float scores[group_max][block_rows];
  float row[dim_max];
  for (std::uint32_t h = 0; h < group; ++h) {
    pm[h] = minus_infinity;
    ps[h] = 0.0f;
  }
  std::fill(pacc, pacc + std::size_t{group} * dim, 0.0f);

  for (std::uint32_t first = 0; first < rows; first += block_rows) {
    const std::uint32_t count = std::min(block_rows, rows - first);
    for (std::uint32_t r = 0; r < count; ++r) {
      op.widen(page_bytes + (first + r) * row_bytes + k_offset, shape.dtype, dim, row);
      for (std::uint32_t h = 0; h < group; ++h) scores[h][r] = op.dot(q + std::size_t{h} * dim, row, dim) * shape.scale;
    }
    float scale_old[group_max];
    for (std::uint32_t h = 0; h < group; ++h) {
      float block_max = scores[h][0];
      for (std::uint32_t r = 1; r < count; ++r) block_max = std::max(block_max, scores[h][r]);
      const float m_new = std::max(pm[h], block_max);
      scale_old[h] = std::exp(pm[h] - m_new);  // 0 for the first block (pm = -inf)
      ps[h] *= scale_old[h];
      for (std::uint32_t r = 0; r < count; ++r) {
        scores[h][r] = std::exp(scores[h][r] - m_new);
        ps[h] += scores[h][r];
      }
      pm[h] = m_new;
      if (scale_old[h] != 1.0f) {
        float* a = pacc + std::size_t{h} * dim;
        for (std::uint32_t d = 0; d < dim; ++d) a[d] *= scale_old[h];
      }
    }
    for (std::uint32_t r = 0; r < count; ++r) {
      op.widen(page_bytes + (first + r) * row_bytes + v_offset, shape.dtype, dim, row);
      for (std::uint32_t h = 0; h < group; ++h) op.axpy(pacc + std::size_t{h} * dim, scores[h][r], row, dim);
    }
  }

  for (std::uint32_t h = 0; h < group; ++h) {
    const float m_new = std::max(run.m[h], pm[h]);
    const float old_scale = std::exp(run.m[h] - m_new);
    const float page_scale = std::exp(pm[h] - m_new);
    run.s[h] = run.s[h] * old_scale + ps[h] * page_scale;
    float* a = run.acc + std::size_t{h} * dim;
    const float* p = pacc + std::size_t{h} * dim;
    for (std::uint32_t d = 0; d < dim; ++d) a[d] = a[d] * old_scale + p[d] * page_scale;
    run.m[h] = m_new;
    if (page_log_mass != nullptr) page_log_mass[h] = pm[h] + std::log(ps[h]);
  }
}

}  // namespace

bool attention_cpu_uses_avx2() noexcept { return ops().dot != dot_portable; }

void AttentionJob::reserve(const MemoryRequest& limits) {
  tasks.reserve(limits.batch_tasks_max);
  pages.reserve(limits.batch_pages_max);
  positions.reserve(limits.batch_queries_max);
  query_task.reserve(limits.batch_queries_max);
}

void AttentionJob::assign(const AttentionBatch& batch) {
  AK_ASSERT(batch.tasks.size() <= tasks.capacity(), "attention job: tasks beyond the reserved limit");
  AK_ASSERT(batch.pages.size() <= pages.capacity(), "attention job: pages beyond the reserved limit");
  AK_ASSERT(batch.query_positions.size() <= positions.capacity(), "attention job: queries beyond the reserved limit");
  shape = batch.shape;
  tasks.assign(batch.tasks.begin(), batch.tasks.end());
  pages.assign(batch.pages.begin(), batch.pages.end());
  positions.assign(batch.query_positions.begin(), batch.query_positions.end());
  query_task.assign(positions.size(), UINT32_MAX);
  for (std::uint32_t t = 0; t < tasks.size(); ++t) {
    for (std::uint32_t i = 0; i < tasks[t].query_count; ++i) query_task[tasks[t].query_begin + i] = t;
  }
  queries = batch.queries.data();
  output = batch.write_output ? batch.output.data() : nullptr;
  page_mass = batch.page_mass.empty() ? nullptr : batch.page_mass.data();
  state = batch.state.empty() ? nullptr : batch.state.data();
  load_state = batch.load_state;
  store_state = batch.store_state;
  write_output = batch.write_output;
}

void AttentionScratch::reserve(const MemoryRequest& limits) {
  log_mass.assign(std::size_t{limits.batch_pages_max} * std::min(limits.q_heads_max, group_max), 0.0f);
  mass.assign(limits.batch_pages_max, 0.0f);
}

void run_attention_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin,
                         std::uint32_t unit_end, AttentionScratch& scratch) {
  const Ops& op = ops();
  const AttentionShape& shape = job.shape;
  const std::uint32_t group = shape.q_heads / shape.kv_heads;
  const std::uint32_t dim = shape.head_dim;
  AK_ASSERT(group <= group_max, "attention: more than 16 query heads per kv head");
  AK_ASSERT(dim <= dim_max, "attention: head_dim above 512");
  const bool want_mass = job.page_mass != nullptr;
  UnitState run;

  for (std::uint32_t unit = unit_begin; unit < unit_end; ++unit) {
    const std::uint32_t query = unit / shape.kv_heads;
    const std::uint32_t kv_head = unit % shape.kv_heads;
    const std::uint32_t task_index = job.query_task[query];
    if (task_index == UINT32_MAX) continue;  // a row no task owns: left untouched
    const AttentionTask& task = job.tasks[task_index];
    const std::uint32_t position = job.positions[query];
    const std::uint32_t head0 = kv_head * group;
    const float* q = job.queries + (std::size_t{query} * shape.q_heads + head0) * dim;

    for (std::uint32_t h = 0; h < group; ++h) {
      float* acc = run.acc + std::size_t{h} * dim;
      if (job.load_state) {
        const float* st = job.state + (std::size_t{query} * shape.q_heads + head0 + h) * (2 + dim);
        run.m[h] = st[0];
        run.s[h] = st[1];
        std::memcpy(acc, st + 2, std::size_t{dim} * 4);
      } else {
        run.m[h] = minus_infinity;
        run.s[h] = 0.0f;
        std::fill(acc, acc + dim, 0.0f);
      }
    }

    for (std::uint32_t i = 0; i < task.page_count; ++i) {
      const AttentionPage& page = job.pages[task.page_begin + i];
      const std::uint32_t rows = visible_rows(page, position);
      if (rows == 0) continue;
      float* log_mass = want_mass ? scratch.log_mass.data() + std::size_t{task.page_begin + i} * group : nullptr;
      attend_page(op, arena + page.arena_offset, rows, shape, kv_head, q, group, run, log_mass);
    }

    for (std::uint32_t h = 0; h < group; ++h) {
      const std::size_t head = std::size_t{query} * shape.q_heads + head0 + h;
      const float* acc = run.acc + std::size_t{h} * dim;
      if (job.write_output) {
        float* out = job.output + head * dim;
        const float inv = run.s[h] > 0.0f ? 1.0f / run.s[h] : 0.0f;
        for (std::uint32_t d = 0; d < dim; ++d) out[d] = acc[d] * inv;
      }
      if (job.store_state) {
        float* st = job.state + head * (2 + dim);
        st[0] = run.m[h];
        st[1] = run.s[h];
        std::memcpy(st + 2, acc, std::size_t{dim} * 4);
      }
    }

    if (want_mass) {
      for (std::uint32_t i = 0; i < task.page_count; ++i) {
        const std::uint32_t p = task.page_begin + i;
        if (visible_rows(job.pages[p], position) == 0) continue;
        const float* log_mass = scratch.log_mass.data() + std::size_t{p} * group;
        float sum = 0.0f;
        for (std::uint32_t h = 0; h < group; ++h) {
          if (run.s[h] > 0.0f) sum += std::exp(log_mass[h] - run.m[h]) / run.s[h];
        }
        scratch.mass[p] += sum;
      }
    }
  }
}

void finish_page_mass(const AttentionJob& job, float* page_mass) {
  for (const AttentionTask& task : job.tasks) {
    const float share = 1.0f / (static_cast<float>(task.query_count) * static_cast<float>(job.shape.q_heads));
    for (std::uint32_t i = 0; i < task.page_count; ++i) page_mass[task.page_begin + i] *= share;
  }
}

void attention_reference(const std::byte* arena, const AttentionBatch& batch, std::span<float> output) {
  const AttentionShape& shape = batch.shape;
  const std::uint32_t dim = shape.head_dim;
  const std::uint32_t group = shape.q_heads / shape.kv_heads;
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint64_t head_bytes = std::uint64_t{dim} * dtype_bytes(shape.dtype);
  std::vector<float> k(dim), v(dim);
  std::vector<double> scores, acc(dim);
  for (const AttentionTask& task : batch.tasks) {
    for (std::uint32_t qi = task.query_begin; qi < task.query_begin + task.query_count; ++qi) {
      const std::uint32_t position = batch.query_positions[qi];
      for (std::uint32_t h = 0; h < shape.q_heads; ++h) {
        const std::uint32_t kv_head = h / group;
        const float* q = batch.queries.data() + (std::size_t{qi} * shape.q_heads + h) * dim;
        scores.clear();
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::uint32_t i = 0; i < task.page_count; ++i) {
          const AttentionPage& page = batch.pages[task.page_begin + i];
          for (std::uint32_t r = 0; r < visible_rows(page, position); ++r) {
            widen_portable(arena + page.arena_offset + r * row_bytes + kv_head * head_bytes, shape.dtype, dim, k.data());
            double dot = 0.0;
            for (std::uint32_t d = 0; d < dim; ++d) dot += double{q[d]} * double{k[d]};
            scores.push_back(dot * shape.scale);
            max_score = std::max(max_score, scores.back());
          }
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        std::size_t index = 0;
        for (std::uint32_t i = 0; i < task.page_count; ++i) {
          const AttentionPage& page = batch.pages[task.page_begin + i];
          for (std::uint32_t r = 0; r < visible_rows(page, position); ++r) {
            const double p = std::exp(scores[index++] - max_score);
            sum += p;
            widen_portable(arena + page.arena_offset + r * row_bytes + (shape.kv_heads + kv_head) * head_bytes,
                           shape.dtype, dim, v.data());
            for (std::uint32_t d = 0; d < dim; ++d) acc[d] += p * v[d];
          }
        }
        float* out = output.data() + (std::size_t{qi} * shape.q_heads + h) * dim;
        for (std::uint32_t d = 0; d < dim; ++d) out[d] = sum > 0.0 ? static_cast<float>(acc[d] / sum) : 0.0f;
      }
    }
  }
}

}  // namespace activekv::host
