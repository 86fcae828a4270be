/* activekv_c_test.c — the C API from C: a refusal with its message, the seed's plan, admission and
 * queueing, decode steps with counters, explain as JSON. Exits non-zero on the first failure. */
#include "activekv/activekv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                        \
    }                                                                  \
  } while (0)

int main(void) {
  activekv_settings s;
  char error[512];
  activekv_settings_default(&s);
  CHECK(activekv_settings_preset(&s, "hybrid-27b") == 0);
  CHECK(activekv_settings_preset(&s, "no-such-model") != 0);
  s.host_pool_bytes = 1ull << 30; /* too small for one 2 GiB history */
  s.device_pool_bytes = 16ull << 30;
  CHECK(activekv_create(&s, error, sizeof error) == NULL);
  CHECK(strstr(error, "--host-pool") != NULL);
  CHECK(strstr(error, "at least 2 GiB") != NULL);

  s.host_pool_bytes = 64ull << 30;
  s.max_seqs = 2;
  s.max_context_tokens = 4096;
  activekv_core* core = activekv_create(&s, error, sizeof error);
  CHECK(core != NULL);
  char* json = activekv_plan_json(core);
  CHECK(json != NULL && strstr(json, "\"segment_bytes\": 16777216") != NULL);
  activekv_free_string(json);
  CHECK(activekv_concurrency(core) == 2);

  activekv_context a, b, c;
  const char* reason = NULL;
  CHECK(activekv_admit(core, 1, 4096, &a, &reason) == ACTIVEKV_ADMITTED);
  CHECK(activekv_admit(core, 2, 4096, &b, &reason) == ACTIVEKV_ADMITTED);
  CHECK(activekv_admit(core, 3, 4096, &c, &reason) == ACTIVEKV_QUEUED);
  CHECK(strstr(reason, "history") != NULL);
  CHECK(activekv_admit(core, 4, 5000, &c, &reason) == ACTIVEKV_REFUSED);

  activekv_scheduled step[2] = {{a, 256}, {b, 256}};
  activekv_step_counters counters;
  for (int i = 0; i < 4; ++i) {
    CHECK(activekv_plan_step(core, step, 2, &counters) == 0);
    activekv_step_completed(core);
  }
  CHECK(counters.bytes_written_back == 2ull * 16 * 256 * 4096);
  step[0].tokens_appended = 1;
  step[1].tokens_appended = 100000;
  CHECK(activekv_plan_step(core, step, 2, &counters) != 0);
  CHECK(strstr(activekv_plan_outcome_text(activekv_plan_step(core, step, 2, &counters)), "chunk") != NULL);

  char* explained = activekv_explain_json(core, a);
  CHECK(explained != NULL && strstr(explained, "\"resident\"") != NULL && strstr(explained, "sink page") != NULL);
  activekv_free_string(explained);

  activekv_finish(core, a);
  activekv_context admitted[4];
  uint64_t ids[4];
  CHECK(activekv_take_admitted(core, admitted, ids, 4) == 1);
  CHECK(ids[0] == 3);
  activekv_destroy(core);
  printf("activekv.h: all checks passed\n");
  return 0;
}
