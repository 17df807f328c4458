// bench.cu - the kernels of the one-GPU timing proxy (`ranks --suite bench`,
// gpu-tests/src/bin/ranks/bench.rs). Compiled by gpu-tests/build.rs into the test programs
// only, never into librcclx.so.
//
//   rcclx_twin_*         traffic twins: the library's own DDA kernels compiled with
//                        RCCLX_TRAFFIC_TWIN (common.cuh), i.e. the same grid, loads and stores
//                        to the same addresses, but no barrier and no LL flag wait. The host
//                        launches them with the real kernel's planned grid and arguments.
//   rcclx_bench_flag_pingpong  flag round trip between two one-block kernels
//   rcclx_bench_fence    fence under load: what a system-scope release costs while other warps
//                        stream stores or loads
#define RCCLX_TRAFFIC_TWIN 1
#include "rcclx_port.h"
#include "common.cuh"
#include "allreduce.cuh"
#include "allgather.cuh"
#include "alltoall.cuh"
#include "reducescatter.cuh"
#include "broadcast.cuh"
#include "stream.cuh"
#include "ll128.cuh"

// The twins of the DDA families the bench times: f32 sum for the reducing collectives, bytes
// for data movement (the suite's calls use those). A new family adds its line here and its
// name in bench.rs (TWINS).
RCCLX_KERNEL(rcclx_twin_allreduce_ll_f32_sum, RcclxArgs, 1, rcclx_allreduce_ll, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allreduce_flat_f32_sum, RcclxArgs, 1, rcclx_allreduce_flat, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allreduce_tree_f32_sum, RcclxArgs, 1, rcclx_allreduce_tree, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_reducescatter_ll_f32_sum, RcclxArgs, 1, rcclx_reducescatter_ll, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_reducescatter_flat_f32_sum, RcclxArgs, 1, rcclx_reducescatter_flat, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allgather_ll_bytes, RcclxArgs, 1, rcclx_allgather_ll, uint8_t)
RCCLX_KERNEL(rcclx_twin_allgather_flat_bytes, RcclxArgs, 1, rcclx_allgather_flat, uint8_t)
RCCLX_KERNEL(rcclx_twin_alltoall_ll_bytes, RcclxArgs, 1, rcclx_alltoall_ll, uint8_t)
RCCLX_KERNEL(rcclx_twin_alltoall_flat_bytes, RcclxArgs, 1, rcclx_alltoall_flat, uint8_t)
RCCLX_KERNEL(rcclx_twin_broadcast_ll_bytes, RcclxArgs, 1, rcclx_broadcast_ll, uint8_t)
RCCLX_KERNEL(rcclx_twin_broadcast_flat_bytes, RcclxArgs, 1, rcclx_broadcast_flat, uint8_t)
RCCLX_KERNEL(rcclx_twin_allreduce_stream_f32_sum, RcclxArgs, 1, rcclx_allreduce_stream, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allreduce_stream_tree_f32_sum, RcclxArgs, 1, rcclx_allreduce_stream_tree, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_reducescatter_stream_f32_sum, RcclxArgs, 1, rcclx_reducescatter_stream, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allgather_stream_bytes, RcclxArgs, 1, rcclx_allgather_stream, uint8_t)
RCCLX_KERNEL(rcclx_twin_alltoall_stream_bytes, RcclxArgs, 1, rcclx_alltoall_stream, uint8_t)
RCCLX_KERNEL(rcclx_twin_allreduce_ll128_f32_sum, RcclxArgs, 1, rcclx_allreduce_ll128, float, RCCLX_SUM)
RCCLX_KERNEL(rcclx_twin_allgather_ll128_bytes, RcclxArgs, 1, rcclx_allgather_ll128, uint8_t)

// Spins (as the library's barrier: no pause on NVIDIA) until *flag reaches `value`; false once
// `deadline` passed.
RCCLX_DEV bool rcclx_bench_wait(const uint32_t* flag, uint32_t value, uint64_t deadline) {
  for (uint32_t round = 1;; ++round) {
    if (rcclx_epoch_geq(rcclx_poll_sys(flag), value)) {
      rcclx_acquire_sys();
      return true;
    }
    rcclx_poll_pause();
    if ((round & 1023) == 0 && rcclx_now_ns() >= deadline) return false;
  }
}

// Flag round trip. Two one-block kernels run at once (two streams); thread 0 of each works.
// The starter stores i into *peer (release, sys) and waits for *mine >= i (acquire, sys); the
// other waits for i, then answers i. Flags zero before the launch. After `warmup` rounds (the
// other kernel may start late) the starter times `iters` rounds with the global timer:
// result[0] = nanoseconds of the timed rounds, result[1] = 1 if a wait passed `timeout_ns`.
extern "C" __global__ void rcclx_bench_flag_pingpong(uint32_t* mine, uint32_t* peer, uint32_t warmup, uint32_t iters,
                                                     uint32_t starter, uint64_t timeout_ns, uint64_t* result) {
  if (threadIdx.x != 0) return;
  const uint64_t deadline = rcclx_deadline_after(timeout_ns);
  uint64_t t0 = rcclx_now_ns();
  for (uint32_t i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) t0 = rcclx_now_ns();
    if (starter) rcclx_st_release_sys(peer, i);
    if (!rcclx_bench_wait(mine, i, deadline)) {
      result[1] = 1;
      return;
    }
    if (!starter) rcclx_st_release_sys(peer, i);
  }
  if (starter) result[0] = rcclx_now_ns() - t0;
}

