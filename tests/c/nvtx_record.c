/* A recording NVTX injection library (what NVTX_INJECTION64_PATH names): every NVTX instance
 * of the process (rcclx's, the stock library's, PyTorch's) calls InitializeInjectionNvtx2 with
 * its export table; this library takes the CORE2 (domain) functions of each and writes one line
 * per event to $NVTX_RECORD_DIR/nvtx.<pid>.log (else stderr):
 *
 *   init
 *   domain NCCL from=<file of the caller>
 *   push NCCL ncclAllReduce payloadType=1 payload=4096 from=<file of the caller>
 *   pop NCCL from=<file of the caller>
 *
 * `from` is the shared object that called (dladdr of the return address): librcclx.so for
 * rcclx's ranges, libnccl.so.2 for the stock library's. Used by tests/nvtx.rs (no GPU) and by
 * scripts/nvtx-check.sh (GPU runs). Own declarations of the few NVTX types it needs (no
 * header), checked against the nvtx3 headers' layout by the test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*fnptr)(void);
typedef int (*get_module_function_table_t)(int module, fnptr ***out_table, unsigned int *out_size);
struct callbacks {
  size_t struct_size;
  get_module_function_table_t get_module_function_table;
};
typedef const void *(*get_export_table_t)(uint32_t id);
struct attributes {
  uint16_t version, size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type, reserved0;
  uint64_t payload;
  int32_t message_type;
  const void *message;
};
struct domain {
  char name[64];
};
struct string {
  char text[128];
};

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *caller(void *ret) {
  Dl_info info;
  if (dladdr(ret, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
  }
  return "?";
}

#define RECORD(...)                                                                            \
  do {                                                                                         \
    pthread_mutex_lock(&lock);                                                                 \
    fprintf(out ? out : stderr, __VA_ARGS__);                                                  \
    fflush(out ? out : stderr);                                                                \
    pthread_mutex_unlock(&lock);                                                               \
  } while (0)

static void *domain_create_a(const char *name) {
  struct domain *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  snprintf(d->name, sizeof d->name, "%s", name ? name : "(null)");
  RECORD("domain %s from=%s\n", d->name, caller(__builtin_return_address(0)));
  return d;
}

static void *register_string_a(void *domain, const char *text) {
  (void)domain;
  struct string *s = calloc(1, sizeof *s);
  if (s) snprintf(s->text, sizeof s->text, "%s", text ? text : "(null)");
  return s;
}

static int range_push_ex(void *domain, const struct attributes *a) {
  const struct domain *d = domain;
  const char *msg = "?";
  if (a->message_type == 1) msg = a->message;                              /* ASCII */
  if (a->message_type == 3) msg = ((const struct string *)a->message)->text; /* registered */
  RECORD("push %s %s payloadType=%d payload=%llu from=%s\n", d ? d->name : "(none)", msg, a->payload_type,
         (unsigned long long)a->payload, caller(__builtin_return_address(0)));
  return 0;
}

static int range_pop(void *domain) {
  const struct domain *d = domain;
  RECORD("pop %s from=%s\n", d ? d->name : "(none)", caller(__builtin_return_address(0)));
  return 0;
}

int InitializeInjectionNvtx2(get_export_table_t get_export_table) {
  pthread_mutex_lock(&lock);
  if (!out) {
    const char *dir = getenv("NVTX_RECORD_DIR");
    if (dir && *dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/nvtx.%d.log", dir, (int)getpid());
      out = fopen(path, "a");
    }
  }
  pthread_mutex_unlock(&lock);
  const struct callbacks *cb = get_export_table(1); /* NVTX_ETID_CALLBACKS */
  if (!cb || cb->struct_size < sizeof *cb) return 0;
  fnptr **table = NULL;
  unsigned int size = 0;
  if (!cb->get_module_function_table(5, &table, &size) || size < 16) return 0; /* CORE2 */
  *table[12] = (fnptr)domain_create_a; /* NVTX_CBID_CORE2_DomainCreateA */
  *table[10] = (fnptr)register_string_a; /* NVTX_CBID_CORE2_DomainRegisterStringA */
  *table[4] = (fnptr)range_push_ex; /* NVTX_CBID_CORE2_DomainRangePushEx */
  *table[5] = (fnptr)range_pop; /* NVTX_CBID_CORE2_DomainRangePop */
  RECORD("init\n");
  return 1;
}
