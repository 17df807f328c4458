// DDA Reduce: every rank's input reduced into the root's output, as ncclReduce(sendbuff,
// recvbuff, count, datatype, op, root, comm, stream). `recv` is written only on the root
// (elsewhere it may be NULL and is never touched); in place (send == recv on the root) each
// element is read before it is written. Accumulation as AllReduce's (RcclxRed, ranks 0, 1, ...,
// n-1, the same helpers), so the root's output is bit-identical to a DDA AllReduce of the inputs.
// Host side (src/dda/): AllReduce's grid and windows (allreduce::grid): LL takes at most
// ll_units * 8 bytes; flat windows are `window_elems` elements, at most half_bytes.
// `root` is in [0, nranks) and the same on every rank.
//   ll:   every non-root pushes its input as flagged words into slot [rank] of the root's LL
//         inbox (remote stores, no barrier); the root reduces what arrives with its own input.
//   flat: per window: every rank copies its window into its own staging half -> barrier -> the
//         root reduces every rank's staging into its output (AllReduce flat's lines, on the
//         root only).
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#ifndef RCCLX_REDUCE_CUH
#define RCCLX_REDUCE_CUH

#include "common.cuh"

// LL Reduce. The root hears from every peer by its data; a non-root hears from nobody by
// data, so (the LL inboxes' reuse rule of common.cuh, as in LL Broadcast) every rank stores a
// token (unit 0 of slot [rank], no payload) into the inbox of every peer that gets no data
// from it: the root into every non-root's, every non-root into every other non-root's. Block 0
// of every non-root waits, after its push, for the token of every other rank; the root's data
// unit 0 from each peer stands for that peer's token. Slot [sender] of a non-root's inbox
// carries nothing else in a Reduce, and a token goes to the same half as the data would.
template <typename T, int OP>
RCCLX_DEV void rcclx_reduce_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const int root = a.root;
  // Block 0's thread i in [1, nranks) handles the tokens of peer (rank + i) % nranks.
  const bool token_thread = blockIdx.x == 0 && threadIdx.x >= 1 && (int)threadIdx.x < a.nranks;
  const int peer = (a.rank + (int)threadIdx.x) % a.nranks;
  if (token_thread && peer != root) rcclx_ll_push(a, peer, parity_off, 0, flag, 0, 0);
  RCCLX_FOR_VEC(u, (bytes + 7) / 8) {
    uint32_t lo, hi;
    rcclx_ll_load8((const unsigned char*)a.send, u, bytes, &lo, &hi);
    if (a.rank != root) {
      rcclx_ll_push(a, root, parity_off, u, flag, lo, hi);
    } else {
      rcclx_ll_reduce_unit<T, OP>(a, parity_off, u, flag, deadline, &s_fail, lo, hi, &lo, &hi);
      rcclx_ll_store8((unsigned char*)a.recv, u, bytes, lo, hi);
    }
  }
  if (token_thread && a.rank != root) {
    uint32_t lo, hi;
    rcclx_ll_pull(a, peer, parity_off, 0, flag, deadline, &s_fail, &lo, &hi);
  }
  rcclx_seq_store(a, seq + 1);
}

// Flat Reduce: AllReduce flat's copy-in on every rank, its reduction on the root. A non-root
// may return while the root still reads its staging of the last window: the root reads only
// staging (never a peer's user buffer), and that half is written again only after a later
// barrier or LL exchange with the root (common.cuh's reuse argument), which the root reaches
// after its reads.
template <typename T, int OP>
RCCLX_DEV void rcclx_reduce_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const int root = a.root;
  rcclx_windows(
      a,
      RCCLX_PHASE { rcclx_copy<T>((T*)(a.staging[a.rank] + w.half), send + w.base, w.n); },
      RCCLX_PHASE {
        if (a.rank == root) rcclx_reduce<T, OP>(a, w.half, w.n, recv + w.base, (T*)nullptr);
      });
}

#endif  // RCCLX_REDUCE_CUH
