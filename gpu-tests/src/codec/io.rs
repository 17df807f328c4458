//! The I/O element types of the low-precision collectives (f32, bf16, fp16): their names, sizes,
//! rounding (RNE, the last step of every collective) and ULPs.

/// The I/O element type of a low-precision collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Io {
    F32,
    Bf16,
    F16,
}

impl Io {
    /// Every I/O type, in the order tests report them.
    pub const ALL: [Io; 3] = [Io::F32, Io::Bf16, Io::F16];

    /// `"f32"`, `"bf16"`, `"f16"`.
    pub fn name(self) -> &'static str {
        match self {
            Io::F32 => "f32",
            Io::Bf16 => "bf16",
            Io::F16 => "f16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Io::F32 => 4,
            Io::Bf16 | Io::F16 => 2,
        }
    }

    /// `x` rounded to this type (RNE, as `half` does it), back in f32 (exact).
    pub fn round(self, x: f32) -> f32 {
        match self {
            Io::F32 => x,
            Io::Bf16 => half::bf16::from_f32(x).to_f32(),
            Io::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// Rounds every element (the last step of every collective with bf16/fp16 output).
    pub fn round_all(self, xs: &mut [f32]) {
        if self != Io::F32 {
            xs.iter_mut().for_each(|x| *x = self.round(*x));
        }
    }

    /// The 16 bits of `x` rounded to this type (bf16/f16 only).
    pub fn to_bits16(self, x: f32) -> u16 {
        match self {
            Io::F32 => panic!("f32 has no 16-bit form"),
            Io::Bf16 => half::bf16::from_f32(x).to_bits(),
            Io::F16 => half::f16::from_f32(x).to_bits(),
        }
    }

    /// The value of 16 bits of this type (bf16/f16 only).
    pub fn from_bits16(self, b: u16) -> f32 {
        match self {
            Io::F32 => panic!("f32 has no 16-bit form"),
            Io::Bf16 => half::bf16::from_bits(b).to_f32(),
            Io::F16 => half::f16::from_bits(b).to_f32(),
        }
    }

    /// The spacing of this type's values at `|x|` (one ULP; the subnormal spacing near 0).
    pub fn ulp(self, x: f32) -> f32 {
        let (mant_bits, emin) = match self {
            Io::F32 => (23, -126),
            Io::Bf16 => (7, -126),
            Io::F16 => (10, -14),
        };
        let ax = x.abs();
        if !ax.is_finite() {
            return f32::INFINITY;
        }
        // floor(log2 ax) from the f32 exponent field (0 and subnormals give -127).
        let e = (((ax.to_bits() >> 23) & 0xFF) as i32 - 127).max(emin);
        let k = e - mant_bits; // >= -149: f32's smallest subnormal
        if k >= -126 { f32::from_bits(((k + 127) as u32) << 23) } else { f32::from_bits(1 << (k + 149)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_rounding_and_ulp() {
        assert_eq!(Io::Bf16.round(1.0 + 2f32.powi(-8)), 1.0); // tie to even
        assert_eq!(Io::Bf16.round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert_eq!(Io::F16.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(Io::F32.ulp(1.0), 2f32.powi(-23));
        assert_eq!(Io::Bf16.ulp(1.5), 2f32.powi(-7));
        assert_eq!(Io::F16.ulp(1e-7), 2f32.powi(-24));
        assert_eq!(Io::F16.ulp(65504.0), 32.0);
        assert_eq!(Io::F32.ulp(0.0), f32::from_bits(1));
        assert_eq!(Io::F32.ulp(f32::MIN_POSITIVE * 1.5), f32::from_bits(1));
        assert_eq!(Io::Bf16.ulp(0.0), f32::from_bits(1 << 16));
        assert_eq!(Io::F32.ulp(-3.0), 2f32.powi(-22));
        for x in [1e-30f32, 0.1, 1.0, 7.5, 1e30] {
            for io in Io::ALL {
                let x = io.round(x);
                let u = io.ulp(x);
                assert_eq!(io.round(x + u * 0.25), x, "{io:?} {x}");
                assert_eq!(io.round(x + u * 0.75), x + u, "{io:?} {x}");
                assert!(u > 0.0);
            }
        }
        assert_eq!(Io::F16.from_bits16(Io::F16.to_bits16(0.5)), 0.5);
        assert_eq!(Io::Bf16.from_bits16(Io::Bf16.to_bits16(-3.0)), -3.0);
    }
}
