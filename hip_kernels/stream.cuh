// stream.cuh - the "stream" protocol: pipelined per-block rings through the staging buffers,
// no barrier per window and none at the end of a call (host side: src/dda/grid.rs `stream_grid`,
// selected by RCCLX_PROTO=stream; design: docs/ARCHITECTURE.md "The stream protocol").
//
// Grid: 2G blocks. Blocks [0, G) produce, blocks [G, 2G) consume; producer b and consumer G+b
// form pair b (producers first: the GPU starts low block indices first, and a call of at most
// SLOTS steps then completes even if a rank's consumers start only as its producers end). Pair
// b of every rank handles the same slice of every step: the geometry depends only on the count,
// the type, G and the slot size, identical on every rank.
//
// Ring: the call uses one parity half of every rank's staging buffer (seq & 1, like one window
// of rcclx_windows: the call advances the window counter by one, so calls of every protocol
// interleave under common.cuh's reuse rule). Pair b owns RCCLX_STREAM_SLOTS slots; a slot has
// `parts` parts of C elements (C = window_elems): one part (AllReduce, AllGather: a step of the
// input) or one per rank (ReduceScatter, AllToAll, two-shot AllReduce: the same step of each of
// the input's chunks). Step i of a call uses slot i % SLOTS; step 0 carries C/8 per part, so
// the first copy a consumer waits for is short.
//
// Step i: producer b copies its slice of the own input into the own slot and releases `ready`
// into flag line b of every rank (itself included); consumer b of every rank waits for `ready`
// of every rank, reads the slots it needs (its own locally; a reduction folds in rank order
// 0..n-1 exactly as rcclx_reduce), stores `recv`, and releases `freed` into flag line b of every
// rank. A producer refills slot i % SLOTS (step i >= SLOTS) only after `freed` of step i - SLOTS
// from every rank. So a producer's release follows only local stores, a consumer's only loads
// that have returned (docs/memory-model.md "Counters of the stream protocol").
//
// Counters: flag line b of rank r holds, besides the barrier words [0, 8):
//   [8 + p]   ready: steps of pair b that rank p's producer published (written by rank p);
//   [16 + p]  freed: steps of pair b of rank r that rank p's consumer finished (written by p);
//   [24], [25] this rank's producer's / consumer's step count of pair b (own, plain).
// Flag line G + b (the consumer's own line) word [8 + p]: steps of pair b whose reduced chunk
// rank p's consumer published (the two-shot AllReduce only).
// All only increase and are never reset (flags are zeroed once, at setup). Every call of every
// rank runs the same number of steps on every pair (the grid G is fixed per clique), so a
// producer's count of pair b and every consumer's count of pair b are equal when calls start:
// each block reads its count (the call's base) from device memory at the start of the call and
// stores base + steps at the end. Nothing per call is a kernel argument: graph replays read the
// base the previous call left, as the window counter `seq`.
//
// Across calls: a call's last SLOTS `freed` releases are skipped (the next call's producer
// waits only on its own steps: its slot reuse in the other parity half is covered by the window
// rule of common.cuh, since a rank that finished a stream call consumed every peer's every
// step, so every peer had started that call). No end barrier: a producer never waits for the
// last reads of its slots.
#ifndef RCCLX_STREAM_CUH
#define RCCLX_STREAM_CUH

#include "common.cuh"

#define RCCLX_STREAM_SLOTS 4
#define RCCLX_STREAM_READY 8
#define RCCLX_STREAM_FREED 16
#define RCCLX_STREAM_COUNT 24  // + 0: producer, + 1: consumer

// The slice of one step: elements [begin, begin + n) of the message (of each chunk), in the
// slot at byte `slot_off` of a staging buffer (the call's half included); part c of the slot at
// slot_off + c * part.
struct RcclxStreamStep {
  uint64_t begin;
  uint64_t n;
  uint64_t slot_off;
  uint64_t part;  // bytes of one part of a slot
};