enum : uint32_t { RCCLX_BENCH_NONE = 0, RCCLX_BENCH_STORE = 1, RCCLX_BENCH_LOAD = 2 };
enum : uint32_t { RCCLX_BENCH_FENCE_OFF = 0, RCCLX_BENCH_FENCE_SAME = 1, RCCLX_BENCH_FENCE_APART = 2 };

// Fence under load. Blocks [0, stream_blocks) stream: their warps 1.. store (or load) 16-byte
// vectors over the block's `vecs` vectors of `data`, `reps` times. Thread 0 of every block
// coordinates: in a streaming block it waits for its warps (each announces its time in shared
// memory) and then counts the block in `done` (one zeroed word); it is also the fencer, in every
// streaming block (`where` SAME) or only in the blocks past stream_blocks (APART), repeating a
// system-scope release store into its block's line of `flags` until the streamers are done, at
// least `min_fences` times. Per block, out[3b..3b+3): the fencer's nanoseconds, its release
// count, the streamers' nanoseconds. `timeout_ns` bounds every wait.
extern "C" __global__ void __launch_bounds__(RCCLX_THREADS, 1)
    rcclx_bench_fence(rcclx_u32x4* data, uint64_t vecs, uint32_t reps, uint32_t op, uint32_t where,
                      uint32_t stream_blocks, uint32_t min_fences, uint64_t timeout_ns, uint32_t* flags,
                      uint32_t* done, uint64_t* out) {
  // Per streaming warp: its nanoseconds + 1 once it is done (0 before).
  __shared__ uint64_t s_ns[RCCLX_THREADS / 32];
  const uint32_t warp = threadIdx.x / RCCLX_WARP_SIZE;
  const uint32_t warps = blockDim.x / RCCLX_WARP_SIZE;
  const bool streaming = blockIdx.x < stream_blocks && op != RCCLX_BENCH_NONE;
  if (threadIdx.x < warps) s_ns[threadIdx.x] = 0;
  __syncthreads();
  if (warp > 0) {
    if (!streaming) return;
    const uint64_t t0 = rcclx_now_ns();
    rcclx_u32x4* mine = data + (uint64_t)blockIdx.x * vecs;
    const uint32_t lane = threadIdx.x - RCCLX_WARP_SIZE, lanes = blockDim.x - RCCLX_WARP_SIZE;
    uint32_t acc = 0;
    for (uint32_t r = 0; r < reps; ++r) {
      for (uint64_t j = lane; j < vecs; j += lanes) {
        if (op == RCCLX_BENCH_STORE) {
          rcclx_st16(mine + j, rcclx_u32x4{r, (uint32_t)j, r ^ (uint32_t)j, 7u});
        } else {
          const rcclx_u32x4 v = rcclx_ld16(mine + j);
          acc = acc * 31u + (v.x ^ v.w);
        }
      }
    }
    // Keeps the loads: no input makes acc this value by chance often enough to matter.
    if (acc == 0x9E3779B9u) out[3 * blockIdx.x + 2] = 1;
    if (threadIdx.x % RCCLX_WARP_SIZE == 0) *(volatile uint64_t*)&s_ns[warp] = rcclx_now_ns() - t0 + 1;
    return;
  }
  if (threadIdx.x != 0) return;
  const bool fencer = (where == RCCLX_BENCH_FENCE_SAME && blockIdx.x < stream_blocks) ||
                      (where == RCCLX_BENCH_FENCE_APART && blockIdx.x >= stream_blocks);
  if (!streaming && !fencer) return;
  const uint32_t streamers = op == RCCLX_BENCH_NONE ? 0 : stream_blocks;
  uint32_t* line = flags + blockIdx.x * RCCLX_FLAG_STRIDE;
  const uint64_t deadline = rcclx_deadline_after(timeout_ns);
  const uint64_t t0 = rcclx_now_ns();
  uint64_t stream_ns = 0;
  uint32_t n = 0;
  for (uint32_t round = 0;; ++round) {
    // Looks at the streamers every 16 rounds (a poll of `done` is a load that would count as part
    // of each release's time).
    if ((round & 15) == 0 && (!fencer || n >= min_fences)) {
      bool over;
      if (streaming) {
        over = true;
        for (uint32_t w = 1; w < warps; ++w) {
          const uint64_t v = *(volatile uint64_t*)&s_ns[w];
          over = over && v != 0;
          stream_ns = v > stream_ns ? v : stream_ns;
        }
      } else {
        over = rcclx_ld_relaxed_sys(done) >= streamers;
      }
      if (over || rcclx_now_ns() >= deadline) break;
    }
    if (fencer) {
      rcclx_st_release_sys(line, n);
      ++n;
    } else {
      rcclx_backoff(round);
    }
  }
  if (streaming) {
    out[3 * blockIdx.x + 2] = stream_ns > 0 ? stream_ns - 1 : 0;  // 0: timed out
    rcclx_atomic_add_sys_u32(done, 1u);
  }
  if (fencer) {
    out[3 * blockIdx.x] = rcclx_now_ns() - t0;
    out[3 * blockIdx.x + 1] = n;
  }
}
