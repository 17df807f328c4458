// DDA AllGather (host side: src/dda/allgather.rs): data movement only, so one instance per
// algorithm serves every element type: T = uint8_t and `count` is the bytes per rank; output
// block p (at p * stride; stride = count unless RcclxArgs::stride says otherwise: the blocks of
// one host of a communicator spanning hosts, src/plan.rs) is rank p's input.
//   ll:   every rank pushes its data as flagged words into slot [rank] of every peer's LL inbox
//         (remote stores, no barrier) and copies what arrives into its output; small messages.
//   flat: copy-in to the own staging buffer -> barrier -> every rank reads its blocks from
//         every peer's staging (one-shot pull), in windows of `window_elems` bytes.
// Peers are visited starting after this rank ((rank + i) % n) to spread the links. The block a
// rank keeps is copied locally (skipped in place: NCCL's in-place AllGather passes
// sendbuff == recvbuff + rank * count).
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#ifndef RCCLX_ALLGATHER_CUH
#define RCCLX_ALLGATHER_CUH

#include "common.cuh"

// LL AllGather: unit u of this rank's bytes goes to slot [rank] of every peer's inbox.
template <typename T>
RCCLX_DEV void rcclx_allgather_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const unsigned char* send = (const unsigned char*)a.send;
  unsigned char* recv = (unsigned char*)a.recv;
  const uint64_t stride = a.stride ? a.stride : a.count;
  unsigned char* own = recv + a.rank * stride;
  RCCLX_FOR_VEC(u, (a.count + 7) / 8) {
    uint32_t lo, hi;
    rcclx_ll_load8(send, u, a.count, &lo, &hi);
    for (int i = 1; i < a.nranks; ++i) rcclx_ll_push(a, (a.rank + i) % a.nranks, parity_off, u, flag, lo, hi);
    if (own != send) rcclx_ll_store8(own, u, a.count, lo, hi);
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_ll_pull(a, p, parity_off, u, flag, deadline, &s_fail, &lo, &hi);
      rcclx_ll_store8(recv + p * stride, u, a.count, lo, hi);
    }
  }
  rcclx_seq_store(a, seq + 1);
}

// Flat AllGather: a window is `window_elems` bytes of every rank's block, at offset 0 of the
// staging half.
template <typename T>
RCCLX_DEV void rcclx_allgather_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t stride = a.stride ? a.stride : a.count;
  T* own = recv + a.rank * stride;
  rcclx_windows(
      a,
      RCCLX_PHASE {
        rcclx_copy<T>((T*)(a.staging[a.rank] + w.half), send + w.base, w.n);
        if (own != send) rcclx_copy<T>(own + w.base, send + w.base, w.n);
      },
      RCCLX_PHASE {
        for (int i = 1; i < a.nranks; ++i) {
          const int p = (a.rank + i) % a.nranks;
          rcclx_copy<T>(recv + p * stride + w.base, (const T*)(a.staging[p] + w.half), w.n);
        }
      });
}

#endif  // RCCLX_ALLGATHER_CUH
