// ll128.cuh - the LL128 protocol (host side: src/dda/grid.rs ll128_grid, RCCLX_LL128_MAX_BYTES): flagged
// lines instead of LL's flagged words, so 120 of 128 bytes (NVIDIA) or 56 of 64 (AMD) carry data
// instead of 4 of 8, and a ring with credits instead of an inbox as large as the message.
//
// A line is RCCLX_LL128_LINE bytes (rcclx_port.h): LANES lanes of 16 bytes, stored by LANES
// consecutive threads of one warp in ONE 16-byte store instruction each (rcclx_st_ll128), all in
// the same warp instruction. Its last 8 bytes (the second half of the last lane's 16) are its
// flag; the other LINE - 8 bytes are payload: line j of a message carries its bytes
// [j*P, j*P + P), P = LINE - 8, a multiple of 8, so every element lies within one lane's bytes.
// The protocol assumes a line so written is seen whole or not at all once its flag is seen: the
// assumption of NCCL's LL128 on NVLink and RCCL's on gfx942/gfx950 (hardware behaviour, not the
// PTX or HSA memory model; docs/memory-model.md).
//
// Region (per rank, after the LL inbox in the same allocation, rcclx_ll128_region; zeroed at
// setup, written by nothing but these kernels, so no stale word of other data can equal a flag):
//   counters: uint32 [RCCLX_LL128_MAX_BLOCKS][RCCLX_FLAG_STRIDE]; line b, word p < MAX_RANKS:
//             steps of this rank's data that rank p's block b has consumed (written by p,
//             rcclx_st_release_sys); word RCCLX_LL128_STEPS_WORD: this rank's block b's step
//             count (its own, persistent across calls).
//   rings:    [source rank][block][RCCLX_LL128_SLOTS slots][RCCLX_LL128_SLOT_BYTES]: the ring
//             source s's block b writes into this rank's region; a slot holds one step, one
//             line per LANES threads of the block. The host allocates rings for the clique's
//             ranks (src/clique/args.rs ll128_region_bytes; REGION_BYTES below is 8 sources').
// Steps: block b of every rank runs the same steps of the same lines (the geometry depends only
// on count, type and grid, identical on every rank): global step g = b + i * gridDim, lines
// [g * K, g * K + K), K = blockDim / LANES. Absolute step = base + i, base = the block's step
// count at the start of the call; step base + i lives in slot (base + i) % SLOTS, its lines'
// flag is (RCCLX_LL128_TAG << 32) | (base + i + 1) (never 0: a zeroed region is never ready).
// Credits: before writing step base + i into slot (base + i) % SLOTS of its peers, a writer waits
// until every peer consumed step base + i - SLOTS (counter >= base + i + 1 - SLOTS;
// rcclx_epoch_geq, wrap-safe); the reader releases base + i + 1 after its loads of the step
// returned. Counters
// never reset, so graph replays need nothing per call, and the message size is not bounded by
// the ring. Writers run RCCLX_LL128_AHEAD steps ahead of their own reads. A call also advances
// the call counter by one (common.cuh's rule: calls of every protocol interleave).
//
// Twin (RCCLX_TRAFFIC_TWIN): lines are loaded once, without a flag check, no credit is waited
// for or released, the step counts stay as they are, and the lines carry another tag (so a real
// call never takes a twin's line for its own).
#ifndef RCCLX_LL128_CUH
#define RCCLX_LL128_CUH

#include "common.cuh"

#define RCCLX_LL128_LANES (RCCLX_LL128_LINE / 16)  // 16-byte lanes of a line
#define RCCLX_LL128_PAYLOAD (RCCLX_LL128_LINE - 8)  // payload bytes of a line
// Mirror: src/clique/args.rs (LL128_*; a test there compares them with these lines).
#define RCCLX_LL128_MAX_BLOCKS 32
#define RCCLX_LL128_SLOTS 4
#define RCCLX_LL128_AHEAD 2
#define RCCLX_LL128_SLOT_BYTES (RCCLX_THREADS * 16)
#define RCCLX_LL128_COUNTER_BYTES (RCCLX_LL128_MAX_BLOCKS * RCCLX_FLAG_STRIDE * 4)
#define RCCLX_LL128_REGION_BYTES \
  (RCCLX_LL128_COUNTER_BYTES + RCCLX_MAX_RANKS * RCCLX_LL128_MAX_BLOCKS * RCCLX_LL128_SLOTS * RCCLX_LL128_SLOT_BYTES)
