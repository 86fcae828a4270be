// attention_cpu_kernel.hpp — the body of the CPU kernel, compiled once per instruction set.
//
// Not a normal header: a translation unit defines, in its own namespace, the
// inner loops this body calls —
//
//   widen(src, dtype, n, dst)                       n elements of K or V to fp32
//   scores(q, k, stride, dtype, n, dim, heads, scale, out)
//                                                   out[h][r] = scale · q[h]·k[r] for rows r < n
//                                                   (rows at `stride` bytes), 0 for n ≤ r < 16
//   exp_sum(x, n, m)                                x[r] = exp(x[r] − m) for r < n, 0 after; the sum
//   exp16(x)                                        x[i] = exp(x[i]), i < 16, each lane on its own
//   values(acc, p, v, stride, dtype, n, dim, heads, fresh)
//                                                   acc[h][:] += p[h][r] · v[r][:] for r < n, in row order
//                                                   (from acc = 0 when fresh)
//   tile_max(x, n)                                  max of x[0..n)
//
// K and V are read either straight from the page (its dtype) or, when several
// queries share a tile, from an fp32 copy widened once for all of them. The
// widening is exact, so both give the same bits; only the loads differ.
//
// — and then includes this file inside that namespace. attention_cpu_portable.cpp
// builds it with portable C++, attention_cpu_avx2.cpp with AVX2 + F16C + FMA
// (that file alone is compiled with those flags), and attention_cpu.cpp picks
// one per process.
//
// Every inner loop computes each (query, head, lane) on its own: a lane's
// arithmetic never depends on how many queries share the tile, how many heads
// are processed together or which rows of the page other queries see. That is
// what makes a query's result the same bits in a prefill tile of any size and
// in a decode step (the kernel test checks it). The algorithm is documented in
// attention_cpu.hpp.

constexpr std::uint32_t block_rows = 16;   // rows per tile inside a page
constexpr std::uint32_t query_block = attention_tile_max;  // queries per prefill tile at most
constexpr float minus_infinity = -std::numeric_limits<float>::infinity();


// First page (relative to the task) of part `part` when `count` pages are cut into `parts`.
inline std::uint32_t split_point(std::uint32_t count, std::uint32_t parts, std::uint32_t part) {
  return static_cast<std::uint32_t>(std::uint64_t{count} * part / parts);
}

// (m, s, acc)[h] ← merge of (m, s, acc)[h] and a page partial (pm, ps, pacc)[h]
// for the `heads` heads of one query (m, s, pm, ps contiguous per head; acc,
// pacc `dim` per head). The two scales of 8 heads at a time go through exp16
// together; each head's arithmetic is its own, whatever the head count. One
// out-of-line copy, so every caller runs the same instructions.
// `mask` (page_heads): head h merges only if bit h / group is set; the others keep their state.
[[gnu::noinline]] void merge_partials(float* m, float* s, float* acc, const float* pm, const float* ps,
                                      const float* pacc, std::uint32_t heads, std::uint32_t dim,
                                      std::uint32_t mask = UINT32_MAX, std::uint32_t group = 1) {
  for (std::uint32_t h0 = 0; h0 < heads; h0 += 8) {
    const std::uint32_t n = std::min<std::uint32_t>(8, heads - h0);
    float scale[16] = {};  // [0, 8): e^(m - M), [8, 16): e^(pm - M); unused lanes e^0
    float m_new[8];
    for (std::uint32_t i = 0; i < n; ++i) {
      if (((mask >> ((h0 + i) / group)) & 1u) == 0) continue;
      m_new[i] = std::max(m[h0 + i], pm[h0 + i]);
      scale[i] = m[h0 + i] - m_new[i];
      scale[8 + i] = pm[h0 + i] - m_new[i];
    }
    exp16(scale);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t h = h0 + i;
      if (((mask >> (h / group)) & 1u) == 0) continue;
      const float old_scale = scale[i];
      const float page_scale = scale[8 + i];
      s[h] = s[h] * old_scale + ps[h] * page_scale;
      float* a = acc + std::size_t{h} * dim;
      const float* pa = pacc + std::size_t{h} * dim;
      for (std::uint32_t d = 0; d < dim; ++d) a[d] = a[d] * old_scale + pa[d] * page_scale;
      m[h] = m_new[i];
    }
  }
}

