/* The call counts of `cargo xtask host-profile --calls`, for the fake libraries that include
 * this: with HOST_PROFILE_CALLS set to a folder, each library counts the calls of each of its
 * functions (COUNTED at the top of each) and writes them, one "name count" line each, to
 * HOST_PROFILE_CALLS/<LIBRARY>.txt at exit. Without it a call costs one branch. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* More functions than either fake has. */
#define MAX_COUNTED 128

static struct { const char *name; unsigned long calls; } counted[MAX_COUNTED];
static pthread_mutex_t counting_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *counts_folder;

/* `name` is a function's __func__, one address per function. */
static void count_call(const char *name) {
    pthread_mutex_lock(&counting_lock);
    for (int i = 0; i < MAX_COUNTED; i++) {
        if (counted[i].name == name || !counted[i].name) {
            counted[i].name = name;
            counted[i].calls++;
            break;
        }
    }
    pthread_mutex_unlock(&counting_lock);
}

#define COUNTED do { if (counts_folder) count_call(__func__); } while (0)

__attribute__((constructor)) static void start_counting(void) { counts_folder = getenv("HOST_PROFILE_CALLS"); }

__attribute__((destructor)) static void write_counts(void) {
    if (!counts_folder) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.txt", counts_folder, LIBRARY);
    FILE *out = fopen(path, "w");
    if (!out) return;
    pthread_mutex_lock(&counting_lock);
    for (int i = 0; i < MAX_COUNTED && counted[i].name; i++) fprintf(out, "%s %lu\n", counted[i].name, counted[i].calls);
    pthread_mutex_unlock(&counting_lock);
    fclose(out);
}
