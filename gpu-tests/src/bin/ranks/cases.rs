//! The `dda` suite: every intercepted collective (AllReduce, ReduceScatter, AllGather, AllToAll,
//! Broadcast and Reduce from every root) on rcclx's DDA kernels at this rank count, every type
//! and op, around the crossovers the clique agreed, in and out of place, element-aligned but not
//! 16-byte-aligned buffers too, NULL root-only buffers off the root; each rank's output checked
//! bit for bit against the CPU model (`rcclx_gpu_tests::reduce`; off a Reduce's root: nothing
//! written), and ranks that must agree compared with each other (the parent does that, from the
//! hashes).
//!
//! Also the buffer images every suite of collectives shares ([`Image`]).

use std::ops::Range;

use rcclx::collective::{RootOnly, Shape};
use rcclx::intercept::{CallDesc, Coll, Policies};
use rcclx::types::{ncclDataType_t, ncclRedOp_t};
use rcclx_gpu_tests::fnv::fnv1a;
use rcclx_gpu_tests::reduce::{self, Op, Ty};
use rcclx_gpu_tests::{Fail, watchdog};

use crate::device::{self, GUARD, Ranks, grown, kernel_for, report, route_calls};
use crate::opts::Opts;

/// One input value in this many is a special one (NaN, infinities, signed zeros, extremes).
pub const SPECIAL_EVERY: u64 = 64;

/// One call of a collective, as every rank issues it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub coll: Coll,
    pub ty: Ty,
    /// `Sum` for AllGather and AllToAll.
    pub op: Op,
    /// The call's count argument (per rank for AllGather, ReduceScatter, AllToAll).
    pub count: usize,
    pub inplace: bool,
    /// Bytes added to both buffers' offsets: a multiple of the element size below 16, so that
    /// the kernels' element-wise paths for buffers that are not 16-byte aligned run too.
    pub shift: usize,
    /// Rooted collectives (Broadcast, Reduce): the root (0 for the others).
    pub root: usize,
    /// Rooted collectives out of place: the other ranks pass NULL for the buffer NCCL uses on
    /// the root only (`Spec::root_only`: Broadcast's send, Reduce's receive buffer).
    pub null_off_root: bool,
}

impl Case {
    pub fn name(&self) -> String {
        let op = if self.coll.spec().reduces { self.op.name() } else { "-" };
        format!(
            "{} {} {op} {} {}{}{}",
            self.coll.name(),
            self.ty.name(),
            self.count,
            if self.inplace { "in-place" } else { "out-of-place" },
            if self.shift > 0 { format!(" +{}B", self.shift) } else { String::new() },
            if self.coll.spec().rooted() {
                let null = match self.coll.spec().root_only {
                    Some(RootOnly::Send) if self.null_off_root => " null-send",
                    Some(RootOnly::Recv) if self.null_off_root => " null-recv",
                    _ => "",
                };
                format!(" root {}{null}", self.root)
            } else {
                String::new()
            }
        )
    }

    pub fn call(&self) -> CallDesc {
        CallDesc {
            coll: self.coll,
            count: self.count,
            dtype: ncclDataType_t(self.ty.nccl()),
            op: ncclRedOp_t(self.op.nccl()),
            root: self.root as i32,
        }
    }

    /// Elements of one rank's input, and of rank `r`'s output: a Reduce writes nothing off the
    /// root, so there its output out of place is empty (the guards around it catch a write) and
    /// in place is its input, which must come back unchanged.
    pub fn in_len(&self, n: usize) -> usize {
        match self.coll {
            Coll::AllReduce | Coll::AllGather | Coll::Broadcast | Coll::Reduce => self.count,
            Coll::ReduceScatter | Coll::AllToAll => self.count * n,
        }
    }
    pub fn out_len(&self, n: usize, r: usize) -> usize {
        match self.coll {
            Coll::Reduce if r != self.root && !self.inplace => 0,
            Coll::AllReduce | Coll::ReduceScatter | Coll::Broadcast | Coll::Reduce => self.count,
            Coll::AllGather | Coll::AllToAll => self.count * n,
        }
    }

