//! The CPU model of rcclx's DDA reductions (`RcclxRed` in `hip_kernels/common.cuh`), for any
//! rank count: what every rank's output of an AllReduce or ReduceScatter must be, bit for bit.
//!
//! Layer: leaf (pure arithmetic). Depends only on `half`.
//!
//! The order is the one `docs/ARCHITECTURE.md` documents for every DDA algorithm (LL, flat and
//! two-shot alike) and every rank count: ranks 0, 1, ..., n-1, the first term taken as it is
//! (after AVG's pre-multiply), each next one folded in with one operation in the element type:
//! * integers wrap (`sum`, `prod`), `max`/`min` compare, `avg` divides the wrapped sum by `n`
//!   (truncating toward zero);
//! * f32/f64: one IEEE operation per step; `avg` multiplies the first term by `s = 1/n` (`s`
//!   rounded to the type) and folds each next term as `fma(x, s, acc)`;
//! * f16/bf16: each step in f32, rounded to the type (to nearest, ties to even: the same as the
//!   GPU's native half operations, since f32 holds more than twice their precision); `avg`
//!   multiplies every term by `s` (rounded to the type) before adding it;
//! * `max`/`min` of floats: a NaN loses to a number, two NaNs give NaN, `+0 > -0`.
//!
//! [`same_bits`] compares outputs: integers bit for bit, floats bit for bit except that any NaN
//! matches any NaN (the GPU's NaN payloads are the hardware's, not the model's).

use half::{bf16, f16};

/// An element type of the reductions, by its `ncclDataType_t` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
}

impl Ty {
    /// In `ncclDataType_t` order (0..=9).
    pub const ALL: [Ty; 10] = [Ty::I8, Ty::U8, Ty::I32, Ty::U32, Ty::I64, Ty::U64, Ty::F16, Ty::F32, Ty::F64, Ty::Bf16];

    pub fn nccl(self) -> i32 {
        Ty::ALL.iter().position(|&t| t == self).unwrap_or(0) as i32
    }

    pub fn size(self) -> usize {
        match self {
            Ty::I8 | Ty::U8 => 1,
            Ty::F16 | Ty::Bf16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::F32 | Ty::F64 | Ty::Bf16)
    }

    pub fn name(self) -> &'static str {
        match self {
            Ty::I8 => "i8",
            Ty::U8 => "u8",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::I64 => "i64",
            Ty::U64 => "u64",
            Ty::F16 => "f16",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::Bf16 => "bf16",
        }
    }
}

/// A reduction op, by its `ncclRedOp_t` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg];

    pub fn nccl(self) -> i32 {
        Op::ALL.iter().position(|&o| o == self).unwrap_or(0) as i32
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Max => "max",
            Op::Min => "min",
            Op::Avg => "avg",
        }
    }
}

/// Max (`max`) or min of two floats as the GPU computes them: a NaN loses to a number, two
/// NaNs give a NaN, `+0 > -0` (`total_cmp` orders every non-NaN value so, -0 below +0).
fn pick(a: f64, b: f64, max: bool) -> f64 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() {
        return a;
    }
    let a_wins = if max { a.total_cmp(&b).is_ge() } else { a.total_cmp(&b).is_le() };
    if a_wins { a } else { b }
}

macro_rules! int_model {
    ($t:ty, $inputs:expr, $out:expr, $op:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        let n = $inputs.len();
        let get = |b: &[u8], i: usize| <$t>::from_le_bytes(b[i * S..(i + 1) * S].try_into().unwrap());
        for i in 0..$out.len() / S {
            let mut acc = get($inputs[0], i);
            for inp in &$inputs[1..] {
                let x = get(inp, i);
                acc = match $op {
                    Op::Sum | Op::Avg => acc.wrapping_add(x),
                    Op::Prod => acc.wrapping_mul(x),
                    Op::Max => acc.max(x),
                    Op::Min => acc.min(x),
                };
            }
            if $op == Op::Avg {
                acc = acc.wrapping_div(n as $t);
            }
            $out[i * S..(i + 1) * S].copy_from_slice(&acc.to_le_bytes());
        }
    }};
}

