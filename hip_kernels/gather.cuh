// DDA AllGather and AllToAll: data movement only, so one instance per algorithm serves every
// element type: T = uint8_t and `count` is in bytes (host side: src/dda/allgather.rs,
// src/dda/alltoall.rs).
//   AllGather: count = bytes per rank; output block p (at p * count) is rank p's input.
//   AllToAll:  count = bytes per (rank, peer) block; input block p goes to rank p, output
//              block p comes from rank p.
// Two algorithms each:
//   ll:   every rank pushes its data as flagged words into the peers' LL inboxes (remote
//         stores, no barrier) and copies what arrives into its output; small messages.
//   flat: copy-in to the own staging buffer -> barrier -> every rank reads its blocks from
//         every peer's staging (one-shot pull), in windows of `window_elems` bytes per block.
// Peers are visited starting after this rank ((rank + i) % n) to spread the links. The block a
// rank keeps is copied locally (skipped in place: NCCL's in-place AllGather passes
// sendbuff == recvbuff + rank * count; in-place AllToAll, sendbuff == recvbuff).
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#pragma once

// LL AllGather: unit u of this rank's bytes goes to slot [rank] of every peer's inbox.
template <typename T>
RCCLX_DEV void rcclx_allgather_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const unsigned char* send = (const unsigned char*)a.send;
  unsigned char* recv = (unsigned char*)a.recv;
  unsigned char* own = recv + a.rank * a.count;
  RCCLX_FOR_VEC(u, (a.count + 7) / 8) {
    uint32_t lo, hi;
    rcclx_ll_load8(send, u, a.count, &lo, &hi);
    for (int i = 1; i < a.nranks; ++i) rcclx_ll_push(a, (a.rank + i) % a.nranks, parity_off, u, flag, lo, hi);
    if (own != send) rcclx_ll_store8(own, u, a.count, lo, hi);
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_ll_pull(a, p, parity_off, u, flag, deadline, &s_fail, &lo, &hi);
      rcclx_ll_store8(recv + p * a.count, u, a.count, lo, hi);
    }
  }
  rcclx_seq_store(a, seq + 1);
}

template <typename T>
RCCLX_DEV void rcclx_allgather_flat(const RcclxArgs& a) {
  __shared__ uint32_t s_seq;
  __shared__ int s_fail;
  uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);
  const uint64_t deadline = rcclx_call_deadline(a);
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  T* own = recv + a.rank * a.count;
  for (uint64_t base = 0; base < a.count; base += a.window_elems, ++seq) {
    const uint64_t n = a.count - base < a.window_elems ? a.count - base : a.window_elems;
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    rcclx_copy<T>((T*)(a.staging[a.rank] + half_off), send + base, n);
    if (own != send) rcclx_copy<T>(own + base, send + base, n);
    if (!rcclx_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_copy<T>(recv + p * a.count + base, (const T*)(a.staging[p] + half_off), n);
    }
  }
  rcclx_seq_store(a, seq);
}

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
  __shared__ uint32_t s_seq;
  __shared__ int s_fail;
  uint32_t seq = rcclx_seq_load(a, &s_seq, &s_fail);
  const uint64_t deadline = rcclx_call_deadline(a);
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems;
  for (uint64_t base = 0; base < a.count; base += W, ++seq) {
    const uint64_t n = a.count - base < W ? a.count - base : W;
    const uint64_t half_off = (uint64_t)(seq & 1) * a.half_bytes;
    T* mine = (T*)(a.staging[a.rank] + half_off);
    for (int c = 0; c < a.nranks; ++c)
      if (c != a.rank) rcclx_copy<T>(mine + c * W, send + c * a.count + base, n);
    if (send != recv) rcclx_copy<T>(recv + a.rank * a.count + base, send + a.rank * a.count + base, n);
    if (!rcclx_barrier(a, seq * 4 + 1, deadline, &s_fail)) { ++seq; break; }
    for (int i = 1; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_copy<T>(recv + p * a.count + base, (const T*)(a.staging[p] + half_off) + a.rank * W, n);
    }
  }
  rcclx_seq_store(a, seq);
}