// The page partials of `count` queries over one page, all kv heads: pm, ps,
// pacc of query i, head h at [i·q_heads + h] (pacc × dim). K and V of each
// 16-row tile are widened once and used by every query and every head of the
// group. A query's rows are the page rows its position sees.
// `next` (may be null) is the page after this one: the bytes of it that the
// heads in `next_mask` read (their K and V of each row) are prefetched while
// this one is computed (pages are scattered through the arena, so the hardware
// prefetcher cannot follow), spread over this page's kv-head passes, into L2 (prefetcht1): a
// share is hundreds of lines, and prefetches into L1 wait for its few fill buffers, stalling the
// loads behind them (a decode over 8K tokens ran at less than half the speed with prefetcht0).
// Prefetching changes no arithmetic.
// `mask` (page_heads): only the KV heads whose bit is set are computed; the
// others' partials stay empty (pm = −inf, ps = 0) and merge_partials skips them.
[[gnu::noinline]] void page_partials(const std::byte* page_bytes, const AttentionPage& page, const AttentionShape& shape,
                                     const float* q, const std::uint32_t* positions, std::uint32_t count,
                                     std::uint32_t window, AttentionScratch& scratch, const std::byte* next, std::uint32_t next_rows,
                                     std::uint32_t mask, std::uint32_t next_mask) {
  const std::uint32_t dim = shape.head_dim;
  const std::uint32_t kv = shape.kv_heads;
  const std::uint32_t group = shape.q_heads / kv;
  const std::uint32_t span = kv * dim;  // elements of K (or V) in one row
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint64_t v_offset = std::uint64_t{span} * dtype_bytes(shape.dtype);
  float* pm = scratch.page_m.data();
  float* ps = scratch.page_s.data();
  float* pacc = scratch.page_acc.data();
  float* kf = scratch.kt.data();   // [16][span]: K widened (several queries)
  float* vf = scratch.row.data();  // [16][span]: V widened
  float* sc = scratch.scores.data();  // [group][16]
  const bool widened = count > 1 && shape.dtype != DType::f32;
  const DType src_type = widened ? DType::f32 : shape.dtype;
  const std::uint64_t src_stride = widened ? std::uint64_t{span} * 4 : row_bytes;
  const std::uint64_t head_bytes = std::uint64_t{dim} * dtype_bytes(src_type);

  // Rows seen by some query: [rows_min, rows_max). A window layer's query sees a suffix of the
  // rows up to it; its first tile starts at its first row, the later ones on the page's 16-row grid.
  std::uint32_t rows_max = 0, rows_min = UINT32_MAX;
  for (std::uint32_t i = 0; i < count; ++i) {
    const VisibleRows seen = visible_rows(page, positions[i], window);
    if (seen.empty()) continue;
    rows_max = std::max(rows_max, seen.end);
    rows_min = std::min(rows_min, seen.begin);
  }
  for (std::uint32_t i = 0; i < count * shape.q_heads; ++i) {
    pm[i] = minus_infinity;
    ps[i] = 0.0f;
  }
  // pacc needs no zeroing: the first tile's values() start from 0 for every
  // query that sees the page (the others' pacc is never read).
  // The next page's bytes, a share before each kv-head pass (a burst of a whole page stalls on
  // fill buffers): units of (row, head it reads), each the head's K and V of that row.
  std::uint32_t next_heads[32];
  std::uint32_t next_count = 0;
  std::uint32_t passes = 0;
  for (std::uint32_t k = 0; k < kv; ++k) {
    if (((next_mask >> k) & 1u) != 0) next_heads[next_count++] = k;
    passes += (mask >> k) & 1u;
  }
  const std::uint64_t units = next != nullptr ? std::uint64_t{next_rows} * next_count : 0;
  const std::uint64_t prefetch_share = passes == 0 ? units : (units + passes - 1) / passes;
  const std::uint64_t page_head_bytes = std::uint64_t{dim} * dtype_bytes(shape.dtype);
  std::uint64_t prefetched = 0;

  for (std::uint32_t first = rows_max == 0 ? 0 : rows_min / block_rows * block_rows; first < rows_max; first += block_rows) {
    const std::uint32_t tile = std::min(block_rows, rows_max - first);
    const std::byte* base = page_bytes + first * row_bytes;
    const std::byte* k_src = base;
    const std::byte* v_src = base + v_offset;
    if (widened) {
      for (std::uint32_t r = 0; r < tile; ++r) {
        widen(base + r * row_bytes, shape.dtype, span, kf + std::size_t{r} * span);
        widen(base + r * row_bytes + v_offset, shape.dtype, span, vf + std::size_t{r} * span);
      }
      k_src = reinterpret_cast<const std::byte*>(kf);
      v_src = reinterpret_cast<const std::byte*>(vf);
    }
    for (std::uint32_t i = 0; i < count; ++i) {
      const VisibleRows seen = visible_rows(page, positions[i], window);
      const std::uint32_t r0 = std::max(first, seen.begin);
      const std::uint32_t r1 = std::min(first + block_rows, seen.end);
      if (r1 <= r0) continue;
      const std::uint32_t n = r1 - r0;
      const bool fresh = r0 == seen.begin;  // the query's first tile of this page
      const std::uint64_t skip = std::uint64_t{r0 - first} * src_stride;  // rows of the tile before its first
      for (std::uint32_t k = 0; k < kv; ++k) {
        if (((mask >> k) & 1u) == 0) continue;
        for (const std::uint64_t stop = std::min(units, prefetched + prefetch_share); prefetched < stop; ++prefetched) {
          const std::byte* at = next + (prefetched / next_count) * row_bytes + next_heads[prefetched % next_count] * page_head_bytes;
          for (std::uint64_t b = 0; b < page_head_bytes; b += 64) {
            __builtin_prefetch(at + b, 0, 2);
            __builtin_prefetch(at + v_offset + b, 0, 2);
          }
        }
        const std::size_t h0 = std::size_t{i} * shape.q_heads + std::size_t{k} * group;
        scores(q + h0 * dim, k_src + skip + k * head_bytes, src_stride, src_type, n, dim, group, shape.scale, sc);
        for (std::uint32_t g = 0; g < group; ++g) {
          float* x = sc + std::size_t{g} * block_rows;
          const float block_max = tile_max(x, n);
          const std::size_t h = h0 + g;
          const float m_new = std::max(pm[h], block_max);
          // e^(pm - m_new): exactly 0 on the first tile (pm = -inf), so not computed there.
          const float scale_old = fresh ? 0.0f : std::exp(pm[h] - m_new);
          ps[h] = ps[h] * scale_old + exp_sum(x, n, m_new);
          pm[h] = m_new;
          if (!fresh && scale_old != 1.0f) {
            float* a = pacc + h * dim;
            for (std::uint32_t d = 0; d < dim; ++d) a[d] *= scale_old;
          }
        }
        values(pacc + h0 * dim, sc, v_src + skip + k * head_bytes, src_stride, src_type, n, dim, group, fresh);
      }
    }
  }
}