macro_rules! float_model {
    ($t:ty, $inputs:expr, $out:expr, $op:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        let n = $inputs.len();
        let s = (1.0f64 / n as f64) as $t;
        let get = |b: &[u8], i: usize| <$t>::from_le_bytes(b[i * S..(i + 1) * S].try_into().unwrap());
        for i in 0..$out.len() / S {
            let x0 = get($inputs[0], i);
            let mut acc = if $op == Op::Avg { x0 * s } else { x0 };
            for inp in &$inputs[1..] {
                let x = get(inp, i);
                acc = match $op {
                    Op::Sum => acc + x,
                    Op::Prod => acc * x,
                    Op::Max => pick(acc as f64, x as f64, true) as $t,
                    Op::Min => pick(acc as f64, x as f64, false) as $t,
                    Op::Avg => x.mul_add(s, acc),
                };
            }
            $out[i * S..(i + 1) * S].copy_from_slice(&acc.to_le_bytes());
        }
    }};
}

/// A 16-bit float type as its bits, with f32 arithmetic rounded back (RNE).
trait Half16: Copy {
    fn to32(self) -> f32;
    fn from32(x: f32) -> Self;
    fn from_bits16(b: u16) -> Self;
    fn bits16(self) -> u16;
}
macro_rules! half16 {
    ($($t:ty),*) => {$(
        impl Half16 for $t {
            fn to32(self) -> f32 {
                self.to_f32()
            }
            fn from32(x: f32) -> Self {
                <$t>::from_f32(x)
            }
            fn from_bits16(b: u16) -> Self {
                <$t>::from_bits(b)
            }
            fn bits16(self) -> u16 {
                self.to_bits()
            }
        }
    )*};
}
half16!(f16, bf16);

fn half_model<H: Half16>(inputs: &[&[u8]], out: &mut [u8], op: Op) {
    let n = inputs.len();
    let s = H::from32((1.0f64 / n as f64) as f32);
    let get = |b: &[u8], i: usize| H::from_bits16(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]));
    let step = |a: H, b: H, op: Op| -> H {
        let (x, y) = (a.to32(), b.to32());
        H::from32(match op {
            Op::Sum | Op::Avg => x + y,
            Op::Prod => x * y,
            Op::Max => pick(x as f64, y as f64, true) as f32,
            Op::Min => pick(x as f64, y as f64, false) as f32,
        })
    };
    let pre = |x: H| if op == Op::Avg { step(x, s, Op::Prod) } else { x };
    for i in 0..out.len() / 2 {
        let mut acc = pre(get(inputs[0], i));
        for inp in &inputs[1..] {
            acc = step(acc, pre(get(inp, i)), op);
        }
        out[2 * i..2 * i + 2].copy_from_slice(&acc.bits16().to_le_bytes());
    }
}

/// Element-wise reduction of `inputs` (rank order; each the length of `out`) into `out`.
pub fn reduce(ty: Ty, op: Op, inputs: &[&[u8]], out: &mut [u8]) {
    assert!(!inputs.is_empty() && inputs.iter().all(|x| x.len() >= out.len()), "inputs shorter than the output");
    match ty {
        Ty::I8 => int_model!(i8, inputs, out, op),
        Ty::U8 => int_model!(u8, inputs, out, op),
        Ty::I32 => int_model!(i32, inputs, out, op),
        Ty::U32 => int_model!(u32, inputs, out, op),
        Ty::I64 => int_model!(i64, inputs, out, op),
        Ty::U64 => int_model!(u64, inputs, out, op),
        Ty::F32 => float_model!(f32, inputs, out, op),
        Ty::F64 => float_model!(f64, inputs, out, op),
        Ty::F16 => half_model::<f16>(inputs, out, op),
        Ty::Bf16 => half_model::<bf16>(inputs, out, op),
    }
}

