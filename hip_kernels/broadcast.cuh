// DDA Broadcast: rank `root`'s input ends up in every rank's output, as ncclBroadcast(sendbuff,
// recvbuff, count, datatype, root, comm, stream). Data movement only, so one instance per
// algorithm serves every element type: T = uint8_t and `count` is the bytes. `send` is read
// only on the root (elsewhere it may be NULL); in place (send == recv on the root) the root
// copies nothing locally.
// Host side (src/dda/): the grid and window of AllGather's (allgather::grid with the bytes):
// LL takes at most ll_units * 8 bytes; flat windows are `window_elems` bytes, at most
// half_bytes and a multiple of 16. `root` is in [0, nranks) and the same on every rank.
//   ll:   the root pushes its bytes as flagged words into slot [root] of every peer's LL inbox
//         (remote stores, no barrier); every other rank copies what arrives into its output.
//   flat: per window of `window_elems` bytes: the root copies the window into its own staging
//         half -> barrier -> every other rank copies it from the root's staging (one-shot
//         pull) while the root copies it into its own output (out of place).
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#ifndef RCCLX_BROADCAST_CUH
#define RCCLX_BROADCAST_CUH

#include "common.cuh"

// LL Broadcast. An inbox half is reused every other call, which is safe because no rank is
// more than one call ahead of another: in every other kernel a rank finishes a call only after
// hearing from every peer in it. The data alone does not give that here (the root hears from
// nobody, a non-root only from the root: two LL Broadcasts in a row could let the root
// overwrite a half that a slower peer still reads), so every non-root also stores a token
// (unit 0 of slot [rank], no payload) into every peer's inbox, and block 0 of every rank waits,
// after its share of the data, for the token of every other non-root (the root's data unit 0
// says the same). The counter then advances by one, as in every LL kernel.
template <typename T>
RCCLX_DEV void rcclx_broadcast_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const int root = a.root;
  const unsigned char* send = (const unsigned char*)a.send;
  unsigned char* recv = (unsigned char*)a.recv;
  // Block 0's thread i in [1, nranks) handles the tokens of peer (rank + i) % nranks.
  const bool token_thread = blockIdx.x == 0 && threadIdx.x >= 1 && (int)threadIdx.x < a.nranks;
  const int peer = (a.rank + (int)threadIdx.x) % a.nranks;
  if (token_thread && a.rank != root) rcclx_ll_push(a, peer, parity_off, 0, flag, 0, 0);
  RCCLX_FOR_VEC(u, (a.count + 7) / 8) {
    uint32_t lo, hi;
    if (a.rank == root) {
      rcclx_ll_load8(send, u, a.count, &lo, &hi);
      for (int i = 1; i < a.nranks; ++i) rcclx_ll_push(a, (a.rank + i) % a.nranks, parity_off, u, flag, lo, hi);
      if (recv != send) rcclx_ll_store8(recv, u, a.count, lo, hi);
    } else {
      rcclx_ll_pull(a, root, parity_off, u, flag, deadline, &s_fail, &lo, &hi);
      rcclx_ll_store8(recv, u, a.count, lo, hi);
    }
  }
  if (token_thread && peer != root) {
    uint32_t lo, hi;
    rcclx_ll_pull(a, peer, parity_off, 0, flag, deadline, &s_fail, &lo, &hi);
  }
  rcclx_seq_store(a, seq + 1);
}

// Flat Broadcast: the root's window at offset 0 of its staging half. The root's own copy (out
// of place) comes after the barrier, beside the peers' reads, not before it.
template <typename T>
RCCLX_DEV void rcclx_broadcast_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const int root = a.root;
  rcclx_windows(
      a,
      RCCLX_PHASE {
        if (a.rank == root) rcclx_copy<T>((T*)(a.staging[root] + w.half), send + w.base, w.n);
      },
      RCCLX_PHASE {
        if (a.rank != root) rcclx_copy<T>(recv + w.base, (const T*)(a.staging[root] + w.half), w.n);
        else if (recv != send) rcclx_copy<T>(recv + w.base, send + w.base, w.n);
      });
}

#endif  // RCCLX_BROADCAST_CUH
