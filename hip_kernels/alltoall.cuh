// DDA AllToAll (host side: src/dda/alltoall.rs): data movement only, so one instance per
// algorithm serves every element type: T = uint8_t and `count` is the bytes per (rank, peer)
// block; input block p goes to rank p, output block p comes from rank p.
//   ll:   every rank pushes input block c as flagged words into slot [rank] of rank c's LL
//         inbox (remote stores, no barrier) and copies what arrives into its output.
//   flat: copy-in of every block to the own staging -> barrier -> every rank reads its block
//         from every peer's staging (one-shot pull), in windows of `window_elems` bytes per
//         block.
// Peers are visited starting after this rank ((rank + i) % n) to spread the links. The block a
// rank keeps is copied locally (skipped in place: NCCL's in-place AllToAll passes
// sendbuff == recvbuff).
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#ifndef RCCLX_ALLTOALL_CUH
#define RCCLX_ALLTOALL_CUH

#include "common.cuh"

// LL AllToAll: unit u of input block c goes to slot [rank] of rank c's inbox.
template <typename T>
RCCLX_DEV void rcclx_alltoall_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const unsigned char* send = (const unsigned char*)a.send;
  unsigned char* recv = (unsigned char*)a.recv;
  RCCLX_FOR_VEC(u, (a.count + 7) / 8) {
    uint32_t lo, hi;
    // In place, this thread reads unit u of every input block before it writes unit u of any
    // output block, and no other thread touches unit u.
    for (int i = 1; i < a.nranks; ++i) {
      const int c = (a.rank + i) % a.nranks;
      rcclx_ll_load8(send + c * a.count, u, a.count, &lo, &hi);
      rcclx_ll_push(a, c, parity_off, u, flag, lo, hi);
    }
    if (send != recv) {
      rcclx_ll_load8(send + a.rank * a.count, u, a.count, &lo, &hi);
      rcclx_ll_store8(recv + a.rank * a.count, u, a.count, lo, hi);
    }
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_ll_pull(a, p, parity_off, u, flag, deadline, &s_fail, &lo, &hi);
      rcclx_ll_store8(recv + p * a.count, u, a.count, lo, hi);
    }
  }
  rcclx_seq_store(a, seq + 1);
}

// Flat AllToAll: a window holds block c's window at c * window_elems of the staging half.
template <typename T>
RCCLX_DEV void rcclx_alltoall_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;
  rcclx_windows(
      a,
      RCCLX_PHASE {
        T* mine = (T*)(a.staging[a.rank] + w.half);
        for (int c = 0; c < a.nranks; ++c)
          if (c != a.rank) rcclx_copy<T>(mine + c * W, send + c * a.count + w.base, w.n);
        if (send != recv) rcclx_copy<T>(recv + a.rank * a.count + w.base, send + a.rank * a.count + w.base, w.n);
      },
      RCCLX_PHASE {
        for (int i = 1; i < a.nranks; ++i) {
          const int p = (a.rank + i) % a.nranks;
          rcclx_copy<T>(recv + p * a.count + w.base, (const T*)(a.staging[p] + w.half) + a.rank * W, w.n);
        }
      });
}

#endif  // RCCLX_ALLTOALL_CUH