// The geometry of a call: G pairs, C elements per part of a slot (a multiple of the vector),
// step 0 C / 8 per pair (at least one vector), `parts` parts per slot.
struct RcclxStreamGeom {
  uint64_t pairs;
  uint64_t slot;
  uint64_t first;
  uint64_t steps;
  uint64_t parts;
  uint64_t chunk;  // elements of a chunk (the steps cut a chunk); chunk c at c * chunk
  uint64_t total;  // elements of the input: the last chunk may be shorter (two-shot AllReduce)
};

// `parts` chunks of `chunk` elements of an input of `total` elements.
template <typename T>
RCCLX_DEV RcclxStreamGeom rcclx_stream_geom(const RcclxArgs& a, int parts, uint64_t chunk, uint64_t total) {
  constexpr uint64_t N = RcclxVec<T>::N;
  RcclxStreamGeom g;
  g.pairs = gridDim.x / 2;
  g.slot = a.window_elems;
  g.first = (g.slot / 8 + N - 1) / N * N;
  const uint64_t head = g.pairs * g.first;
  g.steps = chunk <= head ? 1 : 1 + (chunk - head + g.pairs * g.slot - 1) / (g.pairs * g.slot);
  g.parts = (uint64_t)parts;
  g.chunk = chunk;
  g.total = total;
  return g;
}

// Elements of step st (at most st.n) that chunk c has.
RCCLX_DEV uint64_t rcclx_stream_chunk_len(const RcclxStreamGeom& g, const RcclxStreamStep& st, uint64_t c) {
  const uint64_t at = c * g.chunk + st.begin;
  return at < g.total ? (g.total - at < st.n ? g.total - at : st.n) : 0;
}

template <typename T>
RCCLX_DEV RcclxStreamStep rcclx_stream_step(const RcclxArgs& a, const RcclxStreamGeom& g, uint64_t half, uint64_t pair,
                                            uint64_t i) {
  const uint64_t begin =
      i == 0 ? pair * g.first : g.pairs * g.first + (i - 1) * g.pairs * g.slot + pair * g.slot;
  const uint64_t len = i == 0 ? g.first : g.slot;
  RcclxStreamStep s;
  s.begin = begin;
  s.n = begin < g.chunk ? (g.chunk - begin < len ? g.chunk - begin : len) : 0;
  s.part = g.slot * sizeof(T);
  s.slot_off = half + (pair * RCCLX_STREAM_SLOTS + i % RCCLX_STREAM_SLOTS) * g.parts * s.part;
  return s;
}

// The publication half of rcclx_barrier (docs/memory-model.md "The protocol"): every wave's
// memory operations complete, then one thread per rank releases `value` into word
// `word + this rank` of flag line `line` of that rank.
RCCLX_DEV void rcclx_stream_signal(const RcclxArgs& a, uint64_t line, int word, uint32_t value) {
  rcclx_block_publish();
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.nranks) rcclx_st_release_sys(a.flags[p] + line * RCCLX_FLAG_STRIDE + word + a.rank, value);
}

// The consuming half: one thread per rank waits until word `word + p` of this rank's flag line
// `line` reached `value` (acquire), then the block's barrier hands the acquire to every thread.
// False on abort or timeout.
RCCLX_DEV bool rcclx_stream_wait(const RcclxArgs& a, uint64_t line, int word, uint32_t value, uint64_t deadline,
                                 int* s_fail) {
  const int p = threadIdx.x;
  if (p < a.nranks && !rcclx_wait_flag(a, a.flags[a.rank] + line * RCCLX_FLAG_STRIDE + word + p, value, deadline))
    *s_fail = 1;
  __syncthreads();
  return *s_fail == 0;
}