#define RCCLX_LL128_STEPS_WORD RCCLX_MAX_RANKS
#define RCCLX_LL128_TAG 0x4c4c3132u  // "LL12"
// A twin's lines carry another tag: a twin call advances no counter, so its lines would
// otherwise carry the very flags of the next real call's steps.
#define RCCLX_LL128_TWIN_TAG 0x4c4c3154u  // "LL1T"
static_assert(RCCLX_LL128_PAYLOAD % 8 == 0, "an element must not straddle two lanes");
static_assert(RCCLX_LL128_STEPS_WORD < RCCLX_FLAG_STRIDE, "a block's counters fit its line");

// Rank `r`'s LL128 region: after the LL inbox ([2][nranks][ll_units] 16-byte units).
RCCLX_DEV uint64_t* rcclx_ll128_region(const RcclxArgs& a, int r) {
  return a.ll[r] + 2 * (uint64_t)a.nranks * a.ll_units * 2;
}

// Byte offset in a region of this thread's lane of absolute step `step` from `src`, block b.
RCCLX_DEV uint32_t rcclx_ll128_lane_off(int src, uint32_t step) {
  const uint32_t slot = (uint32_t)(src * RCCLX_LL128_MAX_BLOCKS + blockIdx.x) * RCCLX_LL128_SLOTS + step % RCCLX_LL128_SLOTS;
  return RCCLX_LL128_COUNTER_BYTES + slot * RCCLX_LL128_SLOT_BYTES + threadIdx.x * 16;
}

// The counter word `w` of block b's line in rank r's region.
RCCLX_DEV uint32_t* rcclx_ll128_counter(const RcclxArgs& a, int r, int w) {
  return (uint32_t*)rcclx_ll128_region(a, r) + blockIdx.x * RCCLX_FLAG_STRIDE + w;
}

// Credit word w of this rank's region, block b (rcclx_ll128_counter), one relaxed system-scope
// load: a buffer load on AMD (rcclx_ld_ll128_credit), which marks the wait as an LL128 credit
// wait, not a flag wait, for the machine-code check.
RCCLX_DEV uint32_t rcclx_ll128_credit(const RcclxArgs& a, int w) {
  return rcclx_ld_ll128_credit(rcclx_ll128_region(a, a.rank), RCCLX_LL128_REGION_BYTES,
                               (uint32_t)((blockIdx.x * RCCLX_FLAG_STRIDE + w) * sizeof(uint32_t)));
}

// The flag word of absolute step `step`.
RCCLX_DEV uint64_t rcclx_ll128_flag(uint32_t step) {
  return ((uint64_t)(RCCLX_TRAFFIC_TWIN ? RCCLX_LL128_TWIN_TAG : RCCLX_LL128_TAG) << 32) | (step + 1);
}

// This thread's place in a call: the message byte its lane starts at for the block's local step
// i is line(i) * PAYLOAD + lane * 16, line(i) = (b + i * gridDim) * K + threadIdx / LANES.
struct RcclxLl128Lane {
  uint64_t bytes;   // message bytes
  uint64_t nlines;  // lines of the message
  uint32_t lane;    // 0..LANES-1 within its line
  bool flag_lane;   // the last lane: 8 payload bytes, then the flag
  RCCLX_DEV uint64_t line(uint32_t i) const {
    return ((uint64_t)blockIdx.x + (uint64_t)i * gridDim.x) * (blockDim.x / RCCLX_LL128_LANES) +
           threadIdx.x / RCCLX_LL128_LANES;
  }
  RCCLX_DEV uint64_t unit(uint32_t i) const { return (line(i) * RCCLX_LL128_PAYLOAD + lane * 16) / 8; }
};

