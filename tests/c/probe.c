/* Forwarding probe: calls NCCL host functions that work without a GPU and writes one
 * `name=result` line per call to a result file, so a test can run the same program against
 * the stock library and against rcclx and diff the two files line by line.
 *
 * Built twice by tests/forwarding.rs and tests/failures.rs:
 *   cc -DPROBE_LINKED probe.c -L<dir with libnccl.so> -lnccl -ldl   (DT_NEEDED libnccl.so.2)
 *   cc probe.c -ldl                                                 (dlopen of a path)
 *
 * Usage: probe <result-file> <all|bcast|bcast-first|reset> [library]   (library: dlopen build only)
 *
 * Own prototypes (copied from the stock nccl.h), so that no CUDA header is needed; the
 * signatures themselves are checked by tests/c_abi.rs.
 * NCCL writes its own WARN lines to stdout, so results go to a file, not to stdout.
 * rcclx's own functions are looked up with dlsym: the stock library does not have them
 * (`rcclx...=absent`). Exit status 0 unless the program itself cannot run. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void *cudaStream_t;
#define ncclFloat32 7
#define ncclBfloat16 9
#define ncclSum 0
/* rcclx.h's, declared here so that the probe builds without it. */
typedef struct {
  int wire;
  size_t rowElements;
  float *const *recvScales;
} rcclxAllToAllvOptions;
#define RCCLX_WIRE_FP8 1

/* X(return type, name, parameter list) */
#define NCCL_FUNCS(X)                                                                          \
  X(ncclResult_t, ncclGetVersion, (int *))                                                     \
  X(const char *, ncclGetErrorString, (ncclResult_t))                                          \
  X(const char *, ncclGetLastError, (ncclComm_t))                                              \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *))                                           \
  X(ncclResult_t, ncclCommInitRank, (ncclComm_t *, int, ncclUniqueId, int))                    \
  X(ncclResult_t, ncclCommCount, (ncclComm_t, int *))                                          \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *))                         \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t))                                               \
  X(ncclResult_t, ncclAllReduce,                                                               \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))     \
  X(ncclResult_t, ncclBcast, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))  \
  X(ncclResult_t, ncclBroadcast,                                                               \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))             \
  X(ncclResult_t, ncclGroupStart, (void))                                                      \
  X(ncclResult_t, ncclGroupEnd, (void))

typedef struct rcclxCommStats rcclxCommStats; /* only passed as NULL here */
#define RCCLX_FUNCS(X)                                                                         \
  X(ncclResult_t, rcclxGetVersion, (int *))                                                    \
  X(const char *, rcclxGetUpstreamPath, (void))                                                \
  X(ncclResult_t, rcclxCommGetStats, (ncclComm_t, rcclxCommStats *))                           \
  X(const char *, rcclxForwardReasonName, (int))                                               \
  X(ncclResult_t, rcclxGetProcessStats, (rcclxCommStats *))                                   \
  X(ncclResult_t, rcclxAllToAllvDynamic,                                                       \
    (const void *const *, const size_t *, void *const *, size_t, size_t, size_t *,             \
     ncclDataType_t, ncclComm_t, cudaStream_t))                                                \
  X(ncclResult_t, rcclxAllToAllvDynamicPacked,                                                 \
    (const void *, const size_t *, void *, size_t, size_t, size_t *, size_t, ncclDataType_t,   \
     ncclComm_t, cudaStream_t))                                                                \
  X(ncclResult_t, rcclxAllToAllvDynamicPackedEx,                                               \
    (const void *, const size_t *, void *, size_t, size_t, size_t *, size_t, ncclDataType_t,   \
     ncclComm_t, cudaStream_t, const rcclxAllToAllvOptions *))

struct api {
#define FIELD(ret, name, params) ret(*name) params;
  NCCL_FUNCS(FIELD)
};
struct own_api {
  RCCLX_FUNCS(FIELD)
#undef FIELD
};