// Copies n elements of src into dst with the threads of one block: 16-byte vectors when both
// are aligned, element by element otherwise; the last n % vector one by one.
template <typename T>
RCCLX_DEV void rcclx_stream_copy(T* dst, const T* src, uint64_t n) {
  constexpr int N = RcclxVec<T>::N;
  constexpr int UNROLL = 4;
  const uint32_t nvec = (uint32_t)(n / N);  // a slot's part: 32-bit indices (registers)
  if (rcclx_aligned16(src) && rcclx_aligned16(dst)) {
    const rcclx_u32x4* s = (const rcclx_u32x4*)src;
    rcclx_u32x4* d = (rcclx_u32x4*)dst;
    for (uint32_t j0 = threadIdx.x; j0 < nvec; j0 += UNROLL * blockDim.x) {
      rcclx_u32x4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * blockDim.x < nvec) v[u] = rcclx_ld16(s + j0 + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * blockDim.x < nvec) rcclx_st16(d + j0 + u * blockDim.x, v[u]);
    }
  } else {
    for (uint32_t e = threadIdx.x; e < nvec * N; e += blockDim.x) dst[e] = src[e];
  }
  if (threadIdx.x < n % N) dst[nvec * N + threadIdx.x] = src[nvec * N + threadIdx.x];
}

// Folds n elements at byte offset `off` of every rank's staging, in rank order 0..n-1 as
// rcclx_reduce does (RcclxRed: pre, fold, post), into out[0, n), with the threads of one block.
template <typename T, int OP>
RCCLX_DEV void rcclx_stream_reduce(const RcclxArgs& a, uint64_t off, uint64_t n, T* out) {
  typedef RcclxRed<T, OP> R;
  constexpr int N = RcclxVec<T>::N;
  // As rcclx_reduce: two vectors in flight per rank except where two spilled.
  constexpr bool one = sizeof(T) == 1 || OP == RCCLX_AVG || (sizeof(T) == 8 && rcclx_is_int<T>::value) ||
                       (sizeof(T) == 4 && !rcclx_is_int<T>::value && (OP == RCCLX_MIN || OP == RCCLX_MAX));
  constexpr int UNROLL = one ? 1 : 2;
  typedef typename RcclxVec<T>::U U;
  const T s = R::scalar(a.nranks);
  const uint32_t nvec = (uint32_t)(n / N);  // a slot's part: 32-bit indices (registers)
  const bool out_aligned = rcclx_aligned16(out);
  for (uint32_t j0 = threadIdx.x; j0 < nvec; j0 += UNROLL * blockDim.x) {
    U in[UNROLL][RCCLX_MAX_RANKS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < RCCLX_MAX_RANKS; ++r)
        if (r < a.nranks && j0 + u * blockDim.x < nvec)
          in[u][r].v = rcclx_ld16((const rcclx_u32x4*)(a.staging[r] + off) + j0 + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const uint32_t j = j0 + u * blockDim.x;
      if (j >= nvec) break;
      U res;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        T acc = R::pre(in[u][0].e[e], s);
#pragma unroll
        for (int r = 1; r < RCCLX_MAX_RANKS; ++r)
          if (r < a.nranks) acc = R::fold(acc, in[u][r].e[e], s);
        res.e[e] = R::post(acc, a.nranks);
      }
      if (out_aligned) rcclx_st16((rcclx_u32x4*)out + j, res.v);
      else for (int e = 0; e < N; ++e) out[j * N + e] = res.e[e];
    }
  }
  if (threadIdx.x < n % N) {
    const uint32_t i = nvec * N + threadIdx.x;
    T acc = R::pre(((const T*)(a.staging[0] + off))[i], s);
    for (int r = 1; r < a.nranks; ++r) acc = R::fold(acc, ((const T*)(a.staging[r] + off))[i], s);
    out[i] = R::post(acc, a.nranks);
  }
}

// The pipeline of every stream kernel. The producers copy step i of `parts` chunks of the own
// input (chunk c at send + c * count; parts = 1: the input itself) into the parts of the own
// slot; `consume(a, st)` is a consumer block's work on step i once every rank published
// it (RCCLX_STREAM_CONSUME: a lambda inlined like RCCLX_PHASE).
#define RCCLX_STREAM_CONSUME                                                                   \
  [&](const RcclxArgs& a, const RcclxStreamGeom& g, const RcclxStreamStep& st, uint64_t pair, uint32_t done, \
      uint64_t deadline, int* s_fail) RCCLX_INLINE -> bool

