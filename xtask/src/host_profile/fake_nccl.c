/* An NCCL 2.28.3 that does nothing, for `cargo xtask host-profile`: one-rank communicators,
 * every call done at once (nccl-sys loads each function when first called, and names one this
 * file lacks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIBRARY "libnccl"
#include "counts.h"

typedef struct { int ranks, rank; } comm_t;
/* Passed by value, as NCCL's `ncclUniqueId`. */
typedef struct { char internal[128]; } unique_id_t;

/* `cargo xtask host-profile --evict-kib N` sets HOST_PROFILE_EVICT_KIB: each ncclAllReduce then
 * writes one byte of every 64-byte line of N KiB of its own, to evict the caller's data from the
 * caches as a real NCCL's enqueue (its proxy's work, the kernel's arguments, the launch) is
 * assumed to: the caller's next reads and writes of its own state then miss, and a layer's cost
 * grows with the cache lines it touches per operation. How much a real enqueue evicts is not
 * measured here. */
static volatile unsigned char *evicted;
static size_t evicted_bytes;

/* The most HOST_PROFILE_EVICT_KIB takes: 1 GiB, as the xtask's option. */
#define MAX_EVICT_KIB (1ull << 20)

__attribute__((constructor)) static void start_evicting(void) {
    const char *kib = getenv("HOST_PROFILE_EVICT_KIB");
    if (!kib || !*kib) return;
    char *end;
    unsigned long long n = strtoull(kib, &end, 10);
    if (*end || *kib == '-' || n > MAX_EVICT_KIB) {
        fprintf(stderr, "libnccl (host-profile): HOST_PROFILE_EVICT_KIB=%s: expected KiB from 0 to %llu\n", kib,
                MAX_EVICT_KIB);
        abort();
    }
    if (!n) return;
    evicted = calloc(n * 1024, 1);
    if (!evicted) {
        fprintf(stderr, "libnccl (host-profile): could not allocate the %llu KiB to evict with\n", n);
        abort();
    }
    evicted_bytes = n * 1024;
}

/* Inlined, so that its misses count as ncclAllReduce's, which the footprint scripts leave out. */
static inline __attribute__((always_inline)) void evict(void) {
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
