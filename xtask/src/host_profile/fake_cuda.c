/* A CUDA driver that does nothing, for `cargo xtask host-profile`: what cudarc and the
 * crates call while they issue 8-byte in-place all_reduces, and nothing else (cudarc loads
 * each function when first called, and names one this file lacks).
 * "Device" memory is host memory, every stream and event a heap cell, every event complete
 * at once, no stream ever capturing: the host code runs as on a GPU, the driver costs nothing.
 * With HOST_PROFILE_GPU_BEHIND_MS=N (`cargo xtask host-profile --gpu-behind-ms N`) the "GPU" runs
 * behind instead: an event recorded is not complete until a synchronize after it, and each
 * synchronize first sleeps N ms, as the host waits for a GPU that is N ms behind. A loop of
 * operations then runs after a wait with every one of them still pending, as world-cost's rounds
 * at world size 2 and more do on one shared GPU. Without it, recording an event costs nothing.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIBRARY "libcuda"
#include "counts.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static char context[64];

static void *cell(void) { return calloc(1, 64); }

/* The "GPU"'s delay in ms (HOST_PROFILE_GPU_BEHIND_MS; 0: none, events complete at once). */
static unsigned behind_ms;
/* Events recorded so far, and how many of them the last synchronize completed: an event holds
 * its number in its cell. */
static atomic_ulong recorded, completed;

/* The most HOST_PROFILE_GPU_BEHIND_MS takes, as the xtask's option. */
#define MAX_BEHIND_MS 10000ul

__attribute__((constructor)) static void start_behind(void) {
    const char *ms = getenv("HOST_PROFILE_GPU_BEHIND_MS");
    if (!ms || !*ms) return;
    char *end;
    unsigned long n = strtoul(ms, &end, 10);
    if (*end || *ms == '-' || n > MAX_BEHIND_MS) {
        fprintf(stderr, "libcuda (host-profile): HOST_PROFILE_GPU_BEHIND_MS=%s: expected ms from 0 to %lu\n", ms,
                MAX_BEHIND_MS);
        abort();
    }
    behind_ms = (unsigned)n;
}

/* N ms, whole, however often a signal ends the sleep early. */
static void sleep_ms(unsigned ms) {
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {}
}

/* A synchronize: the wait for the "GPU", then every event recorded before it complete
 * (`completed` only rises: a synchronize that waited longer may have completed more). */
static void synchronize(void) {
    if (!behind_ms) return;
    unsigned long upto = atomic_load(&recorded);
    sleep_ms(behind_ms);
    unsigned long was = atomic_load(&completed);
    while (was < upto && !atomic_compare_exchange_weak(&completed, &was, upto)) {}
}

/* An event's number, in its cell (0: never recorded, complete as in CUDA). */
static atomic_ulong *event_number(void *event) { return (atomic_ulong *)event; }

