// link_perf: the link between two GPUs of one host, as the performance model needs it
// (bench/model.py; bench/README.md, "2-GPU run"). One process, GPUs 0 and 1, peer access both
// ways; no NCCL. Every line of output that carries a number starts with `LINK ` and is
// `key=value` pairs (bench/x2_summary.py reads them):
//
//   LINK test=bidir mode=pull|push|ce blocks=B bytes=S us=T gbps_per_gpu=G
//       both GPUs copy S bytes at once, ITERS times back to back: pull = a kernel reads the
//       peer's buffer and writes its own, push = reads its own and writes the peer's, ce =
//       cudaMemcpyPeerAsync on each GPU's stream (copy engines; blocks=0). T = the slower GPU's
//       time per copy, G = S / T per GPU and direction.
//   LINK test=flag where=remote|local us_one_way=T rounds=R
//       ping-pong of a flag between one thread on each GPU: a system-scope release store and an
//       acquire load. remote: each side stores into the peer's memory and polls its own;
//       local: each side stores into its own memory and the peer polls it across the link.
//   LINK test=release mode=pull|push|none blocks=B bytes=S ns_median=T ns_max=M
//       what one system-scope release (a store with release order) costs each block right after
//       the block copied its share of S bytes (pull: remote loads, local stores; push: remote
//       stores still in flight; none: nothing copied).
//
//   link_perf [--bytes 64M] [--iters 20] [--blocks 32,64,128] [--rounds 20000]
// Exit status 2 on a usage error or fewer than 2 GPUs, 1 when a CUDA call fails or a flag wait
// times out (a peer that never answers ends the wait after ~2 s, never a hang).
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "link_perf: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

using SysFlag = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;
constexpr int kThreads = 512;
constexpr uint64_t kTimeoutNs = 2000000000ull;

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Grid-stride copy of 16-byte vectors; pull or push is only which pointer is the peer's.
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t vecs) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < vecs; i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// Ping-pong: thread 0 of a one-block kernel on each GPU. `mine` is polled, `theirs` stored to.
// The starter (GPU 0) sends 1, 3, 5, ...; the other answers with the next even number.
// result[0] = ns of `rounds` round trips (starter), result[1] = 1 on a timeout.
__global__ void pingpong_kernel(uint32_t* mine, uint32_t* theirs, uint32_t rounds, int starter, uint64_t* result) {
  if (threadIdx.x != 0) return;
  SysFlag in(*mine), out(*theirs);
  uint64_t t0 = now_ns(), deadline = t0 + kTimeoutNs;
  for (uint32_t r = 0; r < rounds; ++r) {
    uint32_t want = starter ? 2 * r + 2 : 2 * r + 1;
    if (starter) out.store(2 * r + 1, cuda::memory_order_release);
    while (in.load(cuda::memory_order_acquire) != want) {
      if (now_ns() > deadline) {
        result[1] = 1;
        return;
      }
    }
    if (!starter) out.store(2 * r + 2, cuda::memory_order_release);
  }
  if (starter) result[0] = now_ns() - t0;
}

// Each block copies its share, then thread 0 times one system-scope release store to its own
// flag word (the release waits for the block's earlier stores; __syncthreads makes them the
// block's). out[b] = ns of that store.
__global__ void release_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t vecs, uint32_t* flags,
                               uint64_t* out) {
  uint64_t per = (vecs + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(vecs, lo + per);
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t t0 = now_ns();
    SysFlag(flags[blockIdx.x]).store(1, cuda::memory_order_release);
    // A dependent load orders the second timer read after the store completed its ordering.
    uint32_t v = SysFlag(flags[blockIdx.x]).load(cuda::memory_order_acquire);
    out[blockIdx.x] = now_ns() - t0 + (v == 1 ? 0 : 1);
  }
}

struct Gpu {
  cudaStream_t s;
  cudaEvent_t a, b;
  uint4 *src, *dst;  // local buffers of `bytes`
  uint32_t* flags;   // 4096 words, zeroed per test
  uint64_t* result;  // 2 words
};

static uint64_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  uint64_t m = *end == 'K' ? 1ull << 10 : *end == 'M' ? 1ull << 20 : *end == 'G' ? 1ull << 30 : 1;
  return (uint64_t)(v * m);
}