#ifdef PROBE_LINKED
#define DECLARE(ret, name, params) ret name params; ret p##name params;
NCCL_FUNCS(DECLARE)
#undef DECLARE
#endif

static FILE *out;

static void str_line(const char *name, const char *s) { fprintf(out, "%s=%s\n", name, s ? s : "(null)"); }

/* Copies `sym` into the function pointer `*slot` (dlsym returns an object pointer). */
static void set_fn(void *slot, void *sym) { memcpy(slot, &sym, sizeof sym); }

/* The calls, through `a`; `p` is "" or "p" (the profiling twins). */
static void probe_all(const struct api *a, const char *p) {
  char name[128];
#define NAME(fmt) (snprintf(name, sizeof name, "%s" fmt, p), name)
  int v = -1;
  ncclResult_t r = a->ncclGetVersion(&v);
  fprintf(out, "%s=%d %d\n", NAME("ncclGetVersion"), r, v);
  fprintf(out, "%s=%d\n", NAME("ncclGetVersion(NULL)"), a->ncclGetVersion(NULL));
  for (int code = 0; code <= 9; code++) {
    snprintf(name, sizeof name, "%sncclGetErrorString(%d)", p, code);
    str_line(name, a->ncclGetErrorString(code));
  }
  str_line(NAME("ncclGetLastError(NULL)"), a->ncclGetLastError(NULL));

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  r = a->ncclGetUniqueId(&id);
  int nonzero = 0;
  for (size_t i = 0; i < sizeof id.internal; i++) nonzero |= id.internal[i] != 0;
  fprintf(out, "%s=%d nonzero=%d\n", NAME("ncclGetUniqueId"), r, nonzero);
  fprintf(out, "%s=%d\n", NAME("ncclGetUniqueId(NULL)"), a->ncclGetUniqueId(NULL));

  ncclComm_t comm = NULL;
  r = a->ncclCommInitRank(&comm, 1, id, 0);
  fprintf(out, "%s=%d comm=%s\n", NAME("ncclCommInitRank(1,0)"), r, comm ? "set" : "NULL");
  str_line(NAME("ncclGetLastError(NULL).after-init"), a->ncclGetLastError(NULL));
  if (r == 0 && comm) { /* a machine with a GPU: clean up */
    int n = -1;
    r = a->ncclCommCount(comm, &n);
    fprintf(out, "%s=%d %d\n", NAME("ncclCommCount(comm)"), r, n);
    fprintf(out, "%s=%d\n", NAME("ncclCommDestroy(comm)"), a->ncclCommDestroy(comm));
  }

  fprintf(out, "%s=%d\n", NAME("ncclCommCount(NULL,NULL)"), a->ncclCommCount(NULL, NULL));
  ncclResult_t async = -1;
  r = a->ncclCommGetAsyncError(NULL, &async);
  fprintf(out, "%s=%d\n", NAME("ncclCommGetAsyncError(NULL)"), r);
  fprintf(out, "%s=%d\n", NAME("ncclAllReduce(comm=NULL)"),
          a->ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, NULL, NULL));
  fprintf(out, "%s=%d\n", NAME("ncclBcast(comm=NULL)"), a->ncclBcast(NULL, 0, ncclFloat32, 0, NULL, NULL));
  fprintf(out, "%s=%d\n", NAME("ncclBroadcast(comm=NULL)"),
          a->ncclBroadcast(NULL, NULL, 0, ncclFloat32, 0, NULL, NULL));
  fprintf(out, "%s=%d\n", NAME("ncclCommDestroy(NULL)"), a->ncclCommDestroy(NULL));
  r = a->ncclGroupStart();
  ncclResult_t r2 = a->ncclGroupEnd();
  fprintf(out, "%s=%d %d\n", NAME("ncclGroupStart+End"), r, r2);
#undef NAME
}