// Running state of query rows [q0, q0 + count): loaded or empty.
inline void start_state(const AttentionJob& job, std::uint32_t q0, std::uint32_t count, float* m, float* s, float* acc) {
  const std::uint32_t heads = job.shape.q_heads;
  const std::uint32_t dim = job.shape.head_dim;
  for (std::size_t h = 0; h < std::size_t{count} * heads; ++h) {
    if (job.load_state) {
      const float* st = job.state + (std::size_t{q0} * heads + h) * (2 + dim);
      m[h] = st[0];
      s[h] = st[1];
      std::memcpy(acc + h * dim, st + 2, std::size_t{dim} * 4);
    } else {
      m[h] = minus_infinity;
      s[h] = 0.0f;
      std::fill(acc + h * dim, acc + (h + 1) * dim, 0.0f);
    }
  }
}

// Output and stored state of query rows [q0, q0 + count) from their running state.
inline void finish_state(const AttentionJob& job, std::uint32_t q0, std::uint32_t count, const float* m, const float* s,
                         const float* acc) {
  const std::uint32_t heads = job.shape.q_heads;
  const std::uint32_t dim = job.shape.head_dim;
  for (std::size_t h = 0; h < std::size_t{count} * heads; ++h) {
    const std::size_t head = std::size_t{q0} * heads + h;
    const float* a = acc + h * dim;
    if (job.write_output) {
      float* out = job.output + head * dim;
      const float inv = s[h] > 0.0f ? 1.0f / s[h] : 0.0f;
      for (std::uint32_t d = 0; d < dim; ++d) out[d] = a[d] * inv;
    }
    if (job.store_state) {
      float* st = job.state + head * (2 + dim);
      st[0] = m[h];
      st[1] = s[h];
      std::memcpy(st + 2, a, std::size_t{dim} * 4);
    }
  }
}