    /// Whether rank `r` passes NULL for the root-only buffer.
    pub fn null_at(&self, r: usize) -> (bool, bool) {
        let off = self.null_off_root && r != self.root;
        match self.coll.spec().root_only {
            Some(RootOnly::Send) => (off, false),
            Some(RootOnly::Recv) => (false, off),
            None => (false, false),
        }
    }

    /// The seed of rank `r`'s input.
    pub fn seed(&self, base: u64, r: usize) -> u64 {
        fnv1a(self.name().as_bytes()) ^ base.wrapping_mul(0x9e37_79b9) ^ (r as u64).wrapping_mul(0x1000_0000_01b3)
    }

    /// Whether every rank's output is the same (AllReduce, AllGather, Broadcast; not Reduce,
    /// whose output is the root's only).
    pub fn shared_output(&self) -> bool {
        matches!(self.coll, Coll::AllReduce | Coll::AllGather | Coll::Broadcast)
    }

    /// Which ranks must produce identical outputs: all of them (group 0), or none (each its own).
    pub fn group(&self, rank: usize) -> usize {
        if self.shared_output() { 0 } else { rank }
    }

    /// How outputs are compared: as the reduced type (any NaN matches any NaN: the hardware's
    /// payloads), or byte for byte (data movement copies bytes, NaN payloads included).
    pub fn compare_as(&self) -> Ty {
        if self.coll.spec().reduces { self.ty } else { Ty::U8 }
    }
}

/// Where a case's buffers lie in a rank's arena: guards of 0xFF around everything, NCCL's
/// in-place layouts (AllGather: send = recv + rank * count; ReduceScatter: recv = send + rank *
/// count; AllReduce and AllToAll: send = recv).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub total: usize,
    pub send: usize,
    pub recv: usize,
    pub out: Range<usize>,
    /// Where the input is placed in the image.
    pub input: Range<usize>,
    /// The guard ranges (0xFF before and after).
    pub guards: Vec<Range<usize>>,
    /// Out of place: the input must come back unchanged.
    pub inplace: bool,
}

impl Image {
    /// `in_b` / `out_b` bytes of input and output of rank `rank` for `coll`.
    pub fn new(coll: Coll, inplace: bool, rank: usize, in_b: usize, out_b: usize, shift: usize) -> Image {
        let base = GUARD + shift;
        if !inplace {
            let recv = (base + in_b + GUARD).next_multiple_of(256) + shift;
            let total = recv + out_b + GUARD;
            return Image {
                total,
                send: base,
                recv,
                out: recv..recv + out_b,
                input: base..base + in_b,
                guards: vec![0..base, base + in_b..recv, recv + out_b..total],
                inplace,
            };
        }
        let main = in_b.max(out_b);
        let total = base + main + GUARD;
        let (send, recv) = match coll {
            Coll::AllGather => (base + rank * in_b, base),
            Coll::ReduceScatter => (base, base + rank * out_b),
            _ => (base, base),
        };
        Image {
            total,
            send,
            recv,
            out: recv..recv + out_b,
            input: send..send + in_b,
            guards: vec![0..base, base + main..total],
            inplace,
        }
    }

    /// The bytes to upload: guards, the input where it goes, `poison` everywhere else.
    pub fn build(&self, input: &[u8], poison: u8) -> Vec<u8> {
        let mut v = vec![poison; self.total];
        for g in &self.guards {
            v[g.clone()].fill(0xFF);
        }
        v[self.input.clone()].copy_from_slice(input);
        v
    }

    /// The output bytes of a downloaded image, after checking the guards and (out of place)
    /// that the input is unchanged.
    pub fn check<'a>(&self, got: &'a [u8], input: &[u8]) -> Result<&'a [u8], String> {
        for g in &self.guards {
            if let Some(i) = got[g.clone()].iter().position(|&b| b != 0xFF) {
                return Err(format!("write into a guard at byte {} of the image", g.start + i));
            }
        }
        if !self.inplace && got[self.input.clone()] != *input {
            return Err("the input buffer changed".into());
        }
        Ok(&got[self.out.clone()])
    }
}

