/* A recording HIP runtime for tests/hip_errors.rs: loaded by rcclx in place of libamdhip64
 * (RCCLX_HIP_LIB), it exports every hip* entry point rcclx requires, keeps the thread's last
 * error the way ROCm >= 7.0 does, fails the calls the test chooses, and records every call.
 *
 * Last error (ROCm 7, clr's HIP_RETURN): a call returning anything but hipSuccess or
 * hipErrorNotReady stores its code in the thread's slot; a successful call leaves the slot
 * alone; hipGetLastError returns the slot and resets it; hipPeekAtLastError only returns it.
 *
 * Test controls: rec_fail(name, code) makes every later call of `name` return `code` (NULL: no
 * failures), rec_fail_nth(name, n, code) only the n-th; rec_app_error(code) stores `code` as an
 * application call that failed would; rec_calls() is the recorded names, one per line; rec_clear() empties the record;
 * rec_capture(stream, id) starts (id > 0) or ends (0) a stream's capture (below).
 * Two devices; device memory is host memory. Not thread-safe beyond the slot (one test thread). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIP_SUCCESS 0
#define HIP_ERROR_NOT_READY 600

static _Thread_local int last_error = HIP_SUCCESS;
static _Thread_local int current_device = 0;
static char calls[1 << 16];
static size_t calls_len;
static char fail_name[128];
static int fail_code;

/* Calls of the failing name to let through first, then fail once (-1: fail every one). */
static int fail_skip = -1;
void rec_fail(const char *name, int code) {
    fail_skip = -1;
    if (name == NULL) {
        fail_name[0] = '\0';
        return;
    }
    strncpy(fail_name, name, sizeof fail_name - 1);
    fail_name[sizeof fail_name - 1] = '\0';
    fail_code = code;
}
/* Only the n-th (1-based) next call of `name` fails with `code`; the others succeed. */
void rec_fail_nth(const char *name, int n, int code) {
    rec_fail(name, code);
    fail_skip = n - 1;
}
void rec_app_error(int code) { last_error = code; }
const char *rec_calls(void) { return calls; }
void rec_clear(void) {
    calls_len = 0;
    calls[0] = '\0';
}

static void record(const char *name) {
    size_t n = strlen(name);
    if (calls_len + n + 2 < sizeof calls) {
        memcpy(calls + calls_len, name, n);
        calls_len += n;
        calls[calls_len++] = '\n';
        calls[calls_len] = '\0';
    }
}

/* Records the call and returns its result, keeping the slot as ROCm 7 does. */
static int ret(const char *name) {
    record(name);
    int rc = HIP_SUCCESS;
    if (strcmp(name, fail_name) == 0) {
        if (fail_skip < 0) {
            rc = fail_code;
        } else if (fail_skip-- == 0) {
            rc = fail_code;
            fail_name[0] = '\0';
        }
    }
    if (rc != HIP_SUCCESS && rc != HIP_ERROR_NOT_READY) last_error = rc;
    return rc;
}

int hipGetLastError(void) {
    record("hipGetLastError");
    int e = last_error;
    last_error = HIP_SUCCESS;
    return e;
}
int hipPeekAtLastError(void) {
    record("hipPeekAtLastError");
    return last_error;
}
const char *hipGetErrorName(int code) { return code == 0 ? "hipSuccess" : "hipErrorRecorded"; }
const char *hipGetErrorString(int code) { return code == 0 ? "no error" : "failed on purpose (recording HIP)"; }

int hipInit(unsigned flags) { return ret("hipInit"); }
int hipDriverGetVersion(int *v) {
    *v = 70000000;
    return ret("hipDriverGetVersion");
}
int hipGetDeviceCount(int *n) {
    *n = 2;
    return ret("hipGetDeviceCount");
}
int hipSetDevice(int d) {
    int rc = ret("hipSetDevice");
    if (rc == HIP_SUCCESS) current_device = d;
    return rc;
}
int hipGetDevice(int *d) {
    *d = current_device;
    return ret("hipGetDevice");
}
int hipDeviceGetPCIBusId(char *bus, int len, int d) {
    if (len > 0) bus[0] = '\0';
    return ret("hipDeviceGetPCIBusId");
}
/* hipDeviceProp_tR0600: the name at 0, gcnArchName at 1160 (src/gpu/hip.rs, R0600). Device 0 is
 * a gfx942, device 1 a gfx950. */
int hipGetDevicePropertiesR0600(void *props, int d) {
    memset(props, 0, 1472);
    strcpy((char *)props, "Recording GPU");
    strcpy((char *)props + 1160, d == 0 ? "gfx942:sramecc+:xnack-" : "gfx950:sramecc+:xnack-");
    return ret("hipGetDevicePropertiesR0600");
}
int hipDeviceCanAccessPeer(int *can, int d, int p) {
    *can = 1;
    return ret("hipDeviceCanAccessPeer");
}
int hipDeviceEnablePeerAccess(int p, unsigned flags) { return ret("hipDeviceEnablePeerAccess"); }