// Adds one query's page mass (pages [page_begin, page_end) of its task) into `mass`.
inline void add_mass(const AttentionJob& job, std::uint32_t position, std::uint32_t page_begin, std::uint32_t page_end,
                     const float* log_mass, std::size_t log_mass_stride, const float* m, const float* s, float* mass) {
  for (std::uint32_t p = page_begin; p < page_end; ++p) {
    if (visible_rows(job.pages[p], position, job.window_tokens).empty()) continue;
    const float* lm = log_mass + std::size_t{p} * log_mass_stride;
    float sum = 0.0f;
    for (std::uint32_t h = 0; h < job.shape.q_heads; ++h) {
      if (s[h] > 0.0f) sum += std::exp(lm[h] - m[h]) / s[h];
    }
    mass[p] += sum;
  }
}

// A tile unit: queries [q0, q0 + count) of one task over all its pages.
inline void run_tile(const std::byte* arena, const AttentionJob& job, const AttentionTask& task, std::uint32_t q0,
                     std::uint32_t count, AttentionScratch& scratch) {
  const AttentionShape& shape = job.shape;
  const std::uint32_t heads = shape.q_heads;
  const std::uint32_t dim = shape.head_dim;
  const bool want_mass = job.page_mass != nullptr;
  float* m = scratch.run_m.data();
  float* s = scratch.run_s.data();
  float* acc = scratch.run_acc.data();
  const std::uint32_t* positions = job.positions.data() + q0;
  const float* q = job.queries + std::size_t{q0} * heads * dim;
  const std::size_t mass_stride = std::size_t{count} * heads;  // log_mass: [page][query of the tile][head]
  AK_ASSERT(!want_mass || count == 1, "attention: page mass is kept for tiles of one query");
  start_state(job, q0, count, m, s, acc);
  for (std::uint32_t i = task.page_begin; i < task.page_begin + task.page_count; ++i) {
    const AttentionPage& page = job.pages[i];
    const bool more = i + 1 < task.page_begin + task.page_count;
    const AttentionPage& next = job.pages[more ? i + 1 : i];
    const std::uint32_t mask = job.heads_of(i);
    page_partials(page_bytes_of(arena, job.host_pool, page), page, shape, q, positions, count, job.window_tokens, scratch,
                  more ? page_bytes_of(arena, job.host_pool, next) : nullptr, next.tokens, mask,
                  job.heads_of(more ? i + 1 : i));
    for (std::uint32_t j = 0; j < count; ++j) {
      if (visible_rows(page, positions[j], job.window_tokens).empty()) continue;
      const std::size_t x = std::size_t{j} * heads;
      if (want_mass) {
        for (std::uint32_t h = 0; h < heads; ++h)
          scratch.log_mass[i * mass_stride + x + h] = scratch.page_m[x + h] + std::log(scratch.page_s[x + h]);
      }
      merge_partials(m + x, s + x, acc + x * dim, scratch.page_m.data() + x, scratch.page_s.data() + x,
                     scratch.page_acc.data() + x * dim, heads, dim, mask, heads / shape.kv_heads);
    }
  }
  finish_state(job, q0, count, m, s, acc);
  if (want_mass) {
    for (std::uint32_t j = 0; j < count; ++j) {
      add_mass(job, positions[j], task.page_begin, task.page_begin + task.page_count,
               scratch.log_mass.data() + std::size_t{j} * heads, mass_stride, m + std::size_t{j} * heads,
               s + std::size_t{j} * heads, scratch.mass.data());
    }
  }
}