template <typename T, typename Consume>
RCCLX_DEV void rcclx_stream(const RcclxArgs& a, int parts, uint64_t chunk, uint64_t total, Consume&& consume) {
  RCCLX_SESSION
  // The geometry in shared memory, read again after every barrier: registers live across a
  // consumer's reduction spilled the 16-bit float averages on sm_90.
  __shared__ RcclxStreamGeom s_g;
  if (threadIdx.x == 0) s_g = rcclx_stream_geom<T>(a, parts, chunk, total);
  __syncthreads();
  const RcclxStreamGeom& g = s_g;
  const bool producer = blockIdx.x < g.pairs;
  const uint64_t pair = producer ? blockIdx.x : blockIdx.x - g.pairs;
  const int own = RCCLX_STREAM_COUNT + (producer ? 0 : 1);
  __shared__ uint32_t s_base;
  if (threadIdx.x == 0) s_base = a.flags[a.rank][pair * RCCLX_FLAG_STRIDE + own];
  __syncthreads();
  const uint32_t base = s_base;
  const uint64_t half = (uint64_t)(seq & 1) * a.half_bytes;
  // One loop per role: a loop with both roles in it kept more values live across the
  // reduction and spilled the 16-bit float kernels on sm_90.
  if (producer) {
    for (uint64_t i = 0; i < g.steps; ++i) {
      const RcclxStreamStep st = rcclx_stream_step<T>(a, g, half, pair, i);
      const uint32_t done = base + (uint32_t)i + 1;  // the counters' value once step i is through
      // Slot i % SLOTS held step i - SLOTS: every rank's consumer must have read it.
      if (i >= RCCLX_STREAM_SLOTS &&
          !rcclx_stream_wait(a, pair, RCCLX_STREAM_FREED, done - RCCLX_STREAM_SLOTS, deadline, &s_fail))
        break;
      char* slot = a.staging[a.rank] + st.slot_off;
      for (int c = 0; c < parts; ++c)
        rcclx_stream_copy<T>((T*)(slot + c * st.part), (const T*)a.send + c * g.chunk + st.begin,
                             rcclx_stream_chunk_len(g, st, c));
      rcclx_stream_signal(a, pair, RCCLX_STREAM_READY, done);
    }
  } else {
    for (uint64_t i = 0; i < g.steps; ++i) {
      const RcclxStreamStep st = rcclx_stream_step<T>(a, g, half, pair, i);
      const uint32_t done = base + (uint32_t)i + 1;
      if (!rcclx_stream_wait(a, pair, RCCLX_STREAM_READY, done, deadline, &s_fail)) break;
      if (!consume(a, g, st, pair, done, deadline, &s_fail)) break;
      // The last SLOTS steps' slots are refilled only in the next call's other half.
      if (i + RCCLX_STREAM_SLOTS < g.steps) rcclx_stream_signal(a, pair, RCCLX_STREAM_FREED, done);
    }
  }
  if (threadIdx.x == 0) a.flags[a.rank][pair * RCCLX_FLAG_STRIDE + own] = base + (uint32_t)g.steps;
  rcclx_seq_store(a, seq + 1);
}

// AllReduce, one-shot at every rank count: every rank's slot, folded in rank order.
template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_stream(const RcclxArgs& a) {
  rcclx_stream<T>(a, 1, a.count, a.count, RCCLX_STREAM_CONSUME {
    rcclx_stream_reduce<T, OP>(a, st.slot_off, st.n, (T*)a.recv + st.begin);
    return true;
  });
}

