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
 * It also takes NVTX's payload extension (InitializeInjectionNvtxExtension, module 2): schema and
 * enum registrations are written out, and a push whose payload is NVTX_PAYLOAD_TYPE_EXT is
 * decoded through its registered schema (ids relative to NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START):
 *
 *   ext payload compat=0x103 slots=63 types=28 int=4/4 size=8/8 from=<caller>
 *   enum NCCL 20 size=4 Sum=0,Product=1,Max=2,Min=3,Avg=4 from=<caller>
 *   schema NCCL 5 static size=24 NCCL communicator ID:uint64@0,Message size [bytes]:size@8,Reduction operation:enum20@16 from=<caller>
 *   push NCCL ncclAllReduce payloadType=ext payload=5{NCCL communicator ID=0,Message size [bytes]=4096,Reduction operation=Max} from=<caller>
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

/* The payload extension's types (nvToolsExtPayload.h). */
#define STATIC_START (1ull << 24)
#define TYPE_INT 5
#define TYPE_UINT64 18
#define TYPE_SIZE 22
#define PAYLOAD_TYPE_EXT ((int32_t)0xDFBD0009)
struct segment {
  size_t id, slot_count;
  intptr_t *slots;
};
struct module_info {
  uint16_t nvtx_ver, struct_size, module_id, compat_id;
  size_t segments_count;
  struct segment *segments;
  void *get_export_function;
  const uint16_t (*type_info)[2];
};
struct schema_entry {
  uint64_t flags, type;
  const char *name, *description;
  uint64_t array_or_union_detail, offset;
  const void *semantics, *reserved;
};
struct schema_attr {
  uint64_t field_mask;
  const char *name;
  uint64_t type, flags;
  const struct schema_entry *entries;
  size_t num_entries, payload_static_size, pack_align;
  uint64_t schema_id;
  void *extension;
};
struct enum_entry {
  const char *name;
  uint64_t value;
  int8_t is_flag;
};
struct enum_attr {
  uint64_t field_mask;
  const char *name;
  const struct enum_entry *entries;
  size_t num_entries, size_of_enum;
  uint64_t schema_id;
  void *extension;
};
struct payload_data {
  uint64_t schema_id;
  size_t size;
  const void *payload;
};

/* Registered schemas and enums (copies; a few of each). */
#define MAX_SCHEMAS 64
static struct {
  uint64_t id;
  size_t n, size;
  uint64_t type[8], offset[8];
  char name[8][64];
} schemas[MAX_SCHEMAS];
static int n_schemas;
static struct {
  uint64_t id;
  size_t n;
  uint64_t value[16];
  char name[16][32];
} enums[8];
static int n_enums;

#ifndef NVTX_RECORD_NO_EXT
static const char *type_name(uint64_t t, char *buf, size_t len) {
  if (t == TYPE_INT) return "int";
  if (t == TYPE_UINT64) return "uint64";
  if (t == TYPE_SIZE) return "size";
  if (t >= STATIC_START) snprintf(buf, len, "enum%llu", (unsigned long long)(t - STATIC_START));
  else snprintf(buf, len, "type%llu", (unsigned long long)t);
  return buf;
}

static uint64_t schema_register(void *domain, const struct schema_attr *a) {
  const struct domain *d = domain;
  char line[1024];
  int at = snprintf(line, sizeof line, "schema %s %llu %s size=%zu ", d ? d->name : "(none)",
                    (unsigned long long)(a->schema_id - STATIC_START), a->type == 1 ? "static" : "dynamic",
                    a->payload_static_size);
  pthread_mutex_lock(&lock);
  int k = n_schemas < MAX_SCHEMAS ? n_schemas++ : MAX_SCHEMAS - 1;
  schemas[k].id = a->schema_id;
  schemas[k].size = a->payload_static_size;
  schemas[k].n = a->num_entries < 8 ? a->num_entries : 8;
  for (size_t i = 0; i < schemas[k].n; i++) {
    char buf[32];
    const struct schema_entry *e = &a->entries[i];
    schemas[k].type[i] = e->type;
    schemas[k].offset[i] = e->offset;
    snprintf(schemas[k].name[i], sizeof schemas[k].name[i], "%s", e->name ? e->name : "(null)");
    at += snprintf(line + at, sizeof line - (size_t)at, "%s%s:%s@%llu", i ? "," : "", schemas[k].name[i],
                   type_name(e->type, buf, sizeof buf), (unsigned long long)e->offset);
  }
  pthread_mutex_unlock(&lock);
  RECORD("%s from=%s\n", line, caller(__builtin_return_address(0)));
  return a->schema_id;
}