/// The expected output of rank `r` given every rank's input.
pub fn expected(case: &Case, n: usize, r: usize, inputs: &[Vec<u8>]) -> Vec<u8> {
    let s = case.ty.size();
    let cb = case.count * s;
    match case.coll {
        // Off a Reduce's root: nothing (out of place) or its own input, unchanged (in place).
        Coll::Reduce if r != case.root => inputs[r][..case.out_len(n, r) * s].to_vec(),
        Coll::AllReduce | Coll::Reduce => {
            let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            let mut out = vec![0u8; cb];
            reduce::reduce(case.ty, case.op, &ins, &mut out);
            out
        }
        Coll::ReduceScatter => {
            let ins: Vec<&[u8]> = inputs.iter().map(|v| &v[r * cb..(r + 1) * cb]).collect();
            let mut out = vec![0u8; cb];
            reduce::reduce(case.ty, case.op, &ins, &mut out);
            out
        }
        Coll::AllGather => inputs.concat(),
        Coll::AllToAll => (0..n).flat_map(|p| inputs[p][r * cb..(r + 1) * cb].to_vec()).collect(),
        Coll::Broadcast => inputs[case.root].clone(),
    }
}

/// Every rank's input of `case` (in parallel: the large cases move megabytes per rank).
pub fn inputs(case: &Case, n: usize, base_seed: u64) -> Vec<Vec<u8>> {
    let len = case.in_len(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| s.spawn(move || reduce::generate(case.ty, len, case.seed(base_seed, r), SPECIAL_EVERY)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("generator panicked")).collect()
    })
}

