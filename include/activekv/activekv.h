/* activekv.h — the core from C: plan the memory, admit contexts, plan steps, explain.
 *
 * Plain C (C99), opaque handles, no ownership surprises: every string returned by this API
 * is allocated by it and released with activekv_free_string(). Sizes are bytes; budgets are
 * pages across all dense layers (0 = the plan's default, as documented in docs/CORE.md).
 * Nothing here allocates on the step path: activekv_plan_step() and activekv_step_completed()
 * use storage reserved by activekv_create().
 */
#ifndef ACTIVEKV_H
#define ACTIVEKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct activekv_core activekv_core; /* plan + arena accounting + budgets + exact-mode planner */

typedef struct {
  uint32_t dense_layers, recurrent_layers, kv_heads, head_dim;
  const char* dtype; /* "f32", "f16" or "bf16" */
  uint64_t recurrent_state_bytes;
  uint64_t host_pool_bytes, device_pool_bytes, headroom_bytes;
  uint32_t page_tokens, tile_tokens, tiles, max_context_tokens, max_seqs, chunk_tokens;
  uint64_t floor_pages, target_pages, burst_pages;
} activekv_settings;

typedef struct {
  uint32_t slot;       /* = the context's host history */
  uint32_t generation; /* a finished context's handle is stale */
} activekv_context;

typedef enum { ACTIVEKV_ADMITTED = 0, ACTIVEKV_QUEUED = 1, ACTIVEKV_REFUSED = 2 } activekv_admit_outcome;

typedef struct {
  activekv_context context;
  uint32_t tokens_appended; /* 1 for decode, up to chunk_tokens for prefill */
} activekv_scheduled;

typedef struct {
  uint64_t bytes_staged, bytes_promoted, bytes_written_back;
  uint64_t pages_resident, pages_staged, copies, passes, promotions;
} activekv_step_counters;

/* Fills the defaults (page 16, 2 tiles, chunk 256, max_seqs 1); sizes and geometry stay 0. */
void activekv_settings_default(activekv_settings* settings);
/* Sets the geometry and max context of a preset ("smollm2-135m", "llama-3.1-8b", "hybrid-27b"); 0 on success. */
int activekv_settings_preset(activekv_settings* settings, const char* preset);

/* Validates the settings and builds the core. On a refusal returns NULL and writes
 * "setting: what to change" into error (truncated to error_size, always terminated). */
activekv_core* activekv_create(const activekv_settings* settings, char* error, size_t error_size);
void activekv_destroy(activekv_core* core);

/* The memory plan as JSON (keys named after the formula's terms) and as text. */
char* activekv_plan_json(const activekv_core* core);
char* activekv_plan_text(const activekv_core* core);
uint32_t activekv_concurrency(const activekv_core* core);

/* Admission: admitted (context written), queued (FIFO) or refused; reason is static text. */
activekv_admit_outcome activekv_admit(activekv_core* core, uint64_t request_id, uint32_t tokens_max,
                                      activekv_context* context, const char** reason);
/* Returns every page and the history; queued requests may be admitted (see take_admitted). */
void activekv_finish(activekv_core* core, activekv_context context);
/* Contexts admitted from the queue since the last call; returns how many were written. */
uint32_t activekv_take_admitted(activekv_core* core, activekv_context* contexts, uint64_t* request_ids,
                                uint32_t capacity);

/* Plans one step: 0 when planned, else a positive code (see activekv_plan_outcome_text). */
int activekv_plan_step(activekv_core* core, const activekv_scheduled* scheduled, uint32_t count,
                       activekv_step_counters* counters);
const char* activekv_plan_outcome_text(int outcome);
/* The step's copies signalled: promotions land. Call once after each planned step. */
void activekv_step_completed(activekv_core* core);

/* The context's pages with the reason each is resident, and the last step's decisions. */
char* activekv_explain_json(const activekv_core* core, activekv_context context);

void activekv_free_string(char* text);

#ifdef __cplusplus
}
#endif

#endif /* ACTIVEKV_H */
