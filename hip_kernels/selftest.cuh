// selftest.cuh - kernels for the GPU self-test (host side: another module calls them by name).
//
// They check, on real hardware, what every rcclx algorithm relies on: kernel launch and
// gridDim (fill), cross-GPU release/acquire with peer/IPC mappings (pingpong), and bounded
// spin-waits that report a timeout to host-visible memory (wait_timeout).
// Any block size <= 1024.
#ifndef RCCLX_SELFTEST_CUH
#define RCCLX_SELFTEST_CUH 1

#include "rcclx_port.h"

// Word offset of the data slots in a pingpong buffer ([0] is the flag; 64 bytes keeps the
// flag's cache line apart from the data).
#define RCCLX_SELFTEST_DATA_OFFSET 16u
// Multiplier of the pingpong data pattern: word i of iteration it is it * K + i.
#define RCCLX_SELFTEST_PATTERN 0x9E3779B1u

// out[i] = seed * 2654435761 + i for i < n (mod 2^32). Grid-stride loop: any grid works,
// and on AMD this exercises gridDim (COv5 hidden argument).
extern "C" __global__ void rcclx_selftest_fill(uint32_t* out, uint32_t n, uint32_t seed) {
  const uint32_t base = seed * 2654435761u;
  const uint32_t stride = gridDim.x * blockDim.x;  // grid of < 2^32 threads
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = base + i;
    // Stops before i + stride could wrap past 2^32; it also keeps clang from computing a
    // trip count with a 64-bit division for runtime unrolling (~300 vs ~55 instructions).
    if (n - i <= stride) break;
  }
}

// Two-GPU ping-pong: launched with ONE block on each of two GPUs at the same time, each with
// its own my_buf and a peer/IPC mapping of the other GPU's buffer as peer_buf.
//   buffer (uint32 words): [0] flag (zero before launch) | [16, 16+n) slot 0 | [16+n, 16+2n) slot 1
//   result (2 words, zero before launch; device or host-mapped memory):
//     [0] += number of mismatching words seen, [1] = 1 if a wait timed out.
//   n < 2^31 (the buffer holds 16 + 2n words); 32-bit indices keep the loops cheap.
// Iteration it = 1..iters: write pattern(it) into the PEER's slot it%2 (remote stores),
// publish (rcclx_block_publish + barrier), thread 0: release-store it into the PEER's flag, then wait (acquire,
// bounded by timeout_ns per wait) until MY flag >= it; barrier; all threads check MY slot
// it%2 == pattern(it).
//
// Why parity double buffering is race-free: a rank can never be two iterations ahead of its
// peer. To start writing iteration it+2 into my slot s = it%2, the peer must have finished
// its iteration it+1 wait, i.e. seen my flag >= it+1. I store it+1 only after my own
// iteration-it check of slot s has completed (my loads come before the barrier and the
// release of iteration it+1). So the peer's it+2 stores to slot s happen after my
// it-check, and its it+1 stores go to the other slot. A flag already at it+1 while I wait
// for it is fine (>= test): slot s still holds iteration it's data. Only the peer writes
// my slots; I only read them.
// Graph capture: safe only if flags are re-zeroed before each replay (epochs start at 1).
extern "C" __global__ void rcclx_selftest_pingpong(uint32_t* my_buf, uint32_t* peer_buf,
                                                   uint32_t iters, uint32_t n,
                                                   uint64_t timeout_ns, uint32_t* result) {
  __shared__ uint32_t s_abort;  // set by thread 0 on timeout, read by all after a barrier
  const uint32_t tid = threadIdx.x;
  const uint32_t nthreads = blockDim.x;
  if (tid == 0) s_abort = 0;
  __syncthreads();

  uint32_t bad = 0;
  for (uint32_t it = 1; it <= iters; ++it) {
    const uint64_t slot = RCCLX_SELFTEST_DATA_OFFSET + (uint64_t)(it & 1u) * n;
    const uint32_t base = it * RCCLX_SELFTEST_PATTERN;

    uint32_t* peer_data = peer_buf + slot;
    for (uint32_t i = tid; i < n; i += nthreads) peer_data[i] = base + i;
    // The library's publication protocol (rcclx_barrier): every wave's remote stores complete,
    // then thread 0's release covers the block's.
    rcclx_block_publish();
    __syncthreads();

    if (tid == 0) {
      rcclx_st_release_sys(&peer_buf[0], it);
      if (!rcclx_wait_geq_u32(&my_buf[0], it, rcclx_deadline_after(timeout_ns))) {
        rcclx_st_release_sys(&result[1], 1u);
        s_abort = 1;
      }
    }
    __syncthreads();  // thread 0's acquire (or abort) precedes everyone's reads below
    if (s_abort) break;  // uniform: every thread read the same value after the barrier

    const uint32_t* my_data = my_buf + slot;
    for (uint32_t i = tid; i < n; i += nthreads) bad += (my_data[i] != base + i);
  }
  if (bad != 0) rcclx_atomic_add_sys_u32(&result[0], bad);
}

// One thread waits until *flag >= target (epoch compare), bounded by timeout_ns; on timeout
// it writes 1 to *error_out (host-mapped pinned memory) with a system-scope release store.
// *error_out is left untouched on success. Launch with any grid; only thread 0 of block 0 works.
extern "C" __global__ void rcclx_selftest_wait_timeout(const uint32_t* flag, uint32_t target,
                                                       uint64_t timeout_ns,
                                                       uint32_t* error_out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  if (!rcclx_wait_geq_u32(flag, target, rcclx_deadline_after(timeout_ns)))
    rcclx_st_release_sys(error_out, 1u);
}

#endif  // RCCLX_SELFTEST_CUH