/// Whether element bytes `a` and `b` of `ty` are the same: bit for bit, or both NaN.
fn same_elem(ty: Ty, a: &[u8], b: &[u8]) -> bool {
    a == b
        || match ty {
            Ty::F16 => f16::from_le_bytes([a[0], a[1]]).is_nan() && f16::from_le_bytes([b[0], b[1]]).is_nan(),
            Ty::Bf16 => bf16::from_le_bytes([a[0], a[1]]).is_nan() && bf16::from_le_bytes([b[0], b[1]]).is_nan(),
            Ty::F32 => {
                f32::from_le_bytes(a.try_into().unwrap()).is_nan() && f32::from_le_bytes(b.try_into().unwrap()).is_nan()
            }
            Ty::F64 => {
                f64::from_le_bytes(a.try_into().unwrap()).is_nan() && f64::from_le_bytes(b.try_into().unwrap()).is_nan()
            }
            _ => false,
        }
}

/// The elements where `got` differs from `want` (see the module doc): (count, first index).
pub fn mismatches(ty: Ty, got: &[u8], want: &[u8]) -> (usize, Option<usize>) {
    let s = ty.size();
    if got == want {
        return (0, None);
    }
    let mut count = 0;
    let mut first = None;
    for (i, (a, b)) in got.chunks_exact(s).zip(want.chunks_exact(s)).enumerate() {
        if !same_elem(ty, a, b) {
            count += 1;
            first.get_or_insert(i);
        }
    }
    (count, first)
}

/// Whether `got` matches `want` as [`mismatches`] counts.
pub fn same_bits(ty: Ty, got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && mismatches(ty, got, want).0 == 0
}

/// Element `i` of `b` as text (for failure notes).
pub fn show(ty: Ty, b: &[u8], i: usize) -> String {
    let e = &b[i * ty.size()..(i + 1) * ty.size()];
    match ty {
        Ty::I8 => format!("{}", e[0] as i8),
        Ty::U8 => format!("{}", e[0]),
        Ty::I32 => format!("{}", i32::from_le_bytes(e.try_into().unwrap())),
        Ty::U32 => format!("{}", u32::from_le_bytes(e.try_into().unwrap())),
        Ty::I64 => format!("{}", i64::from_le_bytes(e.try_into().unwrap())),
        Ty::U64 => format!("{}", u64::from_le_bytes(e.try_into().unwrap())),
        Ty::F16 => format!("{:?} ({:#06x})", f16::from_le_bytes([e[0], e[1]]), u16::from_le_bytes([e[0], e[1]])),
        Ty::Bf16 => format!("{:?} ({:#06x})", bf16::from_le_bytes([e[0], e[1]]), u16::from_le_bytes([e[0], e[1]])),
        Ty::F32 => {
            let v = u32::from_le_bytes(e.try_into().unwrap());
            format!("{:e} ({v:#010x})", f32::from_bits(v))
        }
        Ty::F64 => {
            let v = u64::from_le_bytes(e.try_into().unwrap());
            format!("{:e} ({v:#018x})", f64::from_bits(v))
        }
    }
}

/// A small, fast, seedable generator (SplitMix64): the same stream on every process.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Special values of a float type that the inputs carry now and then: NaN, infinities, signed
/// zeros, the extremes of the finite range, the smallest subnormal.
fn special(ty: Ty, k: u64) -> Vec<u8> {
    let f = |x: f64| -> Vec<u8> {
        match ty {
            Ty::F16 => f16::from_f64(x).to_le_bytes().to_vec(),
            Ty::Bf16 => bf16::from_f64(x).to_le_bytes().to_vec(),
            Ty::F32 => (x as f32).to_le_bytes().to_vec(),
            _ => x.to_le_bytes().to_vec(),
        }
    };
    let (max, tiny): (f64, f64) = match ty {
        Ty::F16 => (65504.0, 2f64.powi(-24)),
        Ty::Bf16 => (bf16::MAX.to_f64(), bf16::from_bits(1).to_f64()),
        Ty::F32 => (f32::MAX as f64, f32::from_bits(1) as f64),
        _ => (f64::MAX, f64::from_bits(1)),
    };
    match k % 9 {
        0 => f(f64::NAN),
        1 => f(f64::INFINITY),
        2 => f(f64::NEG_INFINITY),
        3 => f(0.0),
        4 => f(-0.0),
        5 => f(max),
        6 => f(-max),
        7 => f(tiny),
        _ => f(-tiny),
    }
}