// AllGather (bytes; count = bytes per rank): every rank's slot into its output block, peers
// from this rank on (spreads the links); the own block read back from the own slot, except in
// place (NCCL's in-place AllGather: send == recv + rank * count).
template <typename T>
RCCLX_DEV void rcclx_allgather_stream(const RcclxArgs& a) {
  rcclx_stream<T>(a, 1, a.count, a.count, RCCLX_STREAM_CONSUME {
    for (int i = 0; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      T* out = (T*)a.recv + p * a.count;
      if (p != a.rank || out != (const T*)a.send)
        rcclx_stream_copy<T>(out + st.begin, (const T*)(a.staging[p] + st.slot_off), st.n);
    }
    return true;
  });
}

// ReduceScatter (count = elements per rank): part `rank` of every rank's slot (the step of
// chunk `rank` of each input), folded in rank order into the output.
template <typename T, int OP>
RCCLX_DEV void rcclx_reducescatter_stream(const RcclxArgs& a) {
  rcclx_stream<T>(a, a.nranks, a.count, a.nranks * a.count, RCCLX_STREAM_CONSUME {
    rcclx_stream_reduce<T, OP>(a, st.slot_off + a.rank * st.part, st.n, (T*)a.recv + st.begin);
    return true;
  });
}

// AllToAll (bytes; count = bytes per peer): part `rank` of rank p's slot into output block p.
// In place the own block is rewritten with its own bytes (through the own slot).
template <typename T>
RCCLX_DEV void rcclx_alltoall_stream(const RcclxArgs& a) {
  rcclx_stream<T>(a, a.nranks, a.count, a.nranks * a.count, RCCLX_STREAM_CONSUME {
    for (int i = 0; i < a.nranks; ++i) {
      const int p = (a.rank + i) % a.nranks;
      rcclx_stream_copy<T>((T*)a.recv + p * a.count + st.begin,
                           (const T*)(a.staging[p] + st.slot_off + a.rank * st.part), st.n);
    }
    return true;
  });
}

// AllReduce two-shot (3-8 ranks, above the one-shot limit): the input in n chunks of C elements
// (C: a share rounded up to whole vectors; the last chunk shorter), a slot part per chunk. Step
// i of consumer b: the reduce-scatter of chunk `rank` (part `rank` of every rank's slot, folded
// in rank order) into part `rank` of the own slot, which nobody else reads until then, and from
// there into `recv` (a second local pass: reducing into both at once spilled on sm_90); `ready`
// of this all-gather half into flag line G + b of every rank (the consumer blocks' own lines:
// words no other kernel uses); then every other chunk's reduced step from its owner's slot.
// `freed` follows both halves, so a producer refills a slot only after every rank read its
// reduced part too.
template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_stream_tree(const RcclxArgs& a) {
  constexpr uint64_t N = RcclxVec<T>::N;
  const uint64_t C = (a.count + a.nranks * N - 1) / (a.nranks * N) * N;
  rcclx_stream<T>(a, a.nranks, C, a.count, RCCLX_STREAM_CONSUME {
    T* own = (T*)(a.staging[a.rank] + st.slot_off + a.rank * st.part);
    const uint64_t m = rcclx_stream_chunk_len(g, st, a.rank);
    rcclx_stream_reduce<T, OP>(a, st.slot_off + a.rank * st.part, m, own);
    __syncthreads();  // the copy reads what other threads reduced (element-wise when unaligned)
    rcclx_stream_copy<T>((T*)a.recv + a.rank * g.chunk + st.begin, own, m);
    rcclx_stream_signal(a, g.pairs + pair, RCCLX_STREAM_READY, done);
    if (!rcclx_stream_wait(a, g.pairs + pair, RCCLX_STREAM_READY, done, deadline, s_fail)) return false;
    for (int i = 1; i < a.nranks; ++i) {
      const int c = (a.rank + i) % a.nranks;
      rcclx_stream_copy<T>((T*)a.recv + c * g.chunk + st.begin,
                           (const T*)(a.staging[c] + st.slot_off + c * st.part), rcclx_stream_chunk_len(g, st, c));
    }
    return true;
  });
}

#endif  // RCCLX_STREAM_CUH
