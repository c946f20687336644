/* An NCCL 2.28.3 that does nothing, for `cargo xtask host-profile`: one-rank communicators,
 * every call done at once (nccl-sys loads each function when first called, and names one this
 * file lacks). */
#include <stdlib.h>
#include <string.h>

#define LIBRARY "libnccl"
#include "counts.h"

typedef struct { int ranks, rank; } comm_t;
/* Passed by value, as NCCL's `ncclUniqueId`. */
typedef struct { char internal[128]; } unique_id_t;

/* `cargo xtask host-profile --evict-kib N` sets HOST_PROFILE_EVICT_KIB: each ncclAllReduce then
 * writes one byte of every 64-byte line of N KiB of its own, as a real NCCL's enqueue (its proxy's work,
 * the kernel's arguments, the launch) evicts the caller's data from the caches. The caller's next
 * reads and writes of its own state then miss, as they do on a GPU machine at world size 2 and
 * more: a layer's cost grows with the cache lines it touches per operation. */
static volatile unsigned char *evicted;
static size_t evicted_bytes;

__attribute__((constructor)) static void start_evicting(void) {
    const char *kib = getenv("HOST_PROFILE_EVICT_KIB");
    size_t bytes = kib ? strtoull(kib, NULL, 10) * 1024 : 0;
    if (bytes && (evicted = calloc(bytes, 1))) evicted_bytes = bytes;
}

static void evict(void) {
    for (size_t i = 0; i < evicted_bytes; i += 64) evicted[i]++;
}

int ncclGetVersion(int *version) { COUNTED; *version = 22803; return 0; }
int ncclGetUniqueId(unique_id_t *id) { COUNTED; memset(id->internal, 1, sizeof id->internal); return 0; }
int ncclCommInitRank(comm_t **comm, int ranks, unique_id_t id, int rank) { COUNTED;
    *comm = calloc(1, sizeof(comm_t));
    (*comm)->ranks = ranks;
    (*comm)->rank = rank;
    return 0;
}
int ncclCommInitRankConfig(comm_t **comm, int ranks, unique_id_t id, int rank, void *config) { COUNTED; return ncclCommInitRank(comm, ranks, id, rank); }
int ncclCommInitAll(comm_t **comms, int count, const int *devices) { COUNTED;
    unique_id_t id = {{0}};
    for (int i = 0; i < count; i++) ncclCommInitRank(&comms[i], count, id, i);
    return 0;
}
int ncclCommCount(comm_t *comm, int *count) { COUNTED; *count = comm->ranks; return 0; }
int ncclCommUserRank(comm_t *comm, int *rank) { COUNTED; *rank = comm->rank; return 0; }
int ncclCommCuDevice(comm_t *comm, int *device) { COUNTED; *device = 0; return 0; }
int ncclCommGetAsyncError(comm_t *comm, int *result) { COUNTED; *result = 0; return 0; }
int ncclCommFinalize(comm_t *comm) { COUNTED; return 0; }
int ncclCommDestroy(comm_t *comm) { COUNTED; free(comm); return 0; }
int ncclCommAbort(comm_t *comm) { COUNTED; free(comm); return 0; }
int ncclGroupStart(void) { COUNTED; return 0; }
int ncclGroupEnd(void) { COUNTED; return 0; }
int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, comm_t *comm, void *stream) { COUNTED; evict(); return 0; }
const char *ncclGetErrorString(int result) { COUNTED; return "an error of xtask host-profile's NCCL"; }
const char *ncclGetLastError(comm_t *comm) { COUNTED; return ""; }