RCCLX_DEV RcclxLl128Lane rcclx_ll128_lane(uint64_t bytes) {
  RcclxLl128Lane l;
  l.bytes = bytes;
  l.nlines = (bytes + RCCLX_LL128_PAYLOAD - 1) / RCCLX_LL128_PAYLOAD;
  l.lane = threadIdx.x % RCCLX_LL128_LANES;
  l.flag_lane = l.lane == RCCLX_LL128_LANES - 1;
  return l;
}

// Steps of the block in this call (global steps b, b + gridDim, ... of the message).
RCCLX_DEV uint32_t rcclx_ll128_steps(const RcclxLl128Lane& l) {
  const uint64_t k = blockDim.x / RCCLX_LL128_LANES;
  const uint64_t total = (l.nlines + k - 1) / k;
  return total > blockIdx.x ? (uint32_t)((total - blockIdx.x + gridDim.x - 1) / gridDim.x) : 0;
}

// The lane's payload of local step i from p[0, bytes) (zero past the end): 16 bytes, 8 on the
// flag lane (w1 = 0 there).
RCCLX_DEV void rcclx_ll128_load_payload(const unsigned char* p, const RcclxLl128Lane& l, uint32_t i, uint64_t* w0, uint64_t* w1) {
  const uint64_t u = l.unit(i);
  uint32_t lo, hi;
  rcclx_ll_load8(p, u, l.bytes, &lo, &hi);
  *w0 = ((uint64_t)hi << 32) | lo;
  *w1 = 0;
  if (!l.flag_lane) {
    rcclx_ll_load8(p, u + 1, l.bytes, &lo, &hi);
    *w1 = ((uint64_t)hi << 32) | lo;
  }
}

// Stores the lane's payload bytes of local step i that fall inside p[0, bytes).
RCCLX_DEV void rcclx_ll128_store_payload(unsigned char* p, const RcclxLl128Lane& l, uint32_t i, uint64_t w0, uint64_t w1) {
  const uint64_t u = l.unit(i);
  rcclx_ll_store8(p, u, l.bytes, (uint32_t)w0, (uint32_t)(w0 >> 32));
  if (!l.flag_lane) rcclx_ll_store8(p, u + 1, l.bytes, (uint32_t)w1, (uint32_t)(w1 >> 32));
}

// Writes local step i of `send` (this rank's data) into slot [this rank] of every peer's ring,
// once every peer has consumed the slot's previous step. Lines past the message are not written
// (their readers do not wait for them). On abort or timeout (*s_fail) it returns early.
RCCLX_DEV void rcclx_ll128_write(const RcclxArgs& a, const RcclxLl128Lane& l, uint32_t base, uint32_t i, uint64_t deadline,
                                 int* s_fail) {
  const uint32_t step = base + i;
  uint64_t w0, w1;
  rcclx_ll128_load_payload((const unsigned char*)a.send, l, i, &w0, &w1);
  if (l.flag_lane) w1 = rcclx_ll128_flag(step);
  const bool line_exists = l.line(i) < l.nlines;
  const uint32_t off = rcclx_ll128_lane_off(a.rank, step);
#if !RCCLX_TRAFFIC_TWIN
  // Credits: every peer's block b released the slot's previous step. Relaxed polls, every peer's
  // in flight at once (an acquire poll would wait for each before the next), no acquire after
  // them: the writer only stores, and the reader's loads that the credit covers had returned
  // before it released it (docs/memory-model.md). Every lane polls the same words (one load per
  // warp); a warp leaves together.
  const uint32_t need = step + 1 - RCCLX_LL128_SLOTS;
  for (uint32_t round = 0;; ++round) {
    bool all = true;
#pragma unroll
    for (int k = 1; k < RCCLX_MAX_RANKS; ++k)
      if (k < a.nranks)
        all = rcclx_epoch_geq(rcclx_ll128_credit(a, (a.rank + k) % a.nranks), need) && all;
    if (rcclx_warp_all(all)) break;
    rcclx_poll_pause();  // AMD: s_sleep 1 between polls, as RCCL's; nothing on NVIDIA
    // The host's abort word every 1024 rounds (a PCIe read); the block's failure every round,
    // so that after one failed wait the call's remaining waits end at once.
    if ((round & 1023) == 1023 && rcclx_should_stop(a, deadline)) *s_fail = 1;
    if (rcclx_warp_any(*(volatile int*)s_fail != 0)) return;
  }
#endif
  if (!line_exists) return;
  for (int k = 1; k < a.nranks; ++k)
    rcclx_st_ll128(rcclx_ll128_region(a, (a.rank + k) % a.nranks), RCCLX_LL128_REGION_BYTES, off, w0, w1);
}