/// `count` elements of `ty` for one rank's input: floats mostly moderate values (whose sums and
/// products stay finite), one in `special_every` a special value (0: none); integers uniform
/// over the whole range, extremes included.
pub fn generate(ty: Ty, count: usize, seed: u64, special_every: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count * ty.size());
    for _ in 0..count {
        if ty.is_float() && special_every > 0 && rng.below(special_every) == 0 {
            out.extend(special(ty, rng.next_u64()));
            continue;
        }
        match ty {
            Ty::F16 | Ty::Bf16 | Ty::F32 | Ty::F64 => {
                // Moderate magnitudes over several binades, both signs, some exact small integers.
                let u = rng.unit();
                let mag = if rng.below(4) == 0 {
                    (rng.below(16) as f64) - 8.0
                } else {
                    (u - 0.5) * 2f64.powi(rng.below(12) as i32 - 6)
                };
                match ty {
                    Ty::F16 => out.extend(f16::from_f64(mag).to_le_bytes()),
                    Ty::Bf16 => out.extend(bf16::from_f64(mag).to_le_bytes()),
                    Ty::F32 => out.extend((mag as f32).to_le_bytes()),
                    _ => out.extend(mag.to_le_bytes()),
                }
            }
            _ => {
                let v = match rng.below(16) {
                    0 => 0,
                    1 => u64::MAX,                          // -1, or the unsigned maximum
                    2 => 1u64 << (ty.size() * 8 - 1),       // the signed minimum
                    3 => (1u64 << (ty.size() * 8 - 1)) - 1, // the signed maximum
                    _ => rng.next_u64(),
                };
                out.extend_from_slice(&v.to_le_bytes()[..ty.size()]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn red(ty: Ty, op: Op, inputs: &[Vec<u8>]) -> Vec<u8> {
        let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let mut out = vec![0u8; inputs[0].len()];
        reduce(ty, op, &ins, &mut out);
        out
    }

    #[test]
    fn float_sums_fold_in_rank_order() {
        // (1e8 + 1) + ... depends on the order: 1e8 + 1 - 1e8 = 0 in f32, 1 in another order.
        let ins = [f32s(&[1e8]), f32s(&[1.0]), f32s(&[-1e8])];
        assert_eq!(red(Ty::F32, Op::Sum, &ins), f32s(&[0.0]));
        let ins = [f32s(&[1e8]), f32s(&[-1e8]), f32s(&[1.0])];
        assert_eq!(red(Ty::F32, Op::Sum, &ins), f32s(&[1.0]));
    }

    #[test]
    fn avg_is_a_premultiply_and_fmas() {
        // 3 ranks: s = f32(1/3); acc = x0*s, then fma(x, s, acc).
        let s = (1.0f64 / 3.0) as f32;
        let (a, b, c) = (1.0f32, 2.0f32, 4.0f32);
        let want = c.mul_add(s, b.mul_add(s, a * s));
        assert_eq!(red(Ty::F32, Op::Avg, &[f32s(&[a]), f32s(&[b]), f32s(&[c])]), f32s(&[want]));
        // Integers: the wrapped sum divided, toward zero.
        let i8s = |v: &[i8]| v.iter().map(|&x| x as u8).collect::<Vec<u8>>();
        assert_eq!(red(Ty::I8, Op::Avg, &[i8s(&[-7]), i8s(&[0]), i8s(&[0])]), i8s(&[-2]));
        assert_eq!(red(Ty::I8, Op::Avg, &[i8s(&[100]), i8s(&[100]), i8s(&[0])]), i8s(&[(-56i8) / 3]), "wraps first");
        // f16: every term pre-multiplied by s in f16, then added.
        let h = |x: f32| f16::from_f32(x).to_le_bytes().to_vec();
        let sh = f16::from_f32(s);
        let pre = |x: f32| f16::from_f32(f16::from_f32(x).to_f32() * sh.to_f32());
        let want = f16::from_f32(f16::from_f32(pre(1.0).to_f32() + pre(2.0).to_f32()).to_f32() + pre(4.0).to_f32());
        assert_eq!(red(Ty::F16, Op::Avg, &[h(1.0), h(2.0), h(4.0)]), want.to_le_bytes().to_vec());
    }

    #[test]
    fn max_min_ignore_a_nan_and_order_signed_zeros() {
        let nan = f32::NAN;
        assert_eq!(
            red(Ty::F32, Op::Max, &[f32s(&[nan, -0.0, 1.0]), f32s(&[2.0, 0.0, nan]), f32s(&[1.0, -0.0, nan])]),
            f32s(&[2.0, 0.0, 1.0])
        );
        assert_eq!(red(Ty::F32, Op::Min, &[f32s(&[0.0]), f32s(&[-0.0]), f32s(&[0.0])]), f32s(&[-0.0]));
        let out = red(Ty::F32, Op::Max, &[f32s(&[nan]), f32s(&[nan]), f32s(&[nan])]);
        assert!(f32::from_le_bytes(out[..4].try_into().unwrap()).is_nan());
        // Integers: signed and unsigned compare differently.
        assert_eq!(
            red(Ty::I32, Op::Max, &[(-1i32).to_le_bytes().to_vec(), 1i32.to_le_bytes().to_vec()]),
            1i32.to_le_bytes()
        );
        assert_eq!(
            red(Ty::U32, Op::Max, &[u32::MAX.to_le_bytes().to_vec(), 1u32.to_le_bytes().to_vec()]),
            u32::MAX.to_le_bytes()
        );
    }

    #[test]
    fn integers_wrap_and_halves_round_each_step() {
        let u8s = |v: &[u8]| v.to_vec();
        assert_eq!(red(Ty::U8, Op::Sum, &[u8s(&[200]), u8s(&[100]), u8s(&[1])]), [45]);
        assert_eq!(red(Ty::U8, Op::Prod, &[u8s(&[16]), u8s(&[16]), u8s(&[3])]), [0]);
        // bf16: 256 + 1 rounds to 256 at each step (8 significant bits), so four 1s vanish.
        let b = |x: f32| bf16::from_f32(x).to_le_bytes().to_vec();
        let ins = [b(256.0), b(1.0), b(1.0), b(1.0), b(1.0)];
        assert_eq!(red(Ty::Bf16, Op::Sum, &ins), b(256.0));
        let ins = [b(1.0), b(1.0), b(1.0), b(1.0), b(256.0)];
        assert_eq!(red(Ty::Bf16, Op::Sum, &ins), b(260.0));
    }

    #[test]
    fn comparison_accepts_any_nan_and_nothing_else() {
        let a = f32s(&[f32::from_bits(0x7fc0_0000), 1.0, -0.0]);
        let b = f32s(&[f32::from_bits(0x7fff_ffff), 1.0, -0.0]);
        assert!(same_bits(Ty::F32, &a, &b));
        let c = f32s(&[f32::NAN, 1.0, 0.0]);
        assert_eq!(mismatches(Ty::F32, &c, &a), (1, Some(2)), "+0 is not -0");
        assert!(!same_bits(Ty::I32, &a, &b), "integers are compared bit for bit");
    }

    #[test]
    fn generated_inputs_are_reproducible_and_carry_specials() {
        for ty in Ty::ALL {
            let a = generate(ty, 4099, 42, 16);
            assert_eq!(a.len(), 4099 * ty.size());
            assert_eq!(a, generate(ty, 4099, 42, 16));
            assert_ne!(a, generate(ty, 4099, 43, 16));
        }
        let v = generate(Ty::F32, 10_000, 1, 16);
        let xs: Vec<f32> = v.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(xs.iter().any(|x| x.is_nan()) && xs.iter().any(|x| x.is_infinite()));
        assert!(xs.iter().any(|x| *x == 0.0 && x.is_sign_negative()));
        assert!(xs.iter().filter(|x| x.is_finite()).count() > 9000);
        assert_eq!(Ty::Bf16.nccl(), 9);
        assert_eq!(Op::Avg.nccl(), 4);
    }
}