CUresult cuInit(unsigned flags) { COUNTED; return 0; }
CUresult cuDriverGetVersion(int *version) { COUNTED; *version = 12080; return 0; }
CUresult cuDeviceGetCount(int *count) { COUNTED; *count = 1; return 0; }
CUresult cuDeviceGet(int *device, int ordinal) { COUNTED; *device = ordinal; return 0; }
CUresult cuDeviceGetName(char *name, int len, int device) { COUNTED; strncpy(name, "no GPU (xtask host-profile)", len); return 0; }
/* 75 and 76: the compute capability's major and minor (an sm_90 card); anything else 1. */
CUresult cuDeviceGetAttribute(int *value, int attribute, int device) { COUNTED; *value = attribute == 75 ? 9 : attribute == 76 ? 0 : 1; return 0; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int device) { COUNTED; *bytes = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetUuid(char *uuid, int device) { COUNTED; memset(uuid, 7, 16); return 0; }
CUresult cuDeviceGetUuid_v2(char *uuid, int device) { COUNTED; memset(uuid, 7, 16); return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) { COUNTED; *ctx = context; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int device) { COUNTED; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { COUNTED; *ctx = context; return 0; }
CUresult cuCtxGetDevice(int *device) { COUNTED; *device = 0; return 0; }
CUresult cuCtxSynchronize(void) { COUNTED; synchronize(); return 0; }
CUresult cuStreamCreate(void **stream, unsigned flags) { COUNTED; *stream = cell(); return 0; }
CUresult cuStreamCreateWithPriority(void **stream, unsigned flags, int priority) { COUNTED; *stream = cell(); return 0; }
CUresult cuStreamDestroy_v2(void *stream) { COUNTED; free(stream); return 0; }
CUresult cuStreamSynchronize(void *stream) { COUNTED; synchronize(); return 0; }
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) { COUNTED; return 0; }
CUresult cuStreamIsCapturing(void *stream, int *status) { COUNTED; *status = 0; return 0; }
CUresult cuThreadExchangeStreamCaptureMode(int *mode) { COUNTED; return 0; }
CUresult cuEventCreate(void **event, unsigned flags) { COUNTED; *event = cell(); return 0; }
CUresult cuEventDestroy_v2(void *event) { COUNTED; free(event); return 0; }
CUresult cuEventRecord(void *event, void *stream) { COUNTED;
    if (behind_ms) atomic_store_explicit(event_number(event), atomic_fetch_add(&recorded, 1) + 1, memory_order_relaxed);
    return 0;
}
static int is_complete(void *event) {
    return !behind_ms || atomic_load_explicit(event_number(event), memory_order_relaxed) <= atomic_load(&completed);
}
/* 600: CUDA_ERROR_NOT_READY. */
CUresult cuEventQuery(void *event) { COUNTED; return is_complete(event) ? 0 : 600; }
CUresult cuEventSynchronize(void *event) { COUNTED; if (!is_complete(event)) synchronize(); return 0; }
CUresult cuEventElapsedTime(float *ms, void *start, void *end) { COUNTED; *ms = 0.001f; return 0; }
CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) { COUNTED; *ms = 0.001f; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t n) { COUNTED; *ptr = (CUdeviceptr)calloc(1, n ? n : 1); return 0; }
CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t n, void *stream) { COUNTED; return cuMemAlloc_v2(ptr, n); }
CUresult cuMemFree_v2(CUdeviceptr ptr) { COUNTED; free((void *)ptr); return 0; }
CUresult cuMemFreeAsync(CUdeviceptr ptr, void *stream) { COUNTED; return cuMemFree_v2(ptr); }
CUresult cuMemcpyHtoD_v2(CUdeviceptr to, const void *from, size_t n) { COUNTED; memcpy((void *)to, from, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr to, const void *from, size_t n, void *stream) { COUNTED; return cuMemcpyHtoD_v2(to, from, n); }
CUresult cuMemcpyDtoH_v2(void *to, CUdeviceptr from, size_t n) { COUNTED; memcpy(to, (void *)from, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *to, CUdeviceptr from, size_t n, void *stream) { COUNTED; return cuMemcpyDtoH_v2(to, from, n); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr to, CUdeviceptr from, size_t n, void *stream) { COUNTED; memmove((void *)to, (void *)from, n); return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr to, unsigned char value, size_t n) { COUNTED; memset((void *)to, value, n); return 0; }
CUresult cuMemsetD8Async(CUdeviceptr to, unsigned char value, size_t n, void *stream) { COUNTED; return cuMemsetD8_v2(to, value, n); }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { COUNTED; *free_bytes = (size_t)70 << 30; *total = (size_t)80 << 30; return 0; }
CUresult cuGetErrorString(int error, const char **text) { COUNTED; *text = "an error of xtask host-profile's driver"; return 0; }
CUresult cuGetErrorName(int error, const char **text) { COUNTED; *text = "HOST_PROFILE_ERROR"; return 0; }