static void probe_own(const struct own_api *o) {
  if (!o->rcclxGetVersion) {
    fprintf(out, "rcclx=absent\n");
    return;
  }
  int v = -1;
  ncclResult_t r = o->rcclxGetVersion(&v);
  fprintf(out, "rcclxGetVersion=%d %d\n", r, v);
  fprintf(out, "rcclxGetVersion(NULL)=%d\n", o->rcclxGetVersion(NULL));
  fprintf(out, "rcclxCommGetStats(NULL,NULL)=%d\n", o->rcclxCommGetStats(NULL, NULL));
  str_line("rcclxGetUpstreamPath", o->rcclxGetUpstreamPath());
  str_line("rcclxForwardReasonName(-1)", o->rcclxForwardReasonName(-1));
  if (o->rcclxGetProcessStats)
    fprintf(out, "rcclxGetProcessStats(NULL)=%d\n", o->rcclxGetProcessStats(NULL));
  if (o->rcclxAllToAllvDynamic && o->rcclxAllToAllvDynamicPacked) {
    /* A handle no library made: rcclx only uses it as a key, and has no kernels for it. */
    ncclComm_t unknown = (ncclComm_t)(uintptr_t)0x7f00;
    size_t counts[8] = {0};
    fprintf(out, "rcclxAllToAllvDynamic(comm=NULL)=%d\n",
            o->rcclxAllToAllvDynamic(NULL, counts, NULL, 0, 0, counts, ncclFloat32, NULL, NULL));
    fprintf(out, "rcclxAllToAllvDynamic(unknown comm)=%d\n",
            o->rcclxAllToAllvDynamic(NULL, counts, NULL, 0, 0, counts, ncclFloat32, unknown, NULL));
    fprintf(out, "rcclxAllToAllvDynamic(bad type)=%d\n",
            o->rcclxAllToAllvDynamic(NULL, counts, NULL, 0, 0, counts, (ncclDataType_t)99, unknown, NULL));
    fprintf(out, "rcclxAllToAllvDynamicPacked(unit overflow)=%d\n",
            o->rcclxAllToAllvDynamicPacked(NULL, counts, NULL, 0, 0, counts, SIZE_MAX, ncclFloat32, unknown, NULL));
  }
  if (o->rcclxAllToAllvDynamicPackedEx) {
    ncclComm_t unknown = (ncclComm_t)(uintptr_t)0x7f00;
    size_t counts[8] = {0};
    rcclxAllToAllvOptions bad = {7, 0, NULL}, fp8 = {RCCLX_WIRE_FP8, 0, NULL};
    fprintf(out, "rcclxAllToAllvDynamicPackedEx(bad wire)=%d\n",
            o->rcclxAllToAllvDynamicPackedEx(NULL, counts, NULL, 0, 0, counts, 1, ncclBfloat16, unknown, NULL, &bad));
    fprintf(out, "rcclxAllToAllvDynamicPackedEx(fp8, unknown comm)=%d\n",
            o->rcclxAllToAllvDynamicPackedEx(NULL, counts, NULL, 0, 0, counts, 1, ncclBfloat16, unknown, NULL, &fp8));
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <result-file> <all|bcast|bcast-first|reset> [library]\n", argv[0]);
    return 2;
  }
  out = fopen(argv[1], "w");
  if (!out) {
    perror(argv[1]);
    return 2;
  }
  struct api plain, prof;
  struct own_api own;
  memset(&own, 0, sizeof own);
  void *h = RTLD_DEFAULT;
#ifdef PROBE_LINKED
  if (argc > 3) {
    fprintf(stderr, "linked build: no library argument\n");
    return 2;
  }
#define BIND(ret, name, params) plain.name = name; prof.name = p##name;
  NCCL_FUNCS(BIND)
#undef BIND
#else
  if (argc != 4) {
    fprintf(stderr, "dlopen build: the library path is required\n");
    return 2;
  }
  h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", argv[3], dlerror());
    return 3;
  }
  int missing = 0;
