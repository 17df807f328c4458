//! What both codecs share: blocks of [`BLOCK`] elements, the amax floor under which a block
//! flushes, the block amax, and the codec names ([`Codec`]).

use rcclx::kernels::Fp8Format;

/// Elements per scaled block.
pub const BLOCK: usize = 128;

/// Blocks whose amax is below this (or that have no finite element) have scale 0 and encode
/// every finite element as +0.
pub const AMAX_FLOOR: f32 = 1e-30;

/// The wire codec of a low-precision collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Block-scaled FP8 E4M3 in the GPU's format.
    Fp8(Fp8Format),
    /// Block-scaled INT8 with per-lane shifts.
    Int8,
}

impl Codec {
    /// Every codec (both FP8 formats), in the order tests report them.
    pub const ALL: [Codec; 3] = [Codec::Fp8(Fp8Format::E4m3fn), Codec::Fp8(Fp8Format::E4m3fnuz), Codec::Int8];

    /// `"fp8-e4m3fn"`, `"fp8-e4m3fnuz"`, `"int8"`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Fp8(Fp8Format::E4m3fn) => "fp8-e4m3fn",
            Codec::Fp8(Fp8Format::E4m3fnuz) => "fp8-e4m3fnuz",
            Codec::Int8 => "int8",
        }
    }
}

/// Max |x| over the finite elements (0 if none).
pub fn block_amax(xs: &[f32]) -> f32 {
    xs.iter().filter(|x| x.is_finite()).fold(0.0f32, |a, x| a.max(x.abs()))
}

/// 2^k as f32, for k in the normal range.
pub(super) fn pow2(k: i32) -> f32 {
    debug_assert!((-126..=127).contains(&k));
    f32::from_bits(((k + 127) as u32) << 23)
}
