// Fidelity probe: times back-to-back device-to-device copies the way
// nccl-tests does (rotation over 256 MiB buffers, 20 warm-up, 200 timed),
// per stream and per copy method, to find where the per-process fast and
// slow states at 1-8 MiB come from.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

static double now_us() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

int main(int argc, char** argv) {
    int nstreams = argc > 1 ? atoi(argv[1]) : 4;
    const char* label = argc > 2 ? argv[2] : "run";
    bool quick = argc > 3;
    size_t cap = 256ull << 20;
    char *src, *dst;
    CK(cudaMalloc(&src, cap));
    CK(cudaMalloc(&dst, cap));
    CK(cudaMemset(src, 1, cap));
    CK(cudaMemset(dst, 0, cap));
    std::vector<cudaStream_t> streams(nstreams);
    for (auto& s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int iters = 200, warm = 20;
    const char* names[] = {"memcpy", "kernel"};
    for (int method = 0; method < (quick ? 1 : 2); method++)
        for (int si = 0; si < nstreams; si++)
            for (size_t size = 1 << 20; size <= (quick ? (1u << 20) : (8u << 20)); size *= 2) {
                cudaStream_t s = streams[si];
                size_t steps = cap / size;
                auto op = [&](int it) {
                    size_t shift = size * (it % steps);
                    if (method == 0)
                        CK(cudaMemcpyAsync(dst + shift, src + shift, size, cudaMemcpyDeviceToDevice, s));
                    else
                        copy_kernel<<<132 * 4, 512, 0, s>>>((const int4*)(src + shift), (int4*)(dst + shift), size / 16);
                };
                for (int rep = 0; rep < 3; rep++) {
                    for (int w = 0; w < warm; w++) op(w);
                    CK(cudaStreamSynchronize(s));
                    double h0 = now_us();
                    CK(cudaEventRecord(e0, s));
                    for (int it = 0; it < iters; it++) op(it);
                    CK(cudaEventRecord(e1, s));
                    double h1 = now_us();
                    CK(cudaStreamSynchronize(s));
                    double h2 = now_us();
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    printf("%s method=%s stream=%d size=%zu rep=%d gpu_us=%.2f enqueue_us=%.2f wall_us=%.2f\n", label,
                           names[method], si, size, rep, ms * 1e3 / iters, (h1 - h0) / iters, (h2 - h0) / iters);
                }
            }
    return 0;
}
