"""GPU-resident all-to-all-v (issue "AllToAllvDynamic"): rcclx against all_to_all_single.

Run with torchrun (2 processes, or NRANKS) and LD_PRELOAD=librcclx.so:

    LD_PRELOAD=$PWD/.carry/librcclx.so torchrun --standalone --nproc_per_node=2 tests/gpu/a2av_dynamic.py

Every result is compared, byte for byte (NaN payloads included), with
torch.distributed.all_to_all_single called with host split lists (the stock library's
send/recv), and the received counts with what every rank sent:

* packed form, rcclx.all_to_all_v_dynamic (rcclxAllToAllvDynamicPacked): bf16, fp16, fp32, fp64,
  int8, int64 x rows of 4096, 1, 7, 33 elements x random uneven splits (some zero), all rows to
  one peer (incast on rank 0, and to the next rank), all zero (empty and non-empty buffers), self
  only, splits exactly filling both capacities; segments longer than a staging window; 1-D and
  3-D tensors; buffers at odd byte offsets;
* per-peer form (rcclxAllToAllvDynamic) and Split form (rcclxAllToAllvDynamicSplit) through
  ctypes, with host arrays of data_ptr()s, counts in elements;
* a captured dispatch + combine (torch.cuda.graph) replayed 1000 times, new routing (splits from
  a device bincount) and new data written on the device before each replay, every replay
  checked in full;
* counts over the capacities (and negative, and huge): the dropped segments read -1, the others
  are correct, and nothing outside the received rows changes (sentinel guard rows around every
  output, slack rows inside the capacity);
* argument errors: ncclInvalidArgument from the C functions, ValueError from the Python function,
  the communicator still usable afterwards;
* a single-rank subgroup (dist.new_group([rank])), where rcclx has no kernels:
  ncclInvalidUsage from the C function, RuntimeError naming it from Python;
* rcclx.stats: every successful call counted on the route "alltoallv.dynamic".
* low precision (wire="fp8" / "int8", issue 28; the ...Ex forms): decoded delivery equal, bit for
  bit (NaN matching NaN), to rcclx._codec_model applied to all_to_all_single's rows: rows from
  other ranks through the codec, the rank's own rows exact; INT8 also within amax/127 of its
  block element by element; coded delivery (FP8 codes + one f32 scale per 128 elements of a row)
  equal to the model's codes and scales for every row, the own rows too; bf16, fp16, fp32 x rows
  of 4096, 300, 33, 1 and 3x100 elements x random (with inf, NaN, zero and under-the-floor
  blocks), self-only, incast and over-capacity splits, segments of several staging windows; the
  per-peer and Split Ex forms through ctypes (a segment that is not whole rows reads -1); NULL
  options = the plain call; argument errors; a captured FP8 dispatch + plain combine replayed
  with new splits and data; the routes "alltoallv.lowp" and "alltoallv.int8" count the calls.

Rank 0 prints the PASS lines, every rank its FAIL lines; each rank ends with a summary line and
exits non-zero on any failure. Splits come from a seed shared by all ranks (each rank knows what
every other sends), data from a seed per rank.
"""
import collections
import ctypes
import os
import random
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))  # this checkout's rcclx package
import rcclx  # noqa: E402
from rcclx import _codec_model as codec  # noqa: E402  (the torch model of the wire codecs)

NCCL_TYPE = {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6,
             torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.int64]
ROW_SIZES = [4096, 1, 7, 33]
SENTINEL = 0xA5
GUARD = 3          # sentinel rows (per-peer: elements) before and after every output
U64 = 1 << 64
SUCCESS, INVALID_ARGUMENT, INVALID_USAGE = 0, 4, 5
REPLAYS = int(os.environ.get("A2AV_REPLAYS", "1000"))
LOWP_REPLAYS = int(os.environ.get("A2AV_LOWP_REPLAYS", "200"))
WIRE = {"fp8": 1, "int8": 2}
ROUTE = {None: "alltoallv.dynamic", "fp8": "alltoallv.lowp", "int8": "alltoallv.int8"}
LOWP_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
LOWP_ROWS = [(4096,), (300,), (33,), (1,), (3, 100)]

# The C API, declared here from its documentation (independent of the rcclx package's _capi).
c_size_t, c_void_p, c_int = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int
PTRS = ctypes.POINTER(ctypes.c_void_p)
SIGNATURES = {
    "rcclxAllToAllvDynamic": [PTRS, c_void_p, PTRS, c_size_t, c_size_t, c_void_p, c_int, c_void_p, c_void_p],
    "rcclxAllToAllvDynamicSplit": [c_void_p, c_void_p, PTRS, c_size_t, c_size_t, c_void_p, c_int, c_void_p,
                                   c_void_p],
    "rcclxAllToAllvDynamicPacked": [c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_void_p, c_size_t, c_int,
                                    c_void_p, c_void_p],
}


class Options(ctypes.Structure):
    """rcclxAllToAllvOptions: int wire; size_t rowElements; float* const* recvScales."""

    _fields_ = [("wire", ctypes.c_int), ("rowElements", ctypes.c_size_t), ("recvScales", PTRS)]


OPTS = ctypes.POINTER(Options)
EX_SIGNATURES = {name + "Ex": argtypes + [OPTS] for name, argtypes in SIGNATURES.items()}


def options(wire, row_elements=0, scales=None):
    """(Options, the pointer array it holds: keep both until the call returns)."""
    arr = ptr_array(scales) if scales is not None else None
    return Options(WIRE.get(wire, wire or 0), row_elements, ctypes.cast(arr, PTRS) if arr is not None else None), arr


def c_functions(signatures=None):
    lib = ctypes.CDLL(None)  # LD_PRELOAD puts rcclx in the global namespace
    fns = {}
    for name, argtypes in (signatures or SIGNATURES).items():
        f = getattr(lib, name)  # AttributeError: rcclx not preloaded, or too old
        f.restype = c_int
        f.argtypes = argtypes
        fns[name] = f
    return fns


def ptr_array(tensors):
    return (ctypes.c_void_p * len(tensors))(*[t.data_ptr() or None for t in tensors])


def as_bytes(t):
    return t.reshape(-1).view(torch.uint8)


def u64(c):
    return c % U64  # a negative int64 count is a huge size_t


# --- what rcclx must do: the models of the three forms -----------------------------------------

def sent_count(c):
    """A send count as the kernel takes it: -1 (a dropped count passed back) sends nothing."""
    c = u64(c)
    return 0 if c == U64 - 1 else c


def packed_sender(counts, cap):
    """A packed send buffer of `cap` units: a segment that ends past it is dropped, and so is
    every later one. Returns the counts actually sent (None: dropped)."""
    out, end, over = [], 0, False
    for c in counts:
        c = sent_count(c)
        over = over or c > cap - end
        out.append(None if over else c)
        if not over:
            end += c
    return out


def packed_receiver(incoming, cap):
    """A packed receive buffer of `cap` units; `incoming[p]` is what p sent (None: dropped by p,
    takes no room). Returns the counts received, -1 for a dropped segment."""
    out, end, over = [], 0, False
    for c in incoming:
        if c is None:
            out.append(-1)
            continue
        over = over or c > cap - end
        out.append(-1 if over else c)
        if not over:
            end += c
    return out