// This thread's lane of local step i from `src`'s ring in this rank's region: rcclx_ll128_fetch
// loads it once (so the loads of every source can be in flight together), rcclx_ll128_read
// reloads until every line of the warp carries the step's flag (lines past the message count as
// ready), then loads the lane once more and returns that second load (`reload`; a caller that
// waits for several sources passes false and fetches them all again itself, so the reloads are
// in flight together). The second load is NCCL's and RCCL's: with it a line's lanes need only be
// visible no later than its flag, not arrive as one untorn line read in one load (nothing
// promises that over xGMI; docs/memory-model.md). A twin reloads too (the same traffic). On
// abort or timeout it sets *s_fail and returns what it last loaded.
RCCLX_DEV void rcclx_ll128_fetch(const RcclxArgs& a, int src, uint32_t step, uint64_t* w0, uint64_t* w1) {
  rcclx_ld_ll128(rcclx_ll128_region(a, a.rank), RCCLX_LL128_REGION_BYTES, rcclx_ll128_lane_off(src, step), w0, w1);
}
RCCLX_DEV void rcclx_ll128_read(const RcclxArgs& a, const RcclxLl128Lane& l, int src, uint32_t step, uint32_t i, uint64_t deadline,
                                int* s_fail, uint64_t* w0, uint64_t* w1, bool fetched = false, bool reload = true) {
  const bool line_exists = l.line(i) < l.nlines;
  const uint64_t flag = rcclx_ll128_flag(step);
  for (uint32_t round = 0;; ++round) {
    if (!fetched || round > 0) rcclx_ll128_fetch(a, src, step, w0, w1);
    if (RCCLX_TRAFFIC_TWIN) break;
    if (rcclx_warp_all(!line_exists || !l.flag_lane || *w1 == flag)) break;
    rcclx_poll_pause();
    // The host's abort word every 1024 rounds (a PCIe read); the block's failure every round,
    // so that after one failed wait the call's remaining waits end at once.
    if ((round & 1023) == 1023 && rcclx_should_stop(a, deadline)) *s_fail = 1;
    if (rcclx_warp_any(*(volatile int*)s_fail != 0)) break;
  }
  if (reload) rcclx_ll128_fetch(a, src, step, w0, w1);
}

// The head of a step's consumer (rcclx_ll128): a lambda of the kernel's arguments, the lane, the
// call's base step and the local step, inlined like an RCCLX_DEV function (`a` an argument, not
// a capture, as RCCLX_PHASE says). It reads the step's lanes (rcclx_ll128_read) and stores what
// the collective makes of them.
#define RCCLX_LL128_CONSUME \
  [&](const RcclxArgs& a, const RcclxLl128Lane& l, uint32_t base, uint32_t i) RCCLX_INLINE