static int alloc(const char *name, void **p, size_t bytes) {
    int rc = ret(name);
    *p = rc == HIP_SUCCESS ? calloc(1, bytes ? bytes : 1) : NULL;
    return rc;
}
int hipMalloc(void **p, size_t bytes) { return alloc("hipMalloc", p, bytes); }
int hipExtMallocWithFlags(void **p, size_t bytes, unsigned flags) { return alloc("hipExtMallocWithFlags", p, bytes); }
int hipFree(void *p) {
    free(p);
    return ret("hipFree");
}
int hipHostMalloc(void **p, size_t bytes, unsigned flags) { return alloc("hipHostMalloc", p, bytes); }
int hipHostGetDevicePointer(void **d, void *h, unsigned flags) {
    *d = h;
    return ret("hipHostGetDevicePointer");
}
int hipHostFree(void *p) {
    free(p);
    return ret("hipHostFree");
}
int hipMemsetAsync(void *d, int v, size_t n, void *s) { return ret("hipMemsetAsync"); }
int hipMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) { return ret("hipMemcpyAsync"); }

typedef struct {
    char reserved[64];
} hipIpcMemHandle_t;
static char mapped[64];
int hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *p) {
    memset(h, 7, sizeof *h);
    return ret("hipIpcGetMemHandle");
}
int hipIpcOpenMemHandle(void **p, hipIpcMemHandle_t h, unsigned flags) {
    int rc = ret("hipIpcOpenMemHandle");
    *p = rc == HIP_SUCCESS ? (void *)mapped : NULL;
    return rc;
}
int hipIpcCloseMemHandle(void *p) { return ret("hipIpcCloseMemHandle"); }

static int handle_value;
int hipModuleLoadData(void **m, const void *image) {
    int rc = ret("hipModuleLoadData");
    *m = rc == HIP_SUCCESS ? (void *)&handle_value : NULL;
    return rc;
}
int hipModuleGetFunction(void **f, void *m, const char *name) {
    int rc = ret("hipModuleGetFunction");
    *f = rc == HIP_SUCCESS ? (void *)&handle_value : NULL;
    return rc;
}
int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, void *stream, void **args, void **extra) {
    return ret("hipModuleLaunchKernel");
}
int hipStreamCreateWithFlags(void **s, unsigned flags) {
    *s = (void *)&handle_value;
    return ret("hipStreamCreateWithFlags");
}
int hipStreamDestroy(void *s) { return ret("hipStreamDestroy"); }
int hipStreamSynchronize(void *s) { return ret("hipStreamSynchronize"); }
int hipDeviceSynchronize(void) { return ret("hipDeviceSynchronize"); }
int hipStreamQuery(void *s) { return ret("hipStreamQuery"); }
/* Captures: rec_capture(stream, id) puts a stream in capture `id` (0: none). An event keeps the
 * capture it was last recorded in; waiting for it in another capture, or in a capture for one
 * recorded outside (or the reverse), fails as CUDA and HIP do (hipErrorStreamCaptureIsolation). */
#define HIP_ERROR_STREAM_CAPTURE_ISOLATION 905
static struct {
    void *stream;
    unsigned long long id;
} captures[16];
static unsigned long long capture_of(void *s) {
    for (int i = 0; i < 16; i++)
        if (captures[i].stream == s && s != NULL) return captures[i].id;
    return 0;
}
void rec_capture(void *s, unsigned long long id) {
    for (int i = 0; i < 16; i++)
        if (captures[i].stream == s || captures[i].stream == NULL) {
            captures[i].stream = s;
            captures[i].id = id;
            return;
        }
}
int hipStreamIsCapturing(void *s, int *status) {
    *status = capture_of(s) != 0;
    return ret("hipStreamIsCapturing");
}
int hipStreamGetCaptureInfo_v2(void *s, int *status, unsigned long long *id, void **graph, const void ***deps,
                               size_t *ndeps) {
    *status = capture_of(s) != 0;
    if (id) *id = capture_of(s);
    if (graph) *graph = NULL;
    return ret("hipStreamGetCaptureInfo_v2");
}
/* Events are slots of `events`; each remembers the capture of its last record. */
static unsigned long long events[64];
static int events_made;
static int event_index(void *e) { return (int)((unsigned long long *)e - events); }
int hipStreamWaitEvent(void *s, void *e, unsigned flags) {
    char name[96];
    snprintf(name, sizeof name, "hipStreamWaitEvent(s%lu,e%d)", (unsigned long)(uintptr_t)s, event_index(e));
    int rc = ret(name);
    if (rc == HIP_SUCCESS && events[event_index(e)] != capture_of(s)) {
        last_error = HIP_ERROR_STREAM_CAPTURE_ISOLATION;
        return HIP_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    return rc;
}
/* The thread's capture mode (one thread calls here), recorded with the mode each call sets. */
static int capture_mode;
int hipThreadExchangeStreamCaptureMode(int *mode) {
    char name[64];
    snprintf(name, sizeof name, "hipThreadExchangeStreamCaptureMode(%d)", *mode);
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return ret(name);
}
int hipEventCreateWithFlags(void **e, unsigned flags) {
    *e = (void *)&events[events_made++ % 64];
    return ret("hipEventCreateWithFlags");
}
int hipEventRecord(void *e, void *s) {
    char name[96];
    snprintf(name, sizeof name, "hipEventRecord(e%d,s%lu)", event_index(e), (unsigned long)(uintptr_t)s);
    int rc = ret(name);
    if (rc == HIP_SUCCESS) events[event_index(e)] = capture_of(s);
    return rc;
}
int hipEventSynchronize(void *e) { return ret("hipEventSynchronize"); }
int hipEventQuery(void *e) { return ret("hipEventQuery"); }
int hipEventDestroy(void *e) { return ret("hipEventDestroy"); }