def per_peer_sender(counts, cap):
    return [None if sent_count(c) > cap else sent_count(c) for c in counts]


def per_peer_receiver(incoming, cap):
    return [-1 if c is None or c > cap else c for c in incoming]


class Test:
    def __init__(self):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        self.dev = torch.device("cuda", local)
        torch.cuda.set_device(self.dev)
        # device_id makes the init eager (the communicator exists before the first collective).
        dist.init_process_group("nccl", device_id=self.dev)
        self.passed = self.failed = 0
        self.world_calls = 0  # successful dynamic calls on the world communicator (host calls)
        self.lowp_calls = collections.Counter()  # the same for the low-precision routes
        self.gen = torch.Generator(device=self.dev).manual_seed(20261201 + 7919 * self.rank)

    # --- reporting ---
    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        if self.rank == 0 or not ok:
            print(f"{'PASS' if ok else 'FAIL'} rank{self.rank} {name} {detail}".rstrip(), flush=True)

    # --- buffers ---
    def rand_bytes(self, n):
        return torch.randint(0, 256, (n,), dtype=torch.uint8, device=self.dev, generator=self.gen)

    def guarded(self, rows, row_shape, dtype, guard=GUARD):
        """(raw, t): t is [rows, *row_shape] inside a uint8 buffer with `guard` sentinel rows on
        each side (so t also starts at an odd byte offset when a row is)."""
        rb = self.row_bytes(row_shape, dtype)
        raw = torch.full(((2 * guard + rows) * rb,), SENTINEL, dtype=torch.uint8, device=self.dev)
        t = raw[guard * rb:(guard + rows) * rb].view(dtype).reshape(rows, *row_shape)
        return raw, t

    @staticmethod
    def row_bytes(row_shape, dtype):
        n = 1
        for d in row_shape:
            n *= d
        return n * torch.tensor([], dtype=dtype).element_size()

    def random_input(self, rows, row_shape, dtype):
        raw, t = self.guarded(rows, row_shape, dtype, guard=1)
        as_bytes(t).copy_(self.rand_bytes(t.numel() * t.element_size()))
        return raw, t

    @staticmethod
    def untouched(raw, lo, hi):
        """Bytes of raw outside [lo, hi) still hold the sentinel."""
        return bool((raw[:lo] == SENTINEL).all()) and bool((raw[hi:] == SENTINEL).all())

    def reference(self, inp, send_eff, recv_eff):
        """all_to_all_single with host splits (the stock library), into a fresh tensor."""
        out = torch.empty((sum(recv_eff), *inp.shape[1:]), dtype=inp.dtype, device=self.dev)
        dist.all_to_all_single(out, inp[:sum(send_eff)], recv_eff, send_eff)
        return out

    # --- the packed form through the Python API ---
    def packed_case(self, name, dtype, row_shape, mat, send_caps, recv_caps):
        me, world = self.rank, self.world
        raw_in, inp = self.random_input(send_caps[me], row_shape, dtype)
        before = inp.clone()
        raw_out, out = self.guarded(recv_caps[me], row_shape, dtype)
        splits = torch.tensor(mat[me], dtype=torch.int64, device=self.dev)
        recv = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        got_recv = rcclx.all_to_all_v_dynamic(inp, splits, out, recv_splits=recv)
        self.world_calls += 1
        sent = [packed_sender(mat[s], send_caps[s]) for s in range(world)]
        want = packed_receiver([sent[p][me] for p in range(world)], recv_caps[me])
        ref = self.reference(inp, [c or 0 for c in sent[me]], [sent[p][me] or 0 for p in range(world)])
        kept = sum(c for c in want if c >= 0)  # the received rows: a prefix of the reference
        rb = self.row_bytes(row_shape, dtype)
        got = got_recv.tolist()
        ok_counts = got == want and got_recv is recv
        ok_data = torch.equal(as_bytes(out[:kept]), as_bytes(ref[:kept]))
        ok_guard = self.untouched(raw_out, GUARD * rb, (GUARD + kept) * rb)
        ok_in = torch.equal(as_bytes(inp), as_bytes(before))
        shape = "x".join(str(d) for d in row_shape) or "1-D"
        detail = f"send {mat[me]} caps N={send_caps[me]} M={recv_caps[me]} recv {got}"
        if not ok_counts:
            detail += f" WANT recv {want}"
        if not (ok_data and ok_guard and ok_in):
            detail += f" data={ok_data} outside-received-rows-untouched={ok_guard} input-unchanged={ok_in}"
        self.check(f"packed {name} {str(dtype)[6:]} row={shape}", ok_counts and ok_data and ok_guard and ok_in,
                   detail)

    def random_matrix(self, rng, hi, zero_frac=0.3):
        return [[0 if rng.random() < zero_frac else rng.randint(1, hi) for _ in range(self.world)]
                for _ in range(self.world)]

    def packed_cases(self):
        world = self.world
        for dtype in DTYPES:
            for row in ROW_SIZES:
                rng = random.Random(f"packed-{dtype}-{row}")  # same on every rank
                hi = 40 if row == 4096 else 300
                shape = (row,)
                col = lambda m, r: sum(m[s][r] for s in range(world))  # noqa: E731

                m = self.random_matrix(rng, hi)
                self.packed_case("random", dtype, shape, m, [sum(r) + rng.randint(0, 4) for r in m],
                                 [col(m, r) + rng.randint(0, 4) for r in range(world)])
                m = self.random_matrix(rng, hi)
                self.packed_case("exact-capacity", dtype, shape, m, [sum(r) for r in m],
                                 [col(m, r) for r in range(world)])
                m = [[2 * hi if d == 0 else 0 for d in range(world)] for _ in range(world)]
                self.packed_case("all-to-rank0", dtype, shape, m, [2 * hi] * world, [2 * hi * world if r == 0 else 3
                                                                                     for r in range(world)])
                m = [[hi if d == (s + 1) % world else 0 for d in range(world)] for s in range(world)]
                self.packed_case("all-to-next", dtype, shape, m, [hi] * world, [hi] * world)
                m = [[hi if d == s else 0 for d in range(world)] for s in range(world)]
                self.packed_case("self-only", dtype, shape, m, [hi + 1] * world, [hi] * world)
                m = [[0] * world for _ in range(world)]
                self.packed_case("all-zero", dtype, shape, m, [5] * world, [5] * world)
                self.packed_case("all-zero-empty", dtype, shape, m, [0] * world, [0] * world)
        # Segments longer than one staging window (several windows per call), odd sizes.
        for dtype, row, lo, hi in ((torch.bfloat16, 4096, 1000, 3000), (torch.float32, 33, 20000, 70000),
                                   (torch.int8, 7, 1000000, 3000000), (torch.float64, 1, 300000, 900000)):
            rng = random.Random(f"large-{dtype}-{row}")
            m = [[rng.randint(lo, hi) for _ in range(world)] for _ in range(world)]
            m[0][world - 1] = 0
            self.packed_case("multi-window", dtype, (row,), m, [sum(r) + 1 for r in m],
                             [sum(m[s][r] for s in range(world)) + 1 for r in range(world)])
        # 1-D (count unit 1) and 3-D rows.
        for dtype, shape in ((torch.bfloat16, ()), (torch.int8, ()), (torch.float16, (3, 11)), (torch.int64, (2, 5))):
            rng = random.Random(f"shape-{dtype}-{shape}")
            m = self.random_matrix(rng, 500)
            self.packed_case("random", dtype, shape, m, [sum(r) + 2 for r in m],
                             [sum(m[s][r] for s in range(world)) + 2 for r in range(world)])

    def bad_count_cases(self):
        """Counts past the capacities: -1 for the dropped segments, the rest moves."""
        world = self.world
        for dtype, row in ((torch.bfloat16, 33), (torch.int8, 7), (torch.float32, 4096)):
            rng = random.Random(f"bad-{dtype}-{row}")
            hi = 30 if row == 4096 else 200
            shape = (row,)

            def fresh():
                return [[rng.randint(1, hi) for _ in range(world)] for _ in range(world)]

            def cols(m, extra=0):
                return [sum(m[s][r] for s in range(world)) + extra for r in range(world)]

            # Rank 0's segment for rank 1 ends past its send buffer: it and all after are dropped.
            m = fresh()
            caps = [sum(r) for r in m]
            caps[0] = m[0][0] + m[0][1 % world] // 2 if world > 1 else m[0][0]
            self.packed_case("send-over-capacity", dtype, shape, m, caps, cols(m))
            # Every receiver one row short: its last segment is dropped.
            m = fresh()
            self.packed_case("recv-over-capacity", dtype, shape, m, [sum(r) for r in m], cols(m, -1))
            # Receiver short by more than the last segment: the two last from it are dropped.
            m = fresh()
            self.packed_case("recv-over-capacity-2", dtype, shape, m, [sum(r) for r in m],
                             [c - m[world - 1][r] - 1 for r, c in enumerate(cols(m))])
            # A negative count (a huge size_t) in the last segment of the last rank, a huge one in
            # rank 0's segment for rank 1 (that one and every later one dropped).
            m = fresh()
            m[world - 1][world - 1] = -3
            m[0][1 % world] = 1 << 62

            def real(c):
                return 0 <= c < 1 << 40

            self.packed_case("negative-and-huge", dtype, shape, m, [sum(c for c in r if real(c)) for r in m],
                             [sum(m[s][r] for s in range(world) if real(m[s][r])) for r in range(world)])
            # Sender and receiver drops at once, buffers without slack.
            m = fresh()
            caps = [sum(r) - 1 for r in m]
            self.packed_case("send-and-recv-over", dtype, shape, m, caps, cols(m, -2))
            # Then a normal call: the communicator is still fine.
            m = fresh()
            self.packed_case("after-bad-counts", dtype, shape, m, [sum(r) for r in m], cols(m))

    # --- per-peer and Split forms through ctypes (counts in elements) ---
    def c_form_case(self, form, name, dtype, mat, send_caps, recv_caps):
        me, world = self.rank, self.world
        f = self.fns["rcclxAllToAllvDynamic" if form == "per-peer" else "rcclxAllToAllvDynamicSplit"]
        esz = torch.tensor([], dtype=dtype).element_size()
        if form == "per-peer":
            sends = [self.random_input(send_caps[me], (), dtype)[1] for _ in range(world)]
            sent = [per_peer_sender(mat[s], send_caps[s]) for s in range(world)]
        else:
            _, packed = self.random_input(send_caps[me], (), dtype)
            sent = [packed_sender(mat[s], send_caps[s]) for s in range(world)]
        want = per_peer_receiver([sent[p][me] for p in range(world)], recv_caps[me])
        recvs = [self.guarded(recv_caps[me], (), dtype) for _ in range(world)]
        counts = torch.tensor(mat[me], dtype=torch.int64, device=self.dev)
        actual = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        before = [t.clone() for t in sends] if form == "per-peer" else [packed.clone()]
        sendarg = ptr_array(sends) if form == "per-peer" else packed.data_ptr()
        rc = f(sendarg, counts.data_ptr(), ptr_array([t for _, t in recvs]), send_caps[me], recv_caps[me],
               actual.data_ptr(), NCCL_TYPE[dtype], self.comm, torch.cuda.current_stream().cuda_stream)
        self.world_calls += rc == SUCCESS
        # Reference: the segments actually sent, packed, through all_to_all_single.
        send_eff = [c or 0 for c in sent[me]]
        if form == "per-peer":
            ref_in = torch.cat([sends[d][:send_eff[d]] for d in range(world)])
        else:
            ref_in = packed
        recv_eff = [sent[p][me] or 0 for p in range(world)]
        ref = self.reference(ref_in, send_eff, recv_eff)
        got = actual.tolist()
        ok_data = ok_guard = True
        off = 0
        for p in range(world):
            n = want[p] if want[p] >= 0 else 0
            raw, t = recvs[p]
            ok_data &= torch.equal(as_bytes(t[:n]), as_bytes(ref[off:off + n]))
            ok_guard &= self.untouched(raw, GUARD * esz, (GUARD + n) * esz)
            off += recv_eff[p]
        after = sends if form == "per-peer" else [packed]
        ok_in = all(torch.equal(as_bytes(a), as_bytes(b)) for a, b in zip(after, before))
        ok = rc == SUCCESS and got == want and ok_data and ok_guard and ok_in
        detail = f"send {mat[me]} maxSend={send_caps[me]} maxRecv={recv_caps[me]} recv {got}"
        if rc != SUCCESS:
            detail += f" rc={rc}"
        if got != want:
            detail += f" WANT {want}"
        if not (ok_data and ok_guard and ok_in):
            detail += f" data={ok_data} outside-received-untouched={ok_guard} input-unchanged={ok_in}"
        self.check(f"{form} {name} {str(dtype)[6:]}", ok, detail)

    def c_form_cases(self):
        world = self.world
        for form in ("per-peer", "split"):
            for dtype in DTYPES:
                rng = random.Random(f"{form}-{dtype}")
                m = self.random_matrix(rng, 5000)
                big = max(max(r) for r in m)
                if form == "per-peer":
                    self.c_form_case(form, "random", dtype, m, [big + rng.randint(0, 9) for _ in range(world)],
                                     [big + rng.randint(0, 9) for _ in range(world)])
                    m = self.random_matrix(rng, 5000, zero_frac=0.1)
                    big = max(max(r) for r in m)
                    self.c_form_case(form, "exact-capacity", dtype, m, [big] * world, [big] * world)
                    # One segment over the sender's capacity, one over the receiver's.
                    m = self.random_matrix(rng, 3000, zero_frac=0.1)
                    m[0][1 % world] = 3030
                    m[world - 1][0] = 3010
                    self.c_form_case(form, "over-capacity", dtype, m, [3020] * world, [3000] * world)
                else:
                    self.c_form_case(form, "random", dtype, m, [sum(r) + rng.randint(0, 9) for r in m],
                                     [big + rng.randint(0, 9) for _ in range(world)])
                    m = self.random_matrix(rng, 5000, zero_frac=0.1)
                    big = max(max(r) for r in m)
                    self.c_form_case(form, "exact-capacity", dtype, m, [sum(r) for r in m], [big] * world)
                    # Rank 0's packed buffer ends inside its segment for rank 1; a receiver drop.
                    m = self.random_matrix(rng, 3000, zero_frac=0.1)
                    m[world - 1][0] = 3010
                    caps = [sum(r) for r in m]
                    caps[0] = m[0][0] + m[0][1 % world] // 2 if world > 1 else m[0][0]
                    self.c_form_case(form, "over-capacity", dtype, m, caps, [3000] * world)
        # Segments of several staging windows.
        rng = random.Random("per-peer-large")
        m = [[rng.randint(2_000_000, 5_000_000) for _ in range(world)] for _ in range(world)]
        self.c_form_case("per-peer", "multi-window", torch.bfloat16, m, [5_000_000] * world, [5_000_000] * world)
        self.c_form_case("split", "multi-window", torch.bfloat16, m, [sum(r) for r in m], [5_000_000] * world)

    # --- argument errors ---
    def argument_errors(self):
        world = self.world
        pk = self.fns["rcclxAllToAllvDynamicPacked"]
        pp = self.fns["rcclxAllToAllvDynamic"]
        sp = self.fns["rcclxAllToAllvDynamicSplit"]
        stream = torch.cuda.current_stream().cuda_stream
        buf = torch.zeros(64, dtype=torch.float32, device=self.dev)
        out = torch.zeros(64, dtype=torch.float32, device=self.dev)
        counts = torch.ones(world, dtype=torch.int64, device=self.dev)
        actual = torch.zeros(world, dtype=torch.int64, device=self.dev)
        bufs, outs = ptr_array([buf] * world), ptr_array([out] * world)
        c = self.comm
        cases = [
            ("per-peer sendbuffs NULL", pp(None, counts.data_ptr(), outs, 64, 64, actual.data_ptr(), 7, c, stream)),
            ("per-peer recvbuffs NULL", pp(bufs, counts.data_ptr(), None, 64, 64, actual.data_ptr(), 7, c, stream)),
            ("per-peer sendcounts NULL", pp(bufs, None, outs, 64, 64, actual.data_ptr(), 7, c, stream)),
            ("per-peer a NULL recv buffer, capacity 64",
             pp(bufs, counts.data_ptr(), (ctypes.c_void_p * world)(*([out.data_ptr()] * (world - 1) + [None])), 64,
                64, actual.data_ptr(), 7, c, stream)),
            ("split sendbuff NULL, capacity 64", sp(None, counts.data_ptr(), outs, 64, 64, actual.data_ptr(), 7, c,
                                                   stream)),
            ("split actualRecvcounts NULL", sp(buf.data_ptr(), counts.data_ptr(), outs, 64, 64, None, 7, c, stream)),
            ("packed sendcounts NULL", pk(buf.data_ptr(), None, out.data_ptr(), 64, 64, actual.data_ptr(), 1, 7, c,
                                          stream)),
            ("packed actualRecvcounts NULL", pk(buf.data_ptr(), counts.data_ptr(), out.data_ptr(), 64, 64, None, 1, 7,
                                                c, stream)),
            ("packed recvbuff NULL, capacity 64", pk(buf.data_ptr(), counts.data_ptr(), None, 64, 64,
                                                     actual.data_ptr(), 1, 7, c, stream)),
            ("packed countUnit 0", pk(buf.data_ptr(), counts.data_ptr(), out.data_ptr(), 64, 64, actual.data_ptr(), 0,
                                      7, c, stream)),
            ("packed datatype 99", pk(buf.data_ptr(), counts.data_ptr(), out.data_ptr(), 64, 64, actual.data_ptr(), 1,
                                      99, c, stream)),
            ("packed comm NULL", pk(buf.data_ptr(), counts.data_ptr(), out.data_ptr(), 64, 64, actual.data_ptr(), 1,
                                    7, None, stream)),
        ]
        for name, rc in cases:
            self.check(f"invalid argument: {name}", rc == INVALID_ARGUMENT, f"rc={rc} (want {INVALID_ARGUMENT})")

        # The Python checks (host only: nothing reaches the library).
        x = torch.zeros(8, 4, dtype=torch.bfloat16, device=self.dev)
        y = torch.zeros(16, 4, dtype=torch.bfloat16, device=self.dev)
        s = torch.zeros(world, dtype=torch.int64, device=self.dev)
        r = torch.zeros(world, dtype=torch.int64, device=self.dev)
        wide = torch.zeros(8, 8, dtype=torch.bfloat16, device=self.dev)
        bad = [
            ("send_splits int32", lambda: rcclx.all_to_all_v_dynamic(x, s.int(), y)),
            ("send_splits on the CPU", lambda: rcclx.all_to_all_v_dynamic(x, s.cpu(), y)),
            ("send_splits of world+1", lambda: rcclx.all_to_all_v_dynamic(
                x, torch.zeros(world + 1, dtype=torch.int64, device=self.dev), y)),
            ("output of another dtype", lambda: rcclx.all_to_all_v_dynamic(x, s, y.half())),
            ("rows of another shape", lambda: rcclx.all_to_all_v_dynamic(x, s, torch.zeros(
                16, 5, dtype=torch.bfloat16, device=self.dev))),
            ("input not contiguous", lambda: rcclx.all_to_all_v_dynamic(wide[:, ::2], s, y)),
            ("input on the CPU", lambda: rcclx.all_to_all_v_dynamic(x.cpu(), s, y)),
            ("input and output overlap", lambda: rcclx.all_to_all_v_dynamic(y[:8], s, y[4:])),
            ("recv_splits is send_splits", lambda: rcclx.all_to_all_v_dynamic(x, s, y, recv_splits=s)),
            ("recv_splits int32", lambda: rcclx.all_to_all_v_dynamic(x, s, y, recv_splits=r.int())),
            ("a 0-d input", lambda: rcclx.all_to_all_v_dynamic(x[0, 0], s, y)),
            ("not a tensor", lambda: rcclx.all_to_all_v_dynamic([1, 2], s, y)),
        ]
        for name, call in bad:
            try:
                call()
                err = None
            except ValueError as e:  # the check itself: the call must raise ValueError
                err = str(e)
            self.check(f"ValueError: {name}", err is not None, err or "no ValueError raised")

        # The communicator is still usable after all of these.
        m = [[(s_ * world + d) % 5 + 1 for d in range(world)] for s_ in range(world)]
        self.packed_case("after-invalid-arguments", torch.float32, (4,), m, [sum(r_) for r_ in m],
                         [sum(m[s_][r_] for s_ in range(world)) for r_ in range(world)])

    # --- CUDA graph: dispatch + combine captured once, replayed with new routing each time ---
    def graph_replays(self, replays):
        world, H, dtype = self.world, 1024, torch.bfloat16
        ncap = 512
        mcap = ncap * world
        raw_in, inp = self.guarded(ncap, (H,), dtype, guard=1)
        raw_mid, mid = self.guarded(mcap, (H,), dtype)
        raw_back, back = self.guarded(ncap, (H,), dtype)
        send = torch.zeros(world, dtype=torch.int64, device=self.dev)
        recv = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        back_splits = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        rb = self.row_bytes((H,), dtype)

        def layer():
            rcclx.all_to_all_v_dynamic(inp, send, mid, recv_splits=recv)        # dispatch
            rcclx.all_to_all_v_dynamic(mid, recv, back, recv_splits=back_splits)  # combine
            self.world_calls += 2

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer()  # warm-up outside the capture, as PyTorch recommends
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer()
        torch.cuda.synchronize()
        host = random.Random(f"graph-{self.rank}")
        bad, first, zero_splits, total_rows = 0, None, 0, 0
        for it in range(replays):
            # The router, on the device: token count, destinations, splits = bincount.
            n_tok = host.randint(0, ncap)
            if it % 10 == 3:
                dest = torch.full((n_tok,), it % world, dtype=torch.int64, device=self.dev)
            else:
                dest = torch.randint(0, world, (n_tok,), device=self.dev, generator=self.gen)
            send.copy_(torch.bincount(dest, minlength=world))
            as_bytes(inp).copy_(self.rand_bytes(inp.numel() * inp.element_size()))
            graph.replay()
            # Reference: exchange the splits, read them back, all_to_all_single with lists.
            peer = torch.empty_like(send)
            dist.all_to_all_single(peer, send)
            in_l, out_l = send.tolist(), peer.tolist()
            ref = self.reference(inp, in_l, out_l)
            nin, nout = sum(in_l), sum(out_l)
            ok = (recv.tolist() == out_l and back_splits.tolist() == in_l
                  and torch.equal(as_bytes(mid[:nout]), as_bytes(ref))
                  and torch.equal(as_bytes(back[:nin]), as_bytes(inp[:nin])))
            zero_splits += in_l.count(0)
            total_rows += nout
            if not ok:
                bad += 1
                if first is None:
                    first = f"replay {it}: send {in_l} recv {recv.tolist()} want {out_l} back {back_splits.tolist()}"
        guards = (self.untouched(raw_mid, GUARD * rb, (GUARD + mcap) * rb)
                  and self.untouched(raw_back, GUARD * rb, (GUARD + ncap) * rb))
        self.check(f"cuda-graph dispatch+combine x{replays} replays, new splits and data each",
                   bad == 0 and guards,
                   f"bad replays {bad}{' first ' + first if first else ''}; guards untouched {guards}; "
                   f"zero splits seen {zero_splits}; rows received {total_rows}")
        del graph

    # --- a communicator without rcclx kernels ---
    def single_rank_group(self):
        me, world = self.rank, self.world
        groups = [dist.new_group([r]) for r in range(world)]  # every rank creates every group
        mine = groups[me]
        t = torch.ones(4, device=self.dev)
        dist.all_reduce(t, group=mine)  # creates the group's communicator
        comm, why = rcclx.comm_handle(mine)
        self.check("single-rank group: communicator readable", comm is not None, why or f"{comm:#x}")
        if comm is None:
            return
        x = torch.zeros(4, 2, dtype=torch.float32, device=self.dev)
        y = torch.zeros(4, 2, dtype=torch.float32, device=self.dev)
        s = torch.ones(1, dtype=torch.int64, device=self.dev)
        r = torch.zeros(1, dtype=torch.int64, device=self.dev)
        rc = self.fns["rcclxAllToAllvDynamicPacked"](x.data_ptr(), s.data_ptr(), y.data_ptr(), 4, 4, r.data_ptr(),
                                                     2, 7, comm, torch.cuda.current_stream().cuda_stream)
        self.check("single-rank group: rcclxAllToAllvDynamicPacked returns ncclInvalidUsage", rc == INVALID_USAGE,
                   f"rc={rc}")
        rc = self.fns["rcclxAllToAllvDynamic"](ptr_array([x]), s.data_ptr(), ptr_array([y]), 8, 8, r.data_ptr(),
                                               7, comm, torch.cuda.current_stream().cuda_stream)
        self.check("single-rank group: rcclxAllToAllvDynamic returns ncclInvalidUsage", rc == INVALID_USAGE,
                   f"rc={rc}")
        try:
            rcclx.all_to_all_v_dynamic(x, s, y, group=mine)
            err = None
        except RuntimeError as e:  # the check itself: the call must raise, naming the result
            err = str(e)
        self.check("single-rank group: all_to_all_v_dynamic raises RuntimeError naming ncclInvalidUsage",
                   err is not None and "ncclInvalidUsage" in err, err or "no RuntimeError raised")
        torch.cuda.synchronize()

    # --- low precision: wire="fp8" / "int8" (the ...Ex forms) ---
    def lowp_input(self, rows, row_shape, dtype, special):
        """Random rows (each its own magnitude) in a guarded buffer; `special`: infinities, NaN,
        zeros, f32-subnormal values, a zero row and a row under the codec's floor."""
        raw, t = self.guarded(rows, row_shape, dtype, guard=1)
        if rows == 0:
            return raw, t
        ones = [1] * len(row_shape)
        x = torch.randn(rows, *row_shape, device=self.dev, generator=self.gen)
        x *= torch.exp(2 * torch.randn(rows, *ones, device=self.dev, generator=self.gen))
        if special:
            flat = x.view(-1)
            n = max(1, flat.numel() // 64)
            at = torch.randint(0, flat.numel(), (n,), device=self.dev, generator=self.gen)
            vals = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-40, -3e-39],
                                device=self.dev)
            flat[at] = vals[torch.randint(0, len(vals), (n,), device=self.dev, generator=self.gen)]
            x[0] = 0.0
            if rows > 1:
                x[1] *= 1e-33
        t.copy_(x.to(dtype))
        return raw, t

    def lowp_expect(self, wire, rows, counts, coded):
        """The model of what arrives: decoded rows, or (codes, scales) for coded delivery."""
        if coded:
            return codec.fp8_encode(rows, self.fmt)
        return codec.received(wire, rows, counts, self.rank, self.fmt)

    def lowp_compare(self, wire, x, counts, got, got_scales):
        """(ok, detail) of the received rows `got` (and scales) against the model of `x`, the plain
        exchange's rows, `counts[p]` rows from source p."""
        if got_scales is not None:
            codes, scales = self.lowp_expect(wire, x, counts, True)
            bad_c = int((as_bytes(got) != as_bytes(codes)).sum())
            bad_s = int((got_scales.view(torch.int32) != scales.view(torch.int32)).sum())
            return bad_c == 0 and bad_s == 0, f"codes differing {bad_c}, scales differing {bad_s}"
        want = self.lowp_expect(wire, x, counts, False)
        bad, worst = codec.same_values(got, want)
        own_ok = True
        off = sum(max(c, 0) for c in counts[:self.rank])
        own = max(counts[self.rank], 0)
        if own:
            own_ok = torch.equal(as_bytes(got[off:off + own]), as_bytes(x[off:off + own]))
        _, err = codec.same_values(got, x)
        detail = (f"differing from the model {bad} (max |diff| {worst:.3g}), own rows exact {own_ok}, "
                  f"max |err| {err:.3g}")
        ok = bad == 0 and own_ok
        if wire == "int8" and got.numel():
            # Element by element: |got - x| <= amax / 127 of its block (finite x, peers' rows);
            # a block under the floor is flushed (|got - x| = |x| <= amax).
            peer = torch.ones(got.shape[0], dtype=torch.bool, device=self.dev)
            peer[off:off + own] = False
            xf, gf = x.float(), got.float()
            amax = codec.block_amax(x)
            bound = torch.where(amax < codec.AMAX_FLOOR, amax, amax / torch.full_like(amax, 127.0))
            fin = torch.isfinite(xf) & peer.view(-1, *[1] * (x.dim() - 1))
            over = int(((gf - xf).abs() > bound)[fin].sum())
            ok &= over == 0
            detail += f", over amax/127 {over}"
        return ok, detail

    def lowp_packed_case(self, name, wire, dtype, row_shape, mat, send_caps, recv_caps, coded=False, special=False):
        me, world = self.rank, self.world
        _, inp = self.lowp_input(send_caps[me], row_shape, dtype, special)
        before = inp.clone()
        row = 1
        for d in row_shape:
            row *= d
        blocks = -(-row // codec.BLOCK)
        raw_out, out = self.guarded(recv_caps[me], row_shape, self.fp8 if coded else dtype)
        raw_sc, sc = self.guarded(recv_caps[me], (blocks,), torch.float32) if coded else (None, None)
        splits = torch.tensor(mat[me], dtype=torch.int64, device=self.dev)
        recv = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        try:
            rcclx.all_to_all_v_dynamic(inp, splits, out, recv_splits=recv, wire=wire, output_scales=sc)
            err = None
            self.lowp_calls[ROUTE[wire]] += 1
        except RuntimeError as e:  # reported as the check's failure
            err = str(e)
        sent = [packed_sender(mat[s], send_caps[s]) for s in range(world)]
        want = packed_receiver([sent[p][me] for p in range(world)], recv_caps[me])
        ref = self.reference(inp, [c or 0 for c in sent[me]], [sent[p][me] or 0 for p in range(world)])
        kept = sum(c for c in want if c >= 0)
        got = recv.tolist()
        ok_data, detail = self.lowp_compare(wire, ref[:kept], [max(c, 0) for c in want], out[:kept],
                                            sc[:kept] if coded else None)
        rb = self.row_bytes(row_shape, out.dtype)
        ok_guard = self.untouched(raw_out, GUARD * rb, (GUARD + kept) * rb)
        if coded:
            ok_guard &= self.untouched(raw_sc, GUARD * 4 * blocks, (GUARD + kept) * 4 * blocks)
        ok_in = torch.equal(as_bytes(inp), as_bytes(before))
        ok = err is None and got == want and ok_data and ok_guard and ok_in
        shape = "x".join(str(d) for d in row_shape)
        text = f"send {mat[me]} caps N={send_caps[me]} M={recv_caps[me]} recv {got}; {detail}"
        if err is not None:
            text += f"; raised {err}"
        if got != want:
            text += f" WANT recv {want}"
        if not (ok_guard and ok_in):
            text += f"; outside-received-rows-untouched={ok_guard} input-unchanged={ok_in}"
        what = "fp8 coded" if coded else f"{wire} decoded"
        self.check(f"lowp packed {what} {name} {str(dtype)[6:]} row={shape}", ok, text)

    def lowp_packed_cases(self):
        world = self.world
        col = lambda m, r: sum(m[s][r] for s in range(world))  # noqa: E731
        for wire, coded in (("fp8", False), ("int8", False), ("fp8", True)):
            for dtype in LOWP_DTYPES:
                for shape in LOWP_ROWS:
                    rng = random.Random(f"lowp-{wire}-{coded}-{dtype}-{shape}")  # same on every rank
                    hi = 40 if shape[-1] >= 1000 else 200

                    def case(name, m, send_caps, recv_caps, special=False):
                        self.lowp_packed_case(name, wire, dtype, shape, m, send_caps, recv_caps, coded=coded,
                                              special=special)

                    m = self.random_matrix(rng, hi)
                    case("random", m, [sum(r) + rng.randint(0, 4) for r in m],
                         [col(m, r) + rng.randint(0, 4) for r in range(world)], special=True)
                    m = [[hi if d == s else 0 for d in range(world)] for s in range(world)]
                    case("self-only", m, [hi] * world, [hi] * world)
                    m = [[hi if d == 0 else 0 for d in range(world)] for _ in range(world)]
                    case("all-to-rank0", m, [hi] * world, [hi * world if r == 0 else 1 for r in range(world)])
                    m = [[rng.randint(1, hi) for _ in range(world)] for _ in range(world)]
                    case("recv-over-capacity", m, [sum(r) for r in m], [col(m, r) - 1 for r in range(world)])
            # Segments of several staging windows.
            rng = random.Random(f"lowp-large-{wire}-{coded}")
            m = [[rng.randint(1000, 3000) for _ in range(world)] for _ in range(world)]
            self.lowp_packed_case("multi-window", wire, torch.bfloat16, (4096,), m, [sum(r) for r in m],
                                  [col(m, r) for r in range(world)], coded=coded)

    def lowp_c_form_case(self, form, name, wire, dtype, row, mat, send_caps, recv_caps, coded=False):
        """The per-peer / Split Ex forms, counts in elements (`mat`, caps), rows of `row` elements."""
        me, world = self.rank, self.world
        f = self.fns_ex["rcclxAllToAllvDynamicEx" if form == "per-peer" else "rcclxAllToAllvDynamicSplitEx"]
        blocks = -(-row // codec.BLOCK)
        if form == "per-peer":
            sends = [self.lowp_input(send_caps[me], (), dtype, True)[1] for _ in range(world)]
            sent = [per_peer_sender(mat[s], send_caps[s]) for s in range(world)]
        else:
            sends = [self.lowp_input(send_caps[me], (), dtype, True)[1]]
            sent = [packed_sender(mat[s], send_caps[s]) for s in range(world)]
        # A segment that is not whole rows is not sent: its receiver reads -1.
        sent = [[c if c is None or c % row == 0 else None for c in r] for r in sent]
        want = per_peer_receiver([sent[p][me] for p in range(world)], recv_caps[me])
        recvs = [self.guarded(recv_caps[me], (), self.fp8 if coded else dtype) for _ in range(world)]
        cap_rows = recv_caps[me] // row
        scales = [self.guarded(cap_rows * blocks, (), torch.float32) for _ in range(world)] if coded else None
        counts = torch.tensor(mat[me], dtype=torch.int64, device=self.dev)
        actual = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        before = [t.clone() for t in sends]
        sendarg = ptr_array(sends) if form == "per-peer" else sends[0].data_ptr()
        opt, keep = options(wire, row, [t for _, t in scales] if coded else None)
        rc = f(sendarg, counts.data_ptr(), ptr_array([t for _, t in recvs]), send_caps[me], recv_caps[me],
               actual.data_ptr(), NCCL_TYPE[dtype], self.comm, torch.cuda.current_stream().cuda_stream,
               ctypes.byref(opt))
        del keep
        if rc == SUCCESS:
            self.lowp_calls[ROUTE[wire]] += 1
        send_eff = [c or 0 for c in sent[me]]
        if form == "per-peer":
            ref_in = torch.cat([sends[d][:send_eff[d]] for d in range(world)])
        else:
            # The Split form's segments sit back to back in the send buffer, sent or not.
            starts = [sum(mat[me][:d]) for d in range(world)]
            ref_in = torch.cat([sends[0][starts[d]:starts[d] + send_eff[d]] for d in range(world)])
        recv_eff = [sent[p][me] or 0 for p in range(world)]
        ref = self.reference(ref_in, send_eff, recv_eff)
        got = actual.tolist()
        ok_data = ok_guard = True
        details = []
        off = 0
        for p in range(world):
            n = want[p] if want[p] >= 0 else 0
            raw, t = recvs[p]
            if n:
                counts_p = [0] * world
                counts_p[p] = n // row
                x = ref[off:off + n].view(-1, row)
                got_sc = scales[p][1][:(n // row) * blocks].view(-1, blocks) if coded else None
                ok_p, d = self.lowp_compare(wire, x, counts_p, t[:n].view(-1, row), got_sc)
                ok_data &= ok_p
                if not ok_p:
                    details.append(f"from {p}: {d}")
            ok_guard &= self.untouched(raw, GUARD * t.element_size(), (GUARD + n) * t.element_size())
            if coded:
                ok_guard &= self.untouched(scales[p][0], GUARD * 4, (GUARD + (n // row) * blocks) * 4)
            off += recv_eff[p]
        ok_in = all(torch.equal(as_bytes(a), as_bytes(b)) for a, b in zip(sends, before))
        ok = rc == SUCCESS and got == want and ok_data and ok_guard and ok_in
        detail = f"send {mat[me]} maxSend={send_caps[me]} maxRecv={recv_caps[me]} recv {got}"
        if rc != SUCCESS:
            detail += f" rc={rc}"
        if got != want:
            detail += f" WANT {want}"
        if details or not (ok_guard and ok_in):
            detail += f"; {'; '.join(details)} outside-received-untouched={ok_guard} input-unchanged={ok_in}"
        what = "fp8 coded" if coded else f"{wire} decoded"
        self.check(f"lowp {form} {what} {name} {str(dtype)[6:]} row={row}", ok, detail)

    def lowp_c_form_cases(self):
        world = self.world
        for form in ("per-peer", "split"):
            for wire, coded in (("fp8", False), ("int8", False), ("fp8", True)):
                for dtype, row in ((torch.bfloat16, 4096), (torch.float32, 200), (torch.float16, 7)):
                    rng = random.Random(f"lowp-{form}-{wire}-{coded}-{dtype}")
                    hi = 20 if row >= 1000 else 100
                    m = [[0 if rng.random() < 0.2 else rng.randint(1, hi) * row for _ in range(world)]
                         for _ in range(world)]
                    big = max(max(r) for r in m)
                    send = [big] * world if form == "per-peer" else [sum(r) for r in m]
                    self.lowp_c_form_case(form, "random", wire, dtype, row, m, send, [big + row] * world, coded)
                # A segment of a row and a half (rank 0's last one): not sent, its receiver reads -1.
                row = 256
                m = [[(s + d + 1) * 3 * row for d in range(world)] for s in range(world)]
                m[0][world - 1] = 3 * row // 2
                big = max(max(r) for r in m)
                send = [big] * world if form == "per-peer" else [sum(r) for r in m]
                self.lowp_c_form_case(form, "partial-row", wire, torch.bfloat16, row, m, send, [big] * world, coded)

    def lowp_argument_errors(self):
        world = self.world
        pk = self.fns_ex["rcclxAllToAllvDynamicPackedEx"]
        pp = self.fns_ex["rcclxAllToAllvDynamicEx"]
        stream = torch.cuda.current_stream().cuda_stream
        buf = torch.zeros(64, 128, dtype=torch.float32, device=self.dev)
        out = torch.zeros(64, 128, dtype=torch.float32, device=self.dev)
        sc = torch.zeros(64, dtype=torch.float32, device=self.dev)
        counts = torch.ones(world, dtype=torch.int64, device=self.dev)
        actual = torch.zeros(world, dtype=torch.int64, device=self.dev)
        c = self.comm

        def packed(opt, datatype=7):
            return pk(buf.data_ptr(), counts.data_ptr(), out.data_ptr(), 64, 64, actual.data_ptr(), 128, datatype, c,
                      stream, ctypes.byref(opt[0]))

        null_arr = (ctypes.c_void_p * 1)(None)
        null_scales = Options(1, 128, ctypes.cast(null_arr, PTRS))
        peer_scales = (ctypes.c_void_p * world)(*([sc.data_ptr()] * (world - 1) + [None]))
        cases = [
            ("packed fp8, datatype int8", packed(options("fp8", 128), 0)),
            ("packed fp8, datatype float64", packed(options("fp8", 128), 8)),
            ("packed int8, datatype int64", packed(options("int8", 128), 4)),
            ("packed int8 with recvScales (coded delivery is FP8 only)", packed(options("int8", 128, [sc]))),
            ("packed fp8 coded, recvScales[0] NULL, capacity 64", packed((null_scales, None))),
            ("packed wire 7", packed(options(7, 128))),
            ("per-peer fp8 coded, one NULL scale pointer",
             pp(ptr_array([buf] * world), counts.data_ptr(), ptr_array([out] * world), 64 * 128, 64 * 128,
                actual.data_ptr(), 7, c, stream,
                ctypes.byref(Options(1, 128, ctypes.cast(peer_scales, PTRS))))),
        ]
        for name, rc in cases:
            self.check(f"lowp invalid argument: {name}", rc == INVALID_ARGUMENT, f"rc={rc} (want {INVALID_ARGUMENT})")

        # NULL options and wire plain are the plain call (route alltoallv.dynamic), bit for bit.
        for label, opt in (("NULL options", None), ("wire plain", Options(0, 0, None))):
            me = self.rank
            m = [[(s * world + d) % 7 + 1 for d in range(world)] for s in range(world)]
            _, inp = self.random_input(sum(m[me]), (33,), torch.bfloat16)
            n_in = sum(m[me])
            n_out = sum(m[s][me] for s in range(world))
            out2 = torch.empty(n_out, 33, dtype=torch.bfloat16, device=self.dev)
            splits = torch.tensor(m[me], dtype=torch.int64, device=self.dev)
            rc = pk(inp.data_ptr(), splits.data_ptr(), out2.data_ptr(), n_in, n_out, actual.data_ptr(), 33, 9, c,
                    stream, None if opt is None else ctypes.byref(opt))
            self.world_calls += rc == SUCCESS
            ref = self.reference(inp, m[me], [m[s][me] for s in range(world)])
            ok = rc == SUCCESS and torch.equal(as_bytes(out2), as_bytes(ref))
            self.check(f"lowp packed Ex with {label} = the plain call", ok, f"rc={rc}")

        # The Python checks (host only).
        x = torch.zeros(8, 256, dtype=torch.bfloat16, device=self.dev)
        y = torch.zeros(16, 256, dtype=torch.bfloat16, device=self.dev)
        y8 = torch.zeros(16, 256, dtype=self.fp8, device=self.dev)
        s = torch.zeros(world, dtype=torch.int64, device=self.dev)
        sc2 = torch.zeros(16, 2, dtype=torch.float32, device=self.dev)
        inside = y8.view(torch.uint8).view(-1)[:128].view(torch.float32).view(16, 2)
        bad = [
            ("wire 'fp4'", lambda: rcclx.all_to_all_v_dynamic(x, s, y, wire="fp4")),
            ("wire with an int64 input", lambda: rcclx.all_to_all_v_dynamic(
                torch.zeros(8, 4, dtype=torch.int64, device=self.dev), s,
                torch.zeros(8, 4, dtype=torch.int64, device=self.dev), wire="fp8")),
            ("output_scales with wire int8", lambda: rcclx.all_to_all_v_dynamic(x, s, y8, wire="int8",
                                                                                 output_scales=sc2)),
            ("output_scales without a wire", lambda: rcclx.all_to_all_v_dynamic(x, s, y8, output_scales=sc2)),
            ("coded output in bf16", lambda: rcclx.all_to_all_v_dynamic(x, s, y, wire="fp8", output_scales=sc2)),
            ("decoded output in fp8", lambda: rcclx.all_to_all_v_dynamic(x, s, y8, wire="fp8")),
            ("output_scales of 3 blocks a row", lambda: rcclx.all_to_all_v_dynamic(
                x, s, y8, wire="fp8", output_scales=torch.zeros(16, 3, device=self.dev))),
            ("output_scales on the CPU", lambda: rcclx.all_to_all_v_dynamic(x, s, y8, wire="fp8",
                                                                             output_scales=sc2.cpu())),
            ("output_scales inside output", lambda: rcclx.all_to_all_v_dynamic(
                x, s, y8, wire="fp8", output_scales=inside)),
        ]
        for name, call in bad:
            try:
                call()
                err = None
            except ValueError as e:  # the check itself: the call must raise ValueError
                err = str(e)
            self.check(f"lowp ValueError: {name}", err is not None, err or "no ValueError raised")

    def lowp_graph_replays(self, replays):
        """An FP8 dispatch + plain combine captured once, replayed with new splits and data."""
        world, H, dtype = self.world, 1024, torch.bfloat16
        ncap = 512
        _, inp = self.guarded(ncap, (H,), dtype, guard=1)
        raw_mid, mid = self.guarded(ncap * world, (H,), dtype)
        raw_back, back = self.guarded(ncap, (H,), dtype)
        send = torch.zeros(world, dtype=torch.int64, device=self.dev)
        recv = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        back_splits = torch.full((world,), 777, dtype=torch.int64, device=self.dev)
        rb = self.row_bytes((H,), dtype)

        def layer():
            rcclx.all_to_all_v_dynamic(inp, send, mid, recv_splits=recv, wire="fp8")
            rcclx.all_to_all_v_dynamic(mid, recv, back, recv_splits=back_splits)
            self.lowp_calls[ROUTE["fp8"]] += 1
            self.world_calls += 1

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer()
        torch.cuda.synchronize()
        host = random.Random(f"lowp-graph-{self.rank}")
        bad, first = 0, None
        for it in range(replays):
            n_tok = host.randint(0, ncap)
            if it % 10 == 3:
                dest = torch.full((n_tok,), it % world, dtype=torch.int64, device=self.dev)
            else:
                dest = torch.randint(0, world, (n_tok,), device=self.dev, generator=self.gen)
            send.copy_(torch.bincount(dest, minlength=world))
            inp.copy_(self.lowp_input(ncap, (H,), dtype, it % 7 == 0)[1])
            graph.replay()
            peer = torch.empty_like(send)
            dist.all_to_all_single(peer, send)
            in_l, out_l = send.tolist(), peer.tolist()
            ref = self.reference(inp, in_l, out_l)
            nin, nout = sum(in_l), sum(out_l)
            ok_mid, d_mid = self.lowp_compare("fp8", ref, out_l, mid[:nout], None)
            # The combine moves the decoded rows back exactly: every row of a peer went through
            # the codec once, the own rows never.
            ok_back, d_back = self.lowp_compare("fp8", inp[:nin], in_l, back[:nin], None)
            ok = recv.tolist() == out_l and back_splits.tolist() == in_l and ok_mid and ok_back
            if not ok:
                bad += 1
                if first is None:
                    first = (f"replay {it}: send {in_l} recv {recv.tolist()} want {out_l}; dispatch {d_mid}; "
                             f"combine {d_back}")
        guards = (self.untouched(raw_mid, GUARD * rb, (GUARD + ncap * world) * rb)
                  and self.untouched(raw_back, GUARD * rb, (GUARD + ncap) * rb))
        self.check(f"lowp cuda-graph fp8 dispatch + plain combine x{replays} replays, new splits and data each",
                   bad == 0 and guards,
                   f"bad replays {bad}{' first ' + first if first else ''}; guards untouched {guards}")
        del graph

    def lowp(self):
        try:
            self.fns_ex = c_functions(EX_SIGNATURES)
        except AttributeError as e:  # reported as a failure: this checkout's library has them
            self.check("rcclx exports the ...Ex forms (low-precision AllToAllv)", False, str(e))
            return
        self.fmt = codec.fp8_format(self.dev)
        self.fp8 = codec.FP8[self.fmt][0]
        self.lowp_packed_cases()
        self.lowp_c_form_cases()
        self.lowp_argument_errors()
        self.lowp_graph_replays(LOWP_REPLAYS)

    def route_stats(self):
        torch.cuda.synchronize()
        st = rcclx.stats(dist.group.WORLD)
        comm = st.get("comm") or {}
        for route, made in [("alltoallv.dynamic", self.world_calls)] + sorted(self.lowp_calls.items()):
            calls = comm.get(route, {}).get("calls", 0)
            self.check(f"rcclx.stats: route {route} counts every successful call on the world group",
                       calls == made, f"counted {calls}, made {made}; "
                       f"comm_error={st.get('comm_error')}; process routes {st.get('process')}")

    def run(self):
        active = rcclx.is_active()
        self.check("rcclx loaded (is_active)", active, "set LD_PRELOAD=librcclx.so" if not active else "")
        if not active:
            return
        self.fns = c_functions()
        t = torch.ones(1, device=self.dev)
        dist.all_reduce(t)  # the world communicator exists and is set up
        comm, why = rcclx.comm_handle(dist.group.WORLD)
        self.check("world communicator readable", comm is not None, why or f"{comm:#x}")
        if comm is None:
            return
        self.comm = comm
        self.packed_cases()
        self.bad_count_cases()
        self.c_form_cases()
        self.argument_errors()
        self.graph_replays(REPLAYS)
        self.lowp()
        self.route_stats()
        self.single_rank_group()


def main():
    test = Test()
    test.run()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"rank{test.rank}: {test.passed} passed, {test.failed} failed", flush=True)
    sys.exit(1 if test.failed else 0)


if __name__ == "__main__":
    main()
