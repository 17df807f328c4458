/* A recording roctx library: ROCm's two range functions as roctx.h declares them
 * (`int roctxRangePushA(const char *)`, `int roctxRangePop(void)`), each writing one line to
 * $ROCTX_RECORD_DIR/roctx.<pid>.log (else stderr):
 *
 *   push ncclAllReduce level=0
 *   pop level=0
 *
 * Installed by tests/roctx.rs as <ROCM_PATH>/lib/libroctx64.so.4, where rcclx looks for roctx
 * on the HIP runtime (src/nvtx.rs). Returns roctracer's values: the nesting level of the range
 * pushed or popped, -1 for a pop without a push. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static _Thread_local int level;

static void record(const char *what, const char *message, int at) {
  char path[4096];
  const char *dir = getenv("ROCTX_RECORD_DIR");
  FILE *f = stderr;
  if (dir) {
    snprintf(path, sizeof path, "%s/roctx.%d.log", dir, (int)getpid());
    f = fopen(path, "a");
    if (!f) return;
  }
  if (message) fprintf(f, "%s %s level=%d\n", what, message, at);
  else fprintf(f, "%s level=%d\n", what, at);
  if (f != stderr) fclose(f);
}

int roctxRangePushA(const char *message) {
  record("push", message ? message : "(null)", level);
  return level++;
}

int roctxRangePop(void) {
  if (level == 0) {
    record("pop", NULL, -1);
    return -1;
  }
  record("pop", NULL, --level);
  return level;
}