// The LL128 pipeline of one call on one block: every rank writes its `bytes` of `a.send` into every
// peer's ring, RCCLX_LL128_AHEAD steps ahead of its reads; `consume` reads step i from every
// peer; then the block gives the step's slots back (credits). The session's `deadline` and
// `s_fail` are in scope of the consumer (it is written inside the kernel, after RCCLX_SESSION).
// A failed wait (abort, timeout) sets s_fail, after which every wait gives up at its first
// round: the loop runs out without a block-wide decision to leave it (which would need one more
// barrier per step).
template <typename C>
RCCLX_DEV void rcclx_ll128(const RcclxArgs& a, uint32_t seq, uint64_t deadline, int* s_fail, uint32_t* s_base,
                           uint64_t bytes, C&& consume) {
  if (threadIdx.x == 0) *s_base = rcclx_ld_relaxed_sys(rcclx_ll128_counter(a, a.rank, RCCLX_LL128_STEPS_WORD));
  __syncthreads();
  const uint32_t base = *s_base;
  const RcclxLl128Lane l = rcclx_ll128_lane(bytes);
  const uint32_t steps = rcclx_ll128_steps(l);
  for (uint32_t i = 0; i < steps && i < RCCLX_LL128_AHEAD; ++i) rcclx_ll128_write(a, l, base, i, deadline, s_fail);
  for (uint32_t i = 0; i < steps; ++i) {
    if (i + RCCLX_LL128_AHEAD < steps) rcclx_ll128_write(a, l, base, i + RCCLX_LL128_AHEAD, deadline, s_fail);
    consume(a, l, base, i);
    // Credit back: the block's loads of the step have returned (the consumer used their values),
    // so the writers may refill the slot. Released as every block publish is (every wave's
    // memory operations complete before the barrier, rule `publish-without-wait`): the loads
    // need no wait, but the check cannot tell this release from one that publishes stores.
    rcclx_block_publish();
    __syncthreads();
    const int p = threadIdx.x;
    if (!RCCLX_TRAFFIC_TWIN && p < a.nranks && p != a.rank) rcclx_st_release_sys(rcclx_ll128_counter(a, p, a.rank), base + i + 1);
  }
  // A twin leaves the step count alone: it released no credit.
  if (!RCCLX_TRAFFIC_TWIN && threadIdx.x == 0) *rcclx_ll128_counter(a, a.rank, RCCLX_LL128_STEPS_WORD) = base + steps;
  rcclx_seq_store(a, seq + 1);
}

// LL128 one-shot AllReduce: every rank writes its input into every peer's ring and reduces what
// arrives with its own input, in rank order 0..n-1 exactly as rcclx_ll_reduce_unit and
// rcclx_reduce (RcclxRed pre / fold / post), so the results are bit-identical to LL and flat.
template <typename T, int OP>
RCCLX_DEV void rcclx_allreduce_ll128(const RcclxArgs& a) {
  typedef RcclxRed<T, OP> R;
  constexpr int PER = 16 / sizeof(T);  // elements in a lane's 16 bytes
  union Lane { uint64_t w[2]; T e[PER]; };
  RCCLX_SESSION
  __shared__ uint32_t s_base;
  const T s = R::scalar(a.nranks);
  rcclx_ll128(a, seq, deadline, &s_fail, &s_base, a.count * sizeof(T), RCCLX_LL128_CONSUME {
    Lane acc;
    if constexpr (sizeof(T) == 1) {
      // Bytes: sixteen elements a lane; every source's lane at once spilled on sm_90, so each is
      // folded as soon as it is there.
#pragma unroll
      for (int p = 0; p < RCCLX_MAX_RANKS; ++p) {
        if (p >= a.nranks) break;
        Lane v;
        if (p == a.rank) rcclx_ll128_load_payload((const unsigned char*)a.send, l, i, &v.w[0], &v.w[1]);
        else rcclx_ll128_read(a, l, p, base + i, i, deadline, &s_fail, &v.w[0], &v.w[1]);
#pragma unroll
        for (int e = 0; e < PER; ++e) acc.e[e] = p == 0 ? R::pre(v.e[e], s) : R::fold(acc.e[e], v.e[e], s);
      }
    } else {
      // Every source's lane first (their loads in flight together, then each waited for), then
      // the fold.
      Lane in[RCCLX_MAX_RANKS];
#pragma unroll
      for (int p = 0; p < RCCLX_MAX_RANKS; ++p) {
        if (p == a.rank) rcclx_ll128_load_payload((const unsigned char*)a.send, l, i, &in[p].w[0], &in[p].w[1]);
        else if (p < a.nranks) rcclx_ll128_fetch(a, p, base + i, &in[p].w[0], &in[p].w[1]);
      }
#pragma unroll
      for (int p = 0; p < RCCLX_MAX_RANKS; ++p)
        if (p != a.rank && p < a.nranks)
          rcclx_ll128_read(a, l, p, base + i, i, deadline, &s_fail, &in[p].w[0], &in[p].w[1], true, false);
      // Every line seen with its flag: the second loads, in flight together (rcclx_ll128_read).
#pragma unroll
      for (int p = 0; p < RCCLX_MAX_RANKS; ++p)
        if (p != a.rank && p < a.nranks) rcclx_ll128_fetch(a, p, base + i, &in[p].w[0], &in[p].w[1]);
#pragma unroll
      for (int e = 0; e < PER; ++e) {
        acc.e[e] = R::pre(in[0].e[e], s);
#pragma unroll
        for (int p = 1; p < RCCLX_MAX_RANKS; ++p)
          if (p < a.nranks) acc.e[e] = R::fold(acc.e[e], in[p].e[e], s);
      }
    }
    // Rank order 0..n-1 in both forms, then post: exactly rcclx_ll_reduce_unit's arithmetic.
#pragma unroll
    for (int e = 0; e < PER; ++e) acc.e[e] = R::post(acc.e[e], a.nranks);
    if (l.line(i) < l.nlines) rcclx_ll128_store_payload((unsigned char*)a.recv, l, i, acc.w[0], acc.w[1]);
  });
}