/// The cases of the suite for `n` ranks and the clique's policies.
pub fn dda_cases(n: usize, p: &Policies, quick: bool, _seed: u64) -> Vec<Case> {
    let (types, ops): (Vec<Ty>, Vec<Op>) = if quick {
        (vec![Ty::F32, Ty::Bf16, Ty::I64], vec![Op::Sum, Op::Max])
    } else {
        (Ty::ALL.to_vec(), Op::ALL.to_vec())
    };
    // Types and ops of the large (megabyte) sizes, where the host model costs time.
    let large_types = if quick { vec![Ty::F32] } else { vec![Ty::F32, Ty::Bf16, Ty::I64, Ty::U8] };
    let large_ops = if quick { vec![Op::Sum] } else { vec![Op::Sum, Op::Avg, Op::Min] };
    let mut out = Vec::new();
    for coll in Coll::ALL {
        let reduces = coll.spec().reduces;
        let q = *p.of(coll);
        // A two-shot collective whose one-shot limit is below its DDA limit runs both.
        let both = coll.spec().two_shot && q.one_shot_max < q.max;
        // Data movement reads bytes whatever the type: a few element sizes are enough.
        let types: Vec<Ty> = if reduces {
            types.clone()
        } else if quick {
            vec![Ty::F32]
        } else {
            vec![Ty::I8, Ty::F16, Ty::F32, Ty::F64]
        };
        let ops: Vec<Op> = if reduces { ops.clone() } else { vec![Op::Sum] };
        for &ty in &types {
            let s = ty.size() as u64;
            // Bytes of the whole message or of one rank's part, per count: the limits are in
            // those units (intercept::decide).
            let (ll, max_total) = (p.ll_max, q.max);
            let per_count_total = if coll.spec().shape == Shape::Whole { s } else { s * n as u64 };
            let ll_count = ll / s;
            let mut small = vec![1, 7, 255, ll_count, ll_count + 1];
            let mut large = Vec::new();
            if both {
                let flat = q.one_shot_max / s;
                small.extend([((ll_count + flat) / 2) | 1, flat, flat + 3]);
                large.extend([((flat + q.max / s) / 2) | 1, q.max / s]);
            } else {
                let flat = max_total / per_count_total;
                small.push(((ll_count + 1 + flat.min(4 * ll_count)) / 2) | 1);
                large.push(flat);
            }
            // With LL128 on (`--ll128-max`), the one-shot takes over just past its limit.
            let past_ll128 = (q.ll128_max > 0).then(|| q.ll128_max / per_count_total + 1);
            large.extend(past_ll128);
            if quick {
                small = vec![7, ll_count + 1];
                if both {
                    small.push(q.one_shot_max / s + 3);
                }
                small.extend(past_ll128);
                large.clear();
            }
            let large_ok = large_types.contains(&ty);
            for &op in &ops {
                let counts: Vec<u64> = small
                    .iter()
                    .copied()
                    .chain(if large_ok && large_ops.contains(&op) { large.clone() } else { vec![] })
                    .collect();
                for (i, &count) in counts.iter().enumerate() {
                    // Past its limit a size forwards, unless it is small enough for LL.
                    if count == 0 || (count * s > ll && count * per_count_total > max_total) {
                        continue;
                    }
                    for inplace in [false, true] {
                        let shift = if i % 2 == 1 && ty.size() < 16 && !quick { ty.size() * (1 + i % 3) } else { 0 };
                        // Rooted: roots other than 0 too (each rank at some size), and NULL
                        // root-only buffers off the root (every out-of-place call with --quick,
                        // whose sizes may leave one count in range).
                        let rooted = coll.spec().rooted();
                        let root = if rooted { (i + inplace as usize + ty as usize + op as usize) % n } else { 0 };
                        let null_off_root = rooted && !inplace && (i % 2 == 1 || quick);
                        out.push(Case {
                            coll,
                            ty,
                            op,
                            count: count as usize,
                            inplace,
                            shift: shift % 16,
                            root,
                            null_off_root,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Lays out every local rank's buffers of `case` (rank r's input from `inputs[r]`, `poison` in
/// what the call writes) in its arena: each rank's image and the arena's address.
pub fn upload_images(
    dev: &mut Ranks,
    case: &Case,
    inputs: &[Vec<u8>],
    poison: u8,
) -> Result<Vec<(Image, rcclx::gpu::DevicePtr)>, Fail> {
    let n = dev.nranks();
    let s = case.ty.size();
    let mut images = Vec::new();
    for k in 0..dev.local() {
        let r = dev.world.ranks[k];
        let img = Image::new(case.coll, case.inplace, r, case.in_len(n) * s, case.out_len(n, r) * s, case.shift);
        let base = dev.arena(k, img.total)?;
        dev.upload(k, 0, &img.build(&inputs[r], poison))?;
        images.push((img, base));
    }
    Ok(images)
}

/// Runs one case on every local rank and reports each rank's result; `index` names it.
pub fn run_case(dev: &mut Ranks, index: usize, case: &Case, base_seed: u64) -> Result<(), Fail> {
    let n = dev.nranks();
    let name = case.name();
    if dev.announcer {
        rcclx_gpu_tests::children::say(&format!("CASE {index} {name}"));
    }
    watchdog::progress(&format!("case {index} {name} (inputs)"));
    let ins = inputs(case, n, base_seed);
    let poison = (case.seed(base_seed, 99) >> 8) as u8;
    let images = upload_images(dev, case, &ins, poison)?;
    let before: Vec<Vec<u64>> = (0..dev.local()).map(|k| route_calls(dev.world.comms[k])).collect();
    watchdog::progress(&format!("case {index} {name} (run)"));
    let call = case.call();
    let rets: Vec<_> = images
        .iter()
        .enumerate()
        .map(|(k, (img, base))| {
            let (null_send, null_recv) = case.null_at(dev.world.ranks[k]);
            let ptr = |null: bool, at: usize| if null { rcclx::gpu::DevicePtr(0) } else { base.offset(at) };
            dev.collective(k, call, ptr(null_send, img.send), ptr(null_recv, img.recv))
        })
        .collect();
    let kernel = kernel_for(&dev.world.cliques[0], &call).1;
    dev.wait_all(&|_| format!("case {index} {name}, kernel {kernel}"))?;
    watchdog::progress(&format!("case {index} {name} (check)"));
    for (k, (img, _)) in images.iter().enumerate() {
        let r = dev.world.ranks[k];
        let route = grown(&before[k], &route_calls(dev.world.comms[k]));
        let got = dev.download(k, 0, img.total)?;
        let want = expected(case, n, r, &ins);
        let (ok, h, detail) = match img.check(&got, &ins[r]) {
            Err(e) => (false, "-".to_string(), e),
            Ok(out) => {
                let ty = case.compare_as();
                let (bad, first) = reduce::mismatches(ty, out, &want);
                let detail = match first {
                    None => format!("{} elements exact", case.out_len(n, r)),
                    Some(i) => format!(
                        "{bad} of {} {} differ from the model; first at {i}: got {} want {}",
                        out.len() / ty.size(),
                        if ty == case.ty { "elements" } else { "bytes" },
                        reduce::show(ty, out, i),
                        reduce::show(ty, &want, i)
                    ),
                };
                (bad == 0, device::hash(out), detail)
            }
        };
        let ret = &rets[k];
        let (ok, detail) =
            if !ret.is_ok() { (false, format!("the call returned {} ({detail})", ret.0)) } else { (ok, detail) };
        let ok = ok && route != "forwarded" && route != "none";
        report(index, r, ok, case.group(r), &h, &route, &detail);
    }
    Ok(())
}

/// The suite: every case of [`dda_cases`] in order.
pub fn run(dev: &mut Ranks, opts: &Opts) -> Result<(), Fail> {
    let p = dev.world.cliques[0].facts.policies;
    let all = dda_cases(dev.nranks(), &p, opts.quick, opts.seed);
    for (i, c) in all.iter().enumerate() {
        run_case(dev, i, c, opts.seed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcclx::config::Config;
    use rcclx::intercept::{CommFacts, Kernel, Route, decide};

    fn facts(n: usize) -> CommFacts {
        CommFacts {
            nranks: n,
            hosts: 1,
            rank_step: 1,
            policies: Policies::for_comm(&Config::default(), n, rcclx::clique::local_fabric()),
        }
    }

    /// At every rank count the cases reach every DDA algorithm of every collective, and none is
    /// forwarded (with the default thresholds of that rank count).
    #[test]
    fn cases_cover_every_algorithm_and_are_never_forwarded() {
        for n in 2..=8 {
            let f = facts(n);
            for quick in [false, true] {
                let cases = dda_cases(n, &f.policies, quick, 1);
                let mut seen = std::collections::HashSet::new();
                for c in &cases {
                    match decide(&c.call(), &f) {
                        Route::Own(a) => {
                            seen.insert((c.coll, a));
                        }
                        r => panic!("n={n} {}: {r:?}", c.name()),
                    }
                    assert!(c.shift % c.ty.size() == 0 && c.shift < 16);
                }
                for coll in Coll::ALL {
                    let q = f.policies.of(coll);
                    // Flat exists where the limit passes LL's (Broadcast at 2 ranks: LL only).
                    let flat = q.max > f.policies.ll_max * if coll.spec().shape == Shape::Whole { 1 } else { n as u64 };
                    assert!(seen.contains(&(coll, Kernel::LL)), "n={n} {coll:?}");
                    assert!(!flat || seen.contains(&(coll, Kernel::FLAT)), "n={n} {coll:?}");
                    if coll.spec().two_shot && q.one_shot_max < q.max {
                        assert!(seen.contains(&(coll, Kernel::TWO_SHOT)), "n={n}: no two-shot case");
                    }
                }
                for coll in Coll::ALL.into_iter().filter(|c| c.spec().rooted()) {
                    let of = |f: &dyn Fn(&Case) -> bool| cases.iter().any(|c| c.coll == coll && f(c));
                    // Every root at full size; a NULL root-only buffer off the root, and in place.
                    for root in 0..n {
                        assert!(quick || of(&|c| c.root == root), "n={n} {coll:?}: no case with root {root}");
                    }
                    assert!(of(&|c| c.null_off_root), "n={n} {coll:?}: no NULL off the root");
                    assert!(of(&|c| c.inplace) && of(&|c| c.count % 2 == 1), "n={n} {coll:?}");
                }
                if !quick {
                    // Every type and op of the reductions.
                    for coll in [Coll::AllReduce, Coll::ReduceScatter, Coll::Reduce] {
                        for ty in Ty::ALL {
                            for op in Op::ALL {
                                assert!(
                                    cases.iter().any(|c| c.coll == coll && c.ty == ty && c.op == op),
                                    "{coll:?} {ty:?} {op:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn images_keep_nccl_layouts_and_guards() {
        // In-place AllGather: the input is rank r's block of the output.
        let im = Image::new(Coll::AllGather, true, 2, 12, 48, 0);
        assert_eq!(im.send - im.recv, 24);
        assert_eq!(im.out, im.recv..im.recv + 48);
        // In-place ReduceScatter: the output is rank r's block of the input.
        let im = Image::new(Coll::ReduceScatter, true, 3, 64, 16, 4);
        assert_eq!(im.recv - im.send, 48);
        assert_eq!(im.send % 16, 4, "shifted off 16-byte alignment");
        // Out of place: separate, both shifted alike, guards between.
        let im = Image::new(Coll::AllReduce, false, 0, 40, 40, 8);
        assert!(im.recv >= im.send + 40 + GUARD && im.recv % 16 == 8 && im.send % 16 == 8);
        let input: Vec<u8> = (0..40).collect();
        let mut v = im.build(&input, 0xEE);
        let want = [0xEEu8; 40];
        assert_eq!(im.check(&v, &input).unwrap(), &want[..]);
        v[im.recv + 40] = 0;
        assert!(im.check(&v, &input).is_err(), "a write past the output");
        let mut v = im.build(&input, 0xEE);
        v[im.send] ^= 1;
        assert!(im.check(&v, &input).is_err(), "the input changed");
    }

    #[test]
    fn expected_outputs_follow_the_collective() {
        let n = 3;
        let c = Case {
            coll: Coll::AllToAll,
            ty: Ty::U8,
            op: Op::Sum,
            count: 2,
            inplace: false,
            shift: 0,
            root: 0,
            null_off_root: false,
        };
        let ins: Vec<Vec<u8>> = (0..n).map(|r| (0..6).map(|i| (10 * r + i) as u8).collect()).collect();
        // Rank 1 gets block 1 of every rank.
        assert_eq!(expected(&c, n, 1, &ins), [2, 3, 12, 13, 22, 23]);
        let c = Case { coll: Coll::ReduceScatter, ..c };
        assert_eq!(expected(&c, n, 2, &ins), [4 + 14 + 24, 5 + 15 + 25]);
        let c = Case { coll: Coll::AllGather, count: 6, ..c };
        assert_eq!(expected(&c, n, 0, &ins).len(), 18);
        // Reduce: the sum on the root; off it nothing written, or (in place) the input kept.
        let c = Case { coll: Coll::Reduce, count: 6, root: 1, ..c };
        assert_eq!(expected(&c, n, 1, &ins), [30, 33, 36, 39, 42, 45]);
        assert_eq!((c.out_len(n, 1), c.out_len(n, 0)), (6, 0));
        assert!(expected(&c, n, 0, &ins).is_empty());
        let c = Case { inplace: true, ..c };
        assert_eq!(expected(&c, n, 2, &ins), ins[2]);
        let c = Case { inplace: false, null_off_root: true, ..c };
        assert_eq!((c.null_at(0), c.null_at(1)), ((false, true), (false, false)));
        let c = Case { coll: Coll::Broadcast, ..c };
        assert_eq!((c.null_at(0), c.null_at(1)), ((true, false), (false, false)));
    }
}
