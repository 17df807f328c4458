// DDA (Direct Data Access) AllReduce: every rank reads its peers' staging buffers directly
// over NVLink / xGMI. Three kernels (host side: src/dda/):
//   ll   (one-shot, no barrier): every rank pushes its input as flagged words into every peer's
//        LL inbox and reduces what arrives; the smallest messages.
//   flat (one-shot): copy-in -> barrier -> every rank reads all ranks' copies and reduces.
//   tree (two-shot): copy-in -> barrier -> rank r reduces chunk r (reduce-scatter, in place in
//        its own staging) -> barrier -> every rank reads every reduced chunk.
//
// Accumulation: RcclxRed (common.cuh), ranks 0, 1, ..., n-1; identical on every rank, so every
// rank's output is bit-identical. Tails: whole 16-byte vectors are sliced over threads; the last
// count % vector elements are handled one by one by block 0. Unaligned user buffers take an
// element-wise path. Graph capture: nothing per call is baked into the arguments beyond
// buffers and counts (common.cuh).
#ifndef RCCLX_ALLREDUCE_CUH
#define RCCLX_ALLREDUCE_CUH

#include "common.cuh"

template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  rcclx_windows(
      a,
      // Staging holds the window at offset 0: shift the user pointers instead.
      RCCLX_PHASE { rcclx_copy<T>((T*)(a.staging[a.rank] + w.half), send + w.base, w.n); },
      RCCLX_PHASE { rcclx_reduce<T, OP>(a, w.half, w.n, recv + w.base, (T*)nullptr); });
}

// Chunk c of a tree window of n elements = elements [c*C, min((c+1)*C, n)), where C is the
// first window's share per rank rounded up to whole vectors: the same in every window of the
// call (also the short last one), so a position belongs to the same block in every window,
// which the reuse argument of common.cuh needs.
template <typename T>
RCCLX_DEV uint64_t rcclx_tree_chunk(const RcclxArgs& a) {
  constexpr int N = RcclxVec<T>::N;
  const uint64_t first_window = a.count < a.window_elems ? a.count : a.window_elems;
  return ((first_window + a.nranks - 1) / a.nranks + N - 1) / N * N;
}
RCCLX_DEV uint64_t rcclx_tree_chunk_len(uint64_t C, int c, uint64_t n) {
  return c * C < n ? (n - c * C < C ? n - c * C : C) : 0;
}

template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_tree(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  rcclx_windows(
      a,
      // Copy-in, sliced per chunk so that block b handles the same positions of every chunk.
      RCCLX_PHASE {
        const uint64_t C = rcclx_tree_chunk<T>(a);
        T* mine = (T*)(a.staging[a.rank] + w.half);
        for (int c = 0; c < a.nranks; ++c) rcclx_copy<T>(mine + c * C, send + w.base + c * C, rcclx_tree_chunk_len(C, c, w.n));
      },
      // Reduce-scatter: this rank's chunk, kept in place in its staging for the peers.
      RCCLX_PHASE {
        const uint64_t C = rcclx_tree_chunk<T>(a);
        T* mine = (T*)(a.staging[a.rank] + w.half);
        rcclx_reduce<T, OP>(a, w.half + a.rank * C * sizeof(T), rcclx_tree_chunk_len(C, a.rank, w.n),
                            recv + w.base + a.rank * C, mine + a.rank * C);
      },
      // All-gather: every other chunk from its owner, starting after this rank (spreads links).
      RCCLX_PHASE {
        const uint64_t C = rcclx_tree_chunk<T>(a);
        for (int i = 1; i < a.nranks; ++i) {
          const int c = (a.rank + i) % a.nranks;
          rcclx_copy<T>(recv + w.base + c * C, (const T*)(a.staging[c] + w.half) + c * C, rcclx_tree_chunk_len(C, c, w.n));
        }
      });
}

// LL one-shot (small messages): no barrier and no fence. Each 8-byte word carries 4 payload
// bytes and a 4-byte flag, written with one single-copy-atomic store, so a reader that sees
// the flag sees the payload. Every rank pushes its input, 8 payload bytes per 16-byte unit,
// straight into every peer's inbox (remote stores), then polls its own inbox for the peers'
// units of this call and reduces them with its own input in rank order.
// Flag value: this block's call counter + 1 (distinct from the value of the slot's previous
// use, two calls earlier). Inbox halves alternate by call parity: a peer can be at most one
// call ahead, because finishing a call needs every rank's data of that call.
// Unit u of the message belongs to block (u / blockDim) % gridDim on every rank, so writer
// and reader of a unit share a block index and hence a call counter.
template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  RCCLX_FOR_VEC(u, (bytes + 7) / 8) {
    uint32_t lo, hi;
    rcclx_ll_load8((const unsigned char*)a.send, u, bytes, &lo, &hi);
    for (int i = 1; i < a.nranks; ++i) rcclx_ll_push(a, (a.rank + i) % a.nranks, parity_off, u, flag, lo, hi);
    rcclx_ll_reduce_unit<T, OP>(a, parity_off, u, flag, deadline, &s_fail, lo, hi, &lo, &hi);
    rcclx_ll_store8((unsigned char*)a.recv, u, bytes, lo, hi);
  }
  rcclx_seq_store(a, seq + 1);
}

#endif  // RCCLX_ALLREDUCE_CUH
