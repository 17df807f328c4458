// rail.cuh - the low-precision rail step of an AllReduce, a ReduceScatter or an AllGather across hosts
// (src/plan.rs): the codes of a window's pieces, one piece per host, which the stock library
// moves between hosts (an all-to-all, then, for an AllReduce, an AllGather on the rail). No peer memory, no barrier: each kernel reads and
// writes this rank's buffers only, ordered by the stream.
//
// A window is H pieces of `count` elements each (a multiple of 512). A piece's codes are one
// slot: its `count` code bytes, then its `count / 128` block words (codec.cuh), so a slot is
// `count * 33 / 32` bytes, slot c at c times that. RcclxArgs: rank = this rank's host, nranks =
// H, root = the stage:
//   0 encode: the window at `send` (H pieces) -> slots at `recv` (this host's piece too; it is
//     never sent);
//   1 reduce: slot c of the received region (`recv` + H slots) holds host c's codes of this
//     host's piece; decoded and summed in FP32 in host order, this host's own term taken from
//     `send` (this host's piece of the window), never coded -> this host's slot at `recv`;
//   2 decode: the H slots at `send` (every host's summed piece) -> the window at `recv`;
//   3 reduce-out (ReduceScatter): as reduce, this host's own term at `send` itself (one piece),
//     the sum in T -> `aux` (which may be `send`: each element is read before it is written).
// An encode of one piece is stage 0 with H = 1 (`recv`: that piece's slot), a decode of one
// piece stage 2 with H = 1 (an AllGather: each host's piece to its own place in the output).
#ifndef RCCLX_RAIL_CUH
#define RCCLX_RAIL_CUH

#include "codec.cuh"
#include "common.cuh"
#include "lowp.cuh"

RCCLX_DEV uint64_t rcclx_rail_slot_bytes(uint64_t n) { return n / RCCLX_QBLOCK * (RCCLX_QBLOCK + 4); }
RCCLX_DEV RcclxQSlot rcclx_rail_slot(char* base, uint64_t n, int c) {
  RcclxQSlot s;
  s.codes = (uint8_t*)base + (uint64_t)c * rcclx_rail_slot_bytes(n);
  s.metas = (uint32_t*)(s.codes + n);
  return s;
}

// Calls body(k) for this warp's group of 4 blocks (k = this lane group's block) of every
// group of [0, nb): the trip count is uniform per warp, as the codecs' shuffles need, and
// block words go out 4 at a time (rcclx_put16). nb is a multiple of 4.
template <typename F>
RCCLX_DEV void rcclx_rail_blocks(uint64_t nb, F&& body) {
  const uint64_t warps = (uint64_t)gridDim.x * (RCCLX_THREADS / 32);
  const uint64_t lane_group = (threadIdx.x & 31) / RCCLX_QLANES;
  for (uint64_t w = (uint64_t)blockIdx.x * (RCCLX_THREADS / 32) + threadIdx.x / 32; w * 4 < nb; w += warps)
    body(w * 4 + lane_group);
}

template <typename T, typename C>
RCCLX_DEV void rcclx_rail_step(const RcclxArgs& a) {
  const uint64_t n = a.count, nb = n / RCCLX_QBLOCK;
  const int hosts = a.nranks, me = a.rank;
  if (a.root == 0) {
    const T* src = (const T*)a.send;
    for (int c = 0; c < hosts; ++c) {
      const RcclxQSlot s = rcclx_rail_slot((char*)a.recv, n, c);
      rcclx_rail_blocks(nb, [&](uint64_t k) {
        float v[16];
        rcclx_load16<T>(src + (uint64_t)c * n, k * RCCLX_QBLOCK, n, v);
        rcclx_put16(s, k, C::quantize16(v), true);
      });
    }
  } else if (a.root == 1 || a.root == 3) {
    const bool out_coded = a.root == 1;
    const T* own = (const T*)a.send + (out_coded ? (uint64_t)me * n : 0);
    char* received = (char*)a.recv + (uint64_t)hosts * rcclx_rail_slot_bytes(n);
    const RcclxQSlot out = rcclx_rail_slot((char*)a.recv, n, me);
    rcclx_rail_blocks(nb, [&](uint64_t k) {
      float v[16], t[16];
      for (int c = 0; c < hosts; ++c) {
        if (c == me) {
          rcclx_load16<T>(own, k * RCCLX_QBLOCK, n, t);
        } else {
          C::template decode16<false>(rcclx_get16(rcclx_rail_slot(received, n, c), k), t);
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = c == 0 ? t[i] : v[i] + t[i];
      }
      if (out_coded) {
        rcclx_put16(out, k, C::quantize16(v), true);
      } else {
        rcclx_store16<T>((T*)a.aux, k * RCCLX_QBLOCK, n, v);
      }
    });
  } else {
    T* dst = (T*)a.recv;
    for (int c = 0; c < hosts; ++c) {
      const RcclxQSlot s = rcclx_rail_slot((char*)a.send, n, c);
      rcclx_rail_blocks(nb, [&](uint64_t k) {
        float v[16];
        C::template decode16<false>(rcclx_get16(s, k), v);
        rcclx_store16<T>(dst + (uint64_t)c * n, k * RCCLX_QBLOCK, n, v);
      });
    }
  }
}

// The kernel table's device functions, one per collective and codec (the same steps: a
// family per collective keeps their statistics apart).
template <typename T> RCCLX_DEV void rcclx_allreduce_hier_lowp(const RcclxArgs& a) { rcclx_rail_step<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_allreduce_hier_int8(const RcclxArgs& a) { rcclx_rail_step<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_reducescatter_hier_lowp(const RcclxArgs& a) { rcclx_rail_step<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_reducescatter_hier_int8(const RcclxArgs& a) { rcclx_rail_step<T, RcclxInt8>(a); }
template <typename T> RCCLX_DEV void rcclx_allgather_hier_lowp(const RcclxArgs& a) { rcclx_rail_step<T, RcclxFp8>(a); }
template <typename T> RCCLX_DEV void rcclx_allgather_hier_int8(const RcclxArgs& a) { rcclx_rail_step<T, RcclxInt8>(a); }

#endif  // RCCLX_RAIL_CUH
