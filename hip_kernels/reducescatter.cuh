// DDA ReduceScatter (host side: src/dda/reducescatter.rs). count = elements per rank's output;
// input block c (at c * stride; stride = count unless RcclxArgs::stride says otherwise: a
// window of one host's blocks across hosts, src/plan.rs) is reduced over the ranks into rank
// c's output.
//   ll:   every rank pushes input block c as flagged words into rank c's LL inbox (remote
//         stores, no barrier) and reduces its own block from what arrives; small messages.
//   flat: copy-in of every block to the own staging (block c's window at c * window_elems)
//         -> barrier -> every rank reduces its block from every rank's staging.
// Accumulation: RcclxRed, ranks 0, 1, ..., n-1 (common.cuh): with 2 ranks bit-identical to the
// stock library, with more a fixed order. In place (NCCL: recvbuff == sendbuff + rank * count *
// size), the own input block is read (copied or loaded) before the output is written.
// Reuse, tails and graph capture: as common.cuh and allreduce.cuh.
#ifndef RCCLX_REDUCESCATTER_CUH
#define RCCLX_REDUCESCATTER_CUH

#include "common.cuh"

template <typename T, int OP>
RCCLX_DEV void rcclx_reducescatter_ll(const RcclxArgs& a) {
  RCCLX_LL_PROLOGUE
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t stride = (a.stride ? a.stride : a.count) * sizeof(T);
  const uint64_t parity_off = rcclx_ll_parity(a, seq);
  const unsigned char* send = (const unsigned char*)a.send;
  RCCLX_FOR_VEC(u, (bytes + 7) / 8) {
    for (int i = 1; i < a.nranks; ++i) {
      const int c = (a.rank + i) % a.nranks;
      uint32_t lo, hi;
      rcclx_ll_load8(send + c * stride, u, bytes, &lo, &hi);
      rcclx_ll_push(a, c, parity_off, u, flag, lo, hi);
    }
    uint32_t lo, hi;
    rcclx_ll_load8(send + a.rank * stride, u, bytes, &lo, &hi);
    rcclx_ll_reduce_unit<T, OP>(a, parity_off, u, flag, deadline, &s_fail, lo, hi, &lo, &hi);
    rcclx_ll_store8((unsigned char*)a.recv, u, bytes, lo, hi);
  }
  rcclx_seq_store(a, seq + 1);
}

template <typename T, int OP>
RCCLX_DEV void rcclx_reducescatter_flat(const RcclxArgs& a) {
  const T* send = (const T*)a.send;
  T* recv = (T*)a.recv;
  const uint64_t W = a.window_elems, stride = a.stride ? a.stride : a.count;
  rcclx_windows(
      a,
      RCCLX_PHASE {
        T* mine = (T*)(a.staging[a.rank] + w.half);
        for (int c = 0; c < a.nranks; ++c) rcclx_copy<T>(mine + c * W, send + c * stride + w.base, w.n);
      },
      RCCLX_PHASE { rcclx_reduce<T, OP>(a, w.half + a.rank * W * sizeof(T), w.n, recv + w.base, (T*)nullptr); });
}

#endif  // RCCLX_REDUCESCATTER_CUH