#define BIND(ret, name, params)                                                                \
  set_fn(&plain.name, dlsym(h, #name));                                                        \
  set_fn(&prof.name, dlsym(h, "p" #name));                                                     \
  if (!plain.name || !prof.name) {                                                             \
    fprintf(stderr, "%s: %s or p%s missing\n", argv[3], #name, #name);                         \
    missing = 1;                                                                               \
  }
  NCCL_FUNCS(BIND)
#undef BIND
  if (missing) return 3;
#endif
#define BIND_OWN(ret, name, params) set_fn(&own.name, dlsym(h, #name));
  RCCLX_FUNCS(BIND_OWN)
#undef BIND_OWN

  if (strcmp(argv[2], "bcast") == 0 || strcmp(argv[2], "bcast-first") == 0) {
    /* The stock ncclBcast calls ncclBroadcast through its PLT. `bcast` calls ncclGetVersion
     * first, so the library is loaded before ncclBcast; `bcast-first` calls only ncclBcast. */
    if (strcmp(argv[2], "bcast") == 0) {
      int v = -1;
      ncclResult_t r = plain.ncclGetVersion(&v);
      fprintf(out, "ncclGetVersion=%d %d\n", r, v);
    }
    fprintf(out, "ncclBcast(comm=NULL)=%d\n", plain.ncclBcast(NULL, 0, ncclFloat32, 0, NULL, NULL));
  } else if (strcmp(argv[2], "all") == 0) {
    probe_all(&plain, "");
    probe_all(&prof, "p");
    probe_own(&own);
    if (own.rcclxAllToAllvDynamic) {
      /* ncclGetLastError after: a stock error, rcclx's, the same stock error again (newer
       * than rcclx's, with the text of the one before it): the stock library's text. */
      size_t counts[1] = {0};
      ncclComm_t unknown = (ncclComm_t)(uintptr_t)0x7f00;
      plain.ncclAllReduce(NULL, NULL, 16, ncclFloat32, ncclSum, NULL, NULL);
      own.rcclxAllToAllvDynamic(NULL, counts, NULL, 0, 0, counts, ncclFloat32, unknown, NULL);
      str_line("rcclxLastError(rcclx's)", plain.ncclGetLastError(NULL));
      plain.ncclAllReduce(NULL, NULL, 16, ncclFloat32, ncclSum, NULL, NULL);
      str_line("rcclxLastError(stock's again)", plain.ncclGetLastError(NULL));
    }
    /* RCCL's ncclAllToAllv, which no NCCL has: rcclx exports it (RCCL's symbol set) and
     * returns ncclInvalidUsage, with ncclGetLastError saying why. */
    ncclResult_t (*alltoallv)(const void *, const size_t *, const size_t *, void *, const size_t *,
                              const size_t *, ncclDataType_t, ncclComm_t, cudaStream_t) = NULL;
    set_fn(&alltoallv, dlsym(h, "ncclAllToAllv"));
    if (alltoallv) {
      fprintf(out, "rcclxMissing(ncclAllToAllv)=%d\n", alltoallv(NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL));
      str_line("rcclxLastError(missing)", plain.ncclGetLastError(NULL));
    }
  } else if (strcmp(argv[2], "reset") == 0) {
    /* Calls that log under the environment's NCCL_DEBUG, then NCCL_DEBUG=WARN and
     * ncclResetDebugInit, then the same calls again (tests/logs.rs). */
    probe_all(&plain, "");
    probe_own(&own);
    fflush(stdout);
    printf("--- ncclResetDebugInit\n");
    fflush(stdout);
    setenv("NCCL_DEBUG", "WARN", 1);
    void (*reset)(void) = NULL;
    set_fn(&reset, dlsym(h, "ncclResetDebugInit"));
    fprintf(out, "ncclResetDebugInit=%s\n", reset ? "present" : "absent");
    if (reset) reset();
    probe_all(&prof, "p");
    probe_own(&own);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 2;
  }
  fprintf(out, "end\n");
  return fclose(out) == 0 ? 0 : 4;
}