int main(int argc, char** argv) {
  uint64_t bytes = 64ull << 20;
  int iters = 20;
  uint32_t rounds = 20000;
  std::vector<int> blocks = {32, 64, 128};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "link_perf: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--bytes") bytes = parse_size(v);
    else if (a == "--iters") iters = atoi(v);
    else if (a == "--rounds") rounds = (uint32_t)atoi(v);
    else if (a == "--blocks") {
      blocks.clear();
      for (char* p = strtok(const_cast<char*>(v), ","); p; p = strtok(nullptr, ",")) blocks.push_back(atoi(p));
    } else {
      fprintf(stderr, "link_perf: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (bytes < 16 || iters < 1 || rounds < 1 || blocks.empty() ||
      std::any_of(blocks.begin(), blocks.end(), [](int b) { return b < 1 || b > 4096; })) {
    fprintf(stderr, "link_perf: bad --bytes, --iters, --rounds or --blocks (1-4096)\n");
    return 2;
  }
  bytes &= ~15ull;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "link_perf: needs 2 GPUs, %d visible\n", n);
    return 2;
  }
  Gpu g[2];
  for (int d = 0; d < 2; ++d) {
    int ok = 0;
    CK(cudaDeviceCanAccessPeer(&ok, d, 1 - d));
    if (!ok) {
      fprintf(stderr, "link_perf: GPU %d cannot access GPU %d\n", d, 1 - d);
      return 1;
    }
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaStreamCreateWithFlags(&g[d].s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g[d].a));
    CK(cudaEventCreate(&g[d].b));
    CK(cudaMalloc(&g[d].src, bytes));
    CK(cudaMalloc(&g[d].dst, bytes));
    CK(cudaMemset(g[d].src, d + 1, bytes));
    CK(cudaMalloc(&g[d].flags, 4096 * sizeof(uint32_t)));
    CK(cudaMalloc(&g[d].result, 2 * sizeof(uint64_t)));
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# link_perf: %s x2, bytes=%llu iters=%d rounds=%u\n", prop.name, (unsigned long long)bytes, iters, rounds);
  const uint64_t vecs = bytes / 16;

  // Both GPUs at once; the slower GPU's time counts.
  auto bidir = [&](const char* mode, int nb) {
    for (int rep = 0; rep < 2; ++rep) {  // the first round warms up
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
      }
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        Gpu &me = g[d], &peer = g[1 - d];
        CK(cudaEventRecord(me.a, me.s));
        for (int i = 0; i < iters; ++i) {
          if (!strcmp(mode, "pull")) copy_kernel<<<nb, kThreads, 0, me.s>>>(peer.src, me.dst, vecs);
          else if (!strcmp(mode, "push")) copy_kernel<<<nb, kThreads, 0, me.s>>>(me.src, peer.dst, vecs);
          else CK(cudaMemcpyPeerAsync(peer.dst, 1 - d, me.src, d, bytes, me.s));
        }
        CK(cudaGetLastError());
        CK(cudaEventRecord(me.b, me.s));
      }
      float worst = 0;
      for (int d = 0; d < 2; ++d) {
        float ms;
        CK(cudaEventSynchronize(g[d].b));
        CK(cudaEventElapsedTime(&ms, g[d].a, g[d].b));
        worst = std::max(worst, ms);
      }
      if (rep == 1) {
        double us = worst * 1e3 / iters;
        printf("LINK test=bidir mode=%s blocks=%d bytes=%llu us=%.2f gbps_per_gpu=%.1f\n", mode, nb,
               (unsigned long long)bytes, us, bytes / (us * 1e3));
      }
    }
  };
  for (int nb : blocks) {
    bidir("pull", nb);
    bidir("push", nb);
  }
  bidir("ce", 0);

  int rc = 0;
  for (const char* where : {"remote", "local"}) {
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaMemset(g[d].flags, 0, 4096 * sizeof(uint32_t)));
      CK(cudaMemset(g[d].result, 0, 2 * sizeof(uint64_t)));
      CK(cudaDeviceSynchronize());
    }
    bool remote = !strcmp(where, "remote");
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      // remote: poll my memory, store into the peer's; local: store into mine, poll the peer's.
      uint32_t* mine = remote ? g[d].flags : g[1 - d].flags + 1;
      uint32_t* theirs = remote ? g[1 - d].flags : g[d].flags + 1;
      pingpong_kernel<<<1, 32, 0, g[d].s>>>(mine, theirs, rounds, d == 0, g[d].result);
      CK(cudaGetLastError());
    }
    uint64_t res[2][2];
    for (int d = 0; d < 2; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaStreamSynchronize(g[d].s));
      CK(cudaMemcpy(res[d], g[d].result, sizeof res[d], cudaMemcpyDeviceToHost));
    }
    if (res[0][1] || res[1][1]) {
      printf("# flag %s: a wait timed out\n", where);
      rc = 1;
      continue;
    }
    printf("LINK test=flag where=%s us_one_way=%.3f rounds=%u\n", where, res[0][0] / 1e3 / (2.0 * rounds), rounds);
  }

  // The release after a copy, on GPU 0 while GPU 1 is idle.
  CK(cudaSetDevice(0));
  uint64_t* out;
  CK(cudaMalloc(&out, 4096 * sizeof(uint64_t)));
  for (int nb : blocks) {
    for (const char* mode : {"none", "pull", "push"}) {
      const uint4* src = !strcmp(mode, "pull") ? g[1].src : g[0].src;
      uint4* dst = !strcmp(mode, "push") ? g[1].dst : g[0].dst;
      uint64_t v = !strcmp(mode, "none") ? 0 : vecs;
      std::vector<uint64_t> ns(nb);
      for (int rep = 0; rep < 2; ++rep) {
        CK(cudaMemset(g[0].flags, 0, 4096 * sizeof(uint32_t)));
        release_kernel<<<nb, kThreads, 0, g[0].s>>>(src, dst, v, g[0].flags, out);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(g[0].s));
      }
      CK(cudaMemcpy(ns.data(), out, nb * sizeof(uint64_t), cudaMemcpyDeviceToHost));
      std::sort(ns.begin(), ns.end());
      printf("LINK test=release mode=%s blocks=%d bytes=%llu ns_median=%llu ns_max=%llu\n", mode, nb,
             (unsigned long long)(v * 16), (unsigned long long)ns[nb / 2], (unsigned long long)ns[nb - 1]);
    }
  }
  return rc;
}