// LL128 AllGather (T = uint8_t, `count` = bytes per rank, as allgather.cuh): every rank writes its
// block into every peer's ring and copies each peer's lines to that peer's output block, starting
// after this rank ((rank + k) % n, as the LL kernel); its own block is copied locally (skipped in
// place: NCCL's in-place AllGather passes sendbuff == recvbuff + rank * count).
template <typename T>
RCCLX_DEV void rcclx_allgather_ll128(const RcclxArgs& a) {
  RCCLX_SESSION
  __shared__ uint32_t s_base;
  unsigned char* recv = (unsigned char*)a.recv;
  unsigned char* own = recv + a.rank * a.count;
  rcclx_ll128(a, seq, deadline, &s_fail, &s_base, a.count, RCCLX_LL128_CONSUME {
    const bool line_exists = l.line(i) < l.nlines;
    uint64_t w0, w1;
    if (own != a.send) {
      rcclx_ll128_load_payload((const unsigned char*)a.send, l, i, &w0, &w1);
      if (line_exists) rcclx_ll128_store_payload(own, l, i, w0, w1);
    }
    // Every peer's lane first (their loads in flight together), then each waited for, then the
    // second loads together (rcclx_ll128_read), then the stores.
    uint64_t v[RCCLX_MAX_RANKS][2];
#pragma unroll
    for (int k = 1; k < RCCLX_MAX_RANKS; ++k)
      if (k < a.nranks) rcclx_ll128_fetch(a, (a.rank + k) % a.nranks, base + i, &v[k][0], &v[k][1]);
#pragma unroll
    for (int k = 1; k < RCCLX_MAX_RANKS; ++k)
      if (k < a.nranks)
        rcclx_ll128_read(a, l, (a.rank + k) % a.nranks, base + i, i, deadline, &s_fail, &v[k][0], &v[k][1], true, false);
#pragma unroll
    for (int k = 1; k < RCCLX_MAX_RANKS; ++k)
      if (k < a.nranks) rcclx_ll128_fetch(a, (a.rank + k) % a.nranks, base + i, &v[k][0], &v[k][1]);
#pragma unroll
    for (int k = 1; k < RCCLX_MAX_RANKS; ++k) {
      if (k >= a.nranks) break;
      const int p = (a.rank + k) % a.nranks;
      if (line_exists) rcclx_ll128_store_payload(recv + p * a.count, l, i, v[k][0], v[k][1]);
    }
  });
}

#endif  // RCCLX_LL128_CUH