static uint64_t enum_register(void *domain, const struct enum_attr *a) {
  const struct domain *d = domain;
  char line[1024];
  int at = snprintf(line, sizeof line, "enum %s %llu size=%zu ", d ? d->name : "(none)",
                    (unsigned long long)(a->schema_id - STATIC_START), a->size_of_enum);
  pthread_mutex_lock(&lock);
  int k = n_enums < 8 ? n_enums++ : 7;
  enums[k].id = a->schema_id;
  enums[k].n = a->num_entries < 16 ? a->num_entries : 16;
  for (size_t i = 0; i < enums[k].n; i++) {
    enums[k].value[i] = a->entries[i].value;
    snprintf(enums[k].name[i], sizeof enums[k].name[i], "%s", a->entries[i].name ? a->entries[i].name : "(null)");
    at += snprintf(line + at, sizeof line - (size_t)at, "%s%s=%llu", i ? "," : "", enums[k].name[i],
                   (unsigned long long)a->entries[i].value);
  }
  pthread_mutex_unlock(&lock);
  RECORD("%s from=%s\n", line, caller(__builtin_return_address(0)));
  return a->schema_id;
}

#endif

/* One payload through its schema: "<id>{name=value,...}" (an enum value by its name). */
static void decode(const struct payload_data *p, char *out, size_t len) {
  pthread_mutex_lock(&lock);
  int k = -1;
  for (int i = 0; i < n_schemas; i++)
    if (schemas[i].id == p->schema_id) k = i;
  if (k < 0) {
    snprintf(out, len, "unregistered%llu", (unsigned long long)p->schema_id);
    pthread_mutex_unlock(&lock);
    return;
  }
  int at = snprintf(out, len, "%llu{", (unsigned long long)(p->schema_id - STATIC_START));
  if (p->size != schemas[k].size) at += snprintf(out + at, len - (size_t)at, "size %zu!=%zu,", p->size, schemas[k].size);
  for (size_t i = 0; i < schemas[k].n; i++) {
    const char *base = (const char *)p->payload + schemas[k].offset[i];
    uint64_t t = schemas[k].type[i];
    char value[64];
    if (t == TYPE_UINT64 || t == TYPE_SIZE) {
      uint64_t v;
      memcpy(&v, base, sizeof v);
      snprintf(value, sizeof value, "%llu", (unsigned long long)v);
    } else {
      int v;
      memcpy(&v, base, sizeof v);
      snprintf(value, sizeof value, "%d", v);
      for (int e = 0; e < n_enums; e++)
        if (enums[e].id == t)
          for (size_t j = 0; j < enums[e].n; j++)
            if (enums[e].value[j] == (uint64_t)v) snprintf(value, sizeof value, "%s", enums[e].name[j]);
    }
    at += snprintf(out + at, len - (size_t)at, "%s%s=%s", i ? "," : "", schemas[k].name[i], value);
  }
  snprintf(out + at, len - (size_t)at, "}");
  pthread_mutex_unlock(&lock);
}

static int range_push_ex(void *domain, const struct attributes *a) {
  const struct domain *d = domain;
  const char *msg = "?";
  if (a->message_type == 1) msg = a->message;                              /* ASCII */
  if (a->message_type == 3) msg = ((const struct string *)a->message)->text; /* registered */
  if (a->payload_type == PAYLOAD_TYPE_EXT) {
    char text[1024] = "";
    const struct payload_data *p = (const struct payload_data *)(uintptr_t)a->payload;
    for (int32_t i = 0; i < a->reserved0; i++) {
      size_t at = strlen(text);
      if (i) text[at++] = ';';
      decode(&p[i], text + at, sizeof text - at);
    }
    RECORD("push %s %s payloadType=ext payload=%s from=%s\n", d ? d->name : "(none)", msg, text,
           caller(__builtin_return_address(0)));
    return 0;
  }
  RECORD("push %s %s payloadType=%d payload=%llu from=%s\n", d ? d->name : "(none)", msg, a->payload_type,
         (unsigned long long)a->payload, caller(__builtin_return_address(0)));
  return 0;
}

#ifndef NVTX_RECORD_NO_EXT
/* NVTX's extension entry point: the payload extension (module 2) gets the schema and enum
 * registrations; other modules (counters, memory, ...) are left disabled. Built without it
 * (-DNVTX_RECORD_NO_EXT), the recorder is a tool that knows no extension. */
int InitializeInjectionNvtxExtension(struct module_info *m) {
  if (m->module_id != 2 || m->segments_count < 1 || m->segments[0].slot_count < 2) return 1;
  const uint16_t (*ti)[2] = m->type_info;
  RECORD("ext payload compat=0x%x slots=%zu types=%u int=%u/%u size=%u/%u from=%s\n", m->compat_id,
         m->segments[0].slot_count, ti ? ti[0][0] : 0, ti ? ti[TYPE_INT][0] : 0, ti ? ti[TYPE_INT][1] : 0,
         ti ? ti[TYPE_SIZE][0] : 0, ti ? ti[TYPE_SIZE][1] : 0, caller(__builtin_return_address(0)));
  m->segments[0].slots[0] = (intptr_t)schema_register; /* NVTX3EXT_CBID_nvtxPayloadSchemaRegister */
  m->segments[0].slots[1] = (intptr_t)enum_register;   /* NVTX3EXT_CBID_nvtxPayloadEnumRegister */
  return 1;
}
#endif

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
