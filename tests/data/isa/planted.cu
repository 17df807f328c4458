// Kernels for tests/isa_check.rs: one that keeps every rule of build/isa_check.rs and one that
// breaks each rule, compiled with the build's own compilers and flags.
#include "rcclx_port.h"

// Keeps every rule: the port's publication protocol in a loop (the shape that made clang drop
// the waits, llvm/llvm-project PR 178316).
extern "C" __global__ void __launch_bounds__(512, 1)
planted_clean(uint32_t* flag, const uint32_t* peer_flag, uint32_t* d, int n) {
  for (int it = 0; it < n; ++it) {
    rcclx_block_publish();
    __syncthreads();
    if (threadIdx.x == 0) {
      rcclx_st_release_sys(flag, (uint32_t)it);
      while (!rcclx_epoch_geq(rcclx_poll_sys(peer_flag), (uint32_t)it)) rcclx_poll_pause();
      rcclx_acquire_sys();
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 1024; i += 512) d[i + (it + 1) * 1024] = d[i + it * 1024] + 1;
  }
}

#if defined(__HIP__)
// Breaks `release-without-wait` by writing the hazard out: the L2 writeback of a release and the
// workgroup barrier after it, with no `s_waitcnt vmcnt(0)` between them, in one asm statement
// so that no compiler can add or drop a wait (the release as the language writes it loses its
// wait only through a compiler bug, llvm/llvm-project PR 178316, which a fixed clang would not
// plant). Then one thread's store of the flag, as rcclx's releases end.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_release_without_wait(uint32_t* flag, uint32_t* d, int n) {
  for (int it = 0; it < n; ++it) {
    for (int i = threadIdx.x; i < 1024; i += 512) d[i + (it + 1) * 1024] = d[i + it * 1024] + 1;
    asm volatile("buffer_wbl2 sc0 sc1\n\ts_barrier" ::: "memory");
    if (threadIdx.x == 0) __hip_atomic_store(flag, (uint32_t)it, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  }
}

// The hazards of the other memory-model rules, each written out (a primitive left out, or the
// instruction in inline assembly), so that no compiler has to make a mistake for the test.

// Breaks `publish-without-wait`: every thread stores, then the workgroup barrier with no
// `s_waitcnt vmcnt(0)` before it (rcclx_block_publish left out; the barrier in assembly, so
// that nothing adds the wait), then one thread's release.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_publish_without_wait(uint32_t* flag, uint32_t* d, int n) {
  for (int it = 0; it < n; ++it) {
    for (int i = threadIdx.x; i < 1024; i += 512) d[i + (it + 1) * 1024] = d[i + it * 1024] + 1;
    asm volatile("s_barrier" ::: "memory");
    if (threadIdx.x == 0) rcclx_st_release_sys(flag, (uint32_t)it);
  }
}

// Breaks `release-missing`: the block publishes, then one thread stores the flag relaxed
// (a 32-bit system-scope store with no `buffer_wbl2`): a release written as a plain store.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_release_missing(uint32_t* flag, uint32_t* d, int n) {
  for (int it = 0; it < n; ++it) {
    for (int i = threadIdx.x; i < 1024; i += 512) d[i + (it + 1) * 1024] = d[i + it * 1024] + 1;
    rcclx_block_publish();
    __syncthreads();
    if (threadIdx.x == 0) __hip_atomic_store(flag, (uint32_t)it, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  }
}

// Breaks `acquire-missing`: a flag wait (rcclx_poll_sys, paused) with no rcclx_acquire_sys
// after it; the block then reads what the peer published.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_acquire_missing(const uint32_t* peer_flag, uint32_t* d, int n) {
  if (threadIdx.x == 0)
    while (!rcclx_epoch_geq(rcclx_poll_sys(peer_flag), (uint32_t)n)) rcclx_poll_pause();
  __syncthreads();
  for (int i = threadIdx.x; i < 1024; i += 512) d[i + 1024] = d[i] + 1;
}

// Breaks `acquire-missing` the other way: the acquire's `buffer_inv` and the barrier after it
// in one asm statement, with no `s_waitcnt vmcnt(0)` between (the invalidate may not be done
// when the other waves read).
extern "C" __global__ void __launch_bounds__(512, 1)
planted_acquire_unwaited(const uint32_t* peer_flag, uint32_t* d, int n) {
  if (threadIdx.x == 0)
    while (!rcclx_epoch_geq(rcclx_poll_sys(peer_flag), (uint32_t)n)) rcclx_poll_pause();
  asm volatile("buffer_inv sc0 sc1\n\ts_barrier" ::: "memory");
  for (int i = threadIdx.x; i < 1024; i += 512) d[i + 1024] = d[i] + 1;
}

// Breaks `poll-bits`: a wait that polls with a plain `global_load_dword` (no `sc0 sc1`: it may
// read a stale cached copy forever), in assembly.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_poll_plain(const uint32_t* peer_flag, uint32_t* d, int n) {
  if (threadIdx.x == 0) {
    uint32_t v;
    for (;;) {
      asm volatile("global_load_dword %0, %1, off\n\ts_waitcnt vmcnt(0)" : "=v"(v) : "v"(peer_flag) : "memory");
      if (rcclx_epoch_geq(v, (uint32_t)n)) break;
      rcclx_poll_pause();
    }
    rcclx_acquire_sys();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 1024; i += 512) d[i + 1024] = d[i] + 1;
}

// Breaks `poll-bits`: a wait that reads its flag through the scalar cache (`s_load_dword`), in
// assembly.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_poll_scalar(const uint32_t* peer_flag, uint32_t* d, int n) {
  if (threadIdx.x == 0) {
    uint32_t v;
    for (;;) {
      asm volatile("s_load_dword %0, %1, 0x0\n\ts_waitcnt lgkmcnt(0)" : "=s"(v) : "s"(peer_flag) : "memory");
      if (rcclx_epoch_geq(v, (uint32_t)n)) break;
      rcclx_poll_pause();
    }
    rcclx_acquire_sys();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 1024; i += 512) d[i + 1024] = d[i] + 1;
}

// Breaks `system-shape`: an LL unit stored as one 16-byte global store (not two single-copy
// atomic 8-byte words), and a 2-byte system-scope store, in assembly.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_system_shape(uint64_t* inbox, uint16_t* half, uint32_t flag) {
  typedef uint32_t v4u __attribute__((ext_vector_type(4)));
  const v4u unit = {threadIdx.x, flag, threadIdx.x + 1, flag};
  asm volatile("global_store_dwordx4 %0, %1, off sc0 sc1" ::"v"(inbox + 2 * threadIdx.x), "v"(unit) : "memory");
  asm volatile("global_store_short %0, %1, off sc0 sc1" ::"v"(half + threadIdx.x), "v"(flag) : "memory");
}
#endif

// Breaks `scratch` (AMD) and `spill` (sm_90): an array indexed by a run-time value lives in
// private (local) memory.
extern "C" __global__ void __launch_bounds__(512, 1)
planted_scratch(const uint32_t* in, uint32_t* out, int k) {
  uint32_t a[64];
#pragma unroll 1
  for (int i = 0; i < 64; ++i) a[i] = in[threadIdx.x * 64 + i] * (uint32_t)(i + k);
  out[threadIdx.x] = a[(threadIdx.x + (uint32_t)k) & 63];
}
