//! Embedded GPU code objects (layer: base data; depends on nothing).
//!
//! The build script (`build/main.rs`) compiles the kernels of [`crate::kernel_table`] ahead of
//! time, once per target, and generates the [`CODE_OBJECTS`] table included below: an NVIDIA fatbin for `sm_90` (sm_90
//! cubin + compute_90 PTX, so any GPU with sm >= 90 can load it; newer ones JIT the PTX) and
//! one AMD code object (v5 ELF) per `gfx942` / `gfx950`. Targets whose compiler was missing at
//! build time are absent; on such GPUs rcclx only forwards to the stock library.
//!
//! `gpu/` picks the image with [`for_arch`] and loads it with `cuModuleLoadData` /
//! `hipModuleLoadData`. Kernel names and indices come from [`crate::kernel_table`].

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// The FP8 E4M3 encoding the code object's conversion helpers produce and consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    /// OCP E4M3FN (NVIDIA, gfx950): bias 7, max 448, NaN 0x7F/0xFF, has -0.
    E4m3fn,
    /// E4M3FNUZ (gfx942 hardware): bias 8, max 240, NaN 0x80 only, no -0.
    E4m3fnuz,
}

impl Fp8Format {
    /// `"e4m3fn"` or `"e4m3fnuz"`: as `rcclxGetInfo` and the Python package spell it (torch's
    /// `float8_e4m3fn` / `float8_e4m3fnuz`).
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::E4m3fn => "e4m3fn",
            Fp8Format::E4m3fnuz => "e4m3fnuz",
        }
    }
}

impl CodeObject {
    /// FP8 wire format of this target (see `RCCLX_FP8_FNUZ` in `rcclx_port.h`). Bytes of the
    /// two formats are not interchangeable, so host code and peers must agree on it.
    pub fn fp8_format(&self) -> Fp8Format {
        match self.target {
            "gfx940" | "gfx941" | "gfx942" => Fp8Format::E4m3fnuz,
            _ => Fp8Format::E4m3fn,
        }
    }
}

/// The embedded code object for a device, or `None` (then rcclx only forwards).
///
/// `arch` is `"sm_XY"` built from the CUDA compute capability (`"sm_90"`, `"sm_100"`,
/// `"sm_120"`; a suffix like `"sm_90a"` is ignored), or HIP's `gcnArchName`
/// (`"gfx942:sramecc+:xnack-"`). NVIDIA: the highest embedded `sm_N` with `N <= XY` (the
/// sm_90 fatbin serves every sm >= 90 through its PTX). AMD: the part before the first `:`
/// must equal the target exactly.
pub fn for_arch(arch: &str) -> Option<&'static CodeObject> {
    select(CODE_OBJECTS, arch)
}

fn select<'a>(table: &'a [CodeObject], arch: &str) -> Option<&'a CodeObject> {
    let arch = arch.trim();
    if let Some(want) = sm_number(arch) {
        table
            .iter()
            .filter_map(|c| sm_number(c.target).map(|n| (n, c)))
            .filter(|&(n, _)| n <= want)
            .max_by_key(|&(n, _)| n)
            .map(|(_, c)| c)
    } else if arch.starts_with("gfx") {
        let base = arch.split(':').next().unwrap_or(arch);
        table.iter().find(|c| c.target == base)
    } else {
        None
    }
}

/// `"sm_90"` -> 90, `"sm_90a"` -> 90, `"sm_120"` -> 120; anything else -> `None`.
fn sm_number(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("sm_")?;
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    let rest = &digits[end..];
    if end == 0 || !rest.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMG: &[u8] = &[0];

    fn co(target: &'static str) -> CodeObject {
        CodeObject { target, image: IMG }
    }

    fn pick(table: &[CodeObject], arch: &str) -> Option<&'static str> {
        select(table, arch).map(|c| c.target)
    }

    #[test]
    fn nvidia_uses_highest_sm_not_above_device() {
        let t = [co("sm_90"), co("gfx942"), co("gfx950")];
        assert_eq!(pick(&t, "sm_90"), Some("sm_90"));
        assert_eq!(pick(&t, "sm_90a"), Some("sm_90"));
        assert_eq!(pick(&t, "sm_100"), Some("sm_90"));
        assert_eq!(pick(&t, "sm_103"), Some("sm_90"));
        assert_eq!(pick(&t, "sm_120"), Some("sm_90"));
        assert_eq!(pick(&t, "sm_89"), None);
        assert_eq!(pick(&t, "sm_80"), None);
        let t2 = [co("sm_100"), co("sm_90")];
        assert_eq!(pick(&t2, "sm_100"), Some("sm_100"));
        assert_eq!(pick(&t2, "sm_120"), Some("sm_100"));
        assert_eq!(pick(&t2, "sm_90"), Some("sm_90"));
    }

    #[test]
    fn amd_matches_base_name_exactly() {
        let t = [co("sm_90"), co("gfx942"), co("gfx950")];
        assert_eq!(pick(&t, "gfx942:sramecc+:xnack-"), Some("gfx942"));
        assert_eq!(pick(&t, "gfx942"), Some("gfx942"));
        assert_eq!(pick(&t, "gfx950:sramecc+:xnack-"), Some("gfx950"));
        assert_eq!(pick(&t, "gfx90a:sramecc+:xnack-"), None);
        assert_eq!(pick(&t, "gfx94"), None);
        assert_eq!(pick(&t, "gfx9420"), None);
        assert_eq!(pick(&t, "gfx941"), None);
    }

    #[test]
    fn garbage_and_empty_tables() {
        let t = [co("sm_90"), co("gfx942")];
        for arch in ["", "sm_", "sm_x", "sm_9_0", "90", "compute_90", "GFX942", ":gfx942"] {
            assert_eq!(pick(&t, arch), None, "{arch:?}");
        }
        assert_eq!(pick(&[], "sm_90"), None);
        assert_eq!(pick(&[], "gfx942:sramecc+:xnack-"), None);
    }

    #[test]
    fn fp8_format_per_target() {
        assert_eq!(co("gfx942").fp8_format(), Fp8Format::E4m3fnuz);
        assert_eq!(co("gfx950").fp8_format(), Fp8Format::E4m3fn);
        assert_eq!(co("sm_90").fp8_format(), Fp8Format::E4m3fn);
        assert_eq!(Fp8Format::E4m3fn.name(), "e4m3fn");
        assert_eq!(Fp8Format::E4m3fnuz.name(), "e4m3fnuz");
    }

    /// Whatever this build embedded is well formed (passes with an empty table too).
    #[test]
    fn embedded_images_are_well_formed() {
        for c in CODE_OBJECTS {
            assert_eq!(c.image.as_ptr() as usize % 64, 0, "{} alignment", c.target);
            if c.target.starts_with("sm_") {
                assert_eq!(&c.image[..4], &0xba55_ed50u32.to_le_bytes(), "fatbin magic")
            } else {
                assert_eq!(&c.image[..4], b"\x7fELF", "{} ELF magic", c.target)
            }
            assert!(std::ptr::eq(for_arch(c.target).expect("self lookup"), c));
        }
    }
}