// A part unit of a split query (decode): part 0 merges its pages into the
// running state, which it leaves in split.state; a later part stores each
// page's partial in split.partials for finish_split to merge in page order.
inline void run_part(const std::byte* arena, const AttentionJob& job, std::uint32_t query, std::uint32_t part,
                     AttentionScratch& scratch, AttentionSplit& split) {
  const AttentionShape& shape = job.shape;
  const std::uint32_t heads = shape.q_heads;
  const std::uint32_t dim = shape.head_dim;
  const AttentionTask& task = job.tasks[job.query_task[query]];
  const std::uint32_t begin = task.page_begin + split_point(task.page_count, job.page_parts, part);
  const std::uint32_t end = task.page_begin + split_point(task.page_count, job.page_parts, part + 1);
  const std::uint32_t position = job.positions[query];
  const float* q = job.queries + std::size_t{query} * heads * dim;
  const std::size_t record = std::size_t{heads} * (2 + dim);  // m, s per head, then acc per head
  float* state = split.state.data() + std::size_t{query} * record;
  if (part == 0) start_state(job, query, 1, state, state + heads, state + 2 * heads);
  for (std::uint32_t i = begin; i < end; ++i) {
    const AttentionPage& page = job.pages[i];
    if (visible_rows(page, position, job.window_tokens).empty()) continue;
    const AttentionPage& next = job.pages[i + 1 < end ? i + 1 : i];
    const std::uint32_t mask = job.heads_of(i);
    page_partials(page_bytes_of(arena, job.host_pool, page), page, shape, q, &position, 1, job.window_tokens, scratch,
                  i + 1 < end ? page_bytes_of(arena, job.host_pool, next) : nullptr, next.tokens, mask,
                  job.heads_of(i + 1 < end ? i + 1 : i));
    if (job.page_mass != nullptr) {  // log mass only for jobs that report page mass
      float* lm = split.log_mass.data() + std::size_t{i} * heads;
      for (std::uint32_t h = 0; h < heads; ++h) lm[h] = scratch.page_m[h] + std::log(scratch.page_s[h]);
    }
    if (part == 0) {
      merge_partials(state, state + heads, state + 2 * heads, scratch.page_m.data(), scratch.page_s.data(),
                     scratch.page_acc.data(), heads, dim, mask, heads / shape.kv_heads);
    } else {
      // Only the heads that read the page: finish_split merges no other head's partial.
      float* rec = split.partials.data() + std::size_t{i} * record;
      const std::uint32_t group = heads / shape.kv_heads;
      for (std::uint32_t k = 0; k < shape.kv_heads; ++k) {
        if (((mask >> k) & 1u) == 0) continue;
        const std::size_t h0 = std::size_t{k} * group;
        std::memcpy(rec + h0, scratch.page_m.data() + h0, std::size_t{group} * 4);
        std::memcpy(rec + heads + h0, scratch.page_s.data() + h0, std::size_t{group} * 4);
        std::memcpy(rec + 2 * heads + h0 * dim, scratch.page_acc.data() + h0 * dim, std::size_t{group} * dim * 4);
      }
    }
  }
}

void run_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin, std::uint32_t unit_end,
               AttentionScratch& scratch, AttentionSplit* split) {
  const AttentionShape& shape = job.shape;
  AK_ASSERT(shape.q_heads % shape.kv_heads == 0, "attention: q_heads not a multiple of kv_heads");
  AK_ASSERT(std::size_t{query_block} * shape.q_heads * shape.head_dim <= scratch.run_acc.size(),
            "attention: scratch smaller than the shape");
  for (std::uint32_t unit = unit_begin; unit < unit_end; ++unit) {
    if (job.page_parts > 1) {
      AK_ASSERT(split != nullptr, "attention: a split job without its split buffers");
      const std::uint32_t query = unit / job.page_parts;
      if (job.query_task[query] == UINT32_MAX) continue;  // a row no task owns: left untouched
      run_part(arena, job, query, unit % job.page_parts, scratch, *split);
    } else {
      const AttentionTile& t = job.tiles[unit];
      run_tile(arena, job, job.tasks[t.task], t.query_begin, t.query_count, scratch);
    }
  }
}

void finish_split(const AttentionJob& job, AttentionSplit& split, float* mass) {
  const AttentionShape& shape = job.shape;
  const std::uint32_t heads = shape.q_heads;
  const std::uint32_t dim = shape.head_dim;
  const std::size_t record = std::size_t{heads} * (2 + dim);
  for (std::uint32_t query = 0; query < job.positions.size(); ++query) {
    if (job.query_task[query] == UINT32_MAX) continue;
    const AttentionTask& task = job.tasks[job.query_task[query]];
    const std::uint32_t position = job.positions[query];
    float* state = split.state.data() + std::size_t{query} * record;
    float* m = state;
    float* s = state + heads;
    float* acc = state + 2 * heads;
    for (std::uint32_t i = task.page_begin + split_point(task.page_count, job.page_parts, 1);
         i < task.page_begin + task.page_count; ++i) {
      if (visible_rows(job.pages[i], position, job.window_tokens).empty()) continue;
      const float* rec = split.partials.data() + std::size_t{i} * record;
      merge_partials(m, s, acc, rec, rec + heads, rec + 2 * heads, heads, dim, job.heads_of(i), heads / shape.kv_heads);
    }
    finish_state(job, query, 1, m, s, acc);
    if (mass != nullptr) {
      add_mass(job, position, task.page_begin, task.page_begin + task.page_count, split.log_mass.data(), heads, m, s,
               mass);
    }
  }
}
