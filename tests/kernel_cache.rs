//! build/cache.rs: kernels compiled in one OUT_DIR are copied, not compiled again, into another
//! OUT_DIR of the same target directory (clippy's run of the build script), with the generated
//! table pointing at the new OUT_DIR; entries past the newest four of a stem are removed.

#[path = "../build/cache.rs"]
mod cache;
#[path = "../build/report.rs"]
mod report;
#[path = "../build/toolchain.rs"]
mod toolchain;

use std::path::{Path, PathBuf};

/// `<tmp>/release/build/<name>/out`, made.
fn out_dir(tmp: &Path, name: &str) -> PathBuf {
    let d = tmp.join("release").join("build").join(name).join("out");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_second_out_dir_gets_a_copy_that_points_at_itself() {
    let tmp = std::env::temp_dir().join(format!("rcclx-kernel-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let first = out_dir(&tmp, "rcclx-1");
    let table = format!("include_bytes!({:?});\n", first.join("k.fatbin").to_str().unwrap());
    std::fs::write(first.join("kernels.rs"), &table).unwrap();
    std::fs::write(first.join("k.fatbin"), [0u8, 1, 2, 255]).unwrap();
    let files = ["kernels.rs".to_string(), "k.fatbin".to_string()];
    let key = cache::digest("unit", &[], true);
    assert_ne!(key, cache::digest("unit", &[], false), "require is part of the digest");
    assert_ne!(key, cache::digest("other unit", &[], true));

    let second = out_dir(&tmp, "rcclx-2");
    assert!(cache::restore(&second, "rcclx", &key).is_none(), "nothing stored yet");
    cache::store(&first, "rcclx", &key, &files, &["/opt/nvcc".to_string()]);
    assert_eq!(cache::restore(&second, "rcclx", &key), Some(vec!["/opt/nvcc".to_string()]));
    assert_eq!(std::fs::read(second.join("k.fatbin")).unwrap(), [0u8, 1, 2, 255]);
    let copied = std::fs::read_to_string(second.join("kernels.rs")).unwrap();
    assert_eq!(copied, format!("include_bytes!({:?});\n", second.join("k.fatbin").to_str().unwrap()));
    assert!(cache::restore(&second, "rcclx", &cache::digest("changed", &[], true)).is_none());

    // A layout that is not cargo's caches nothing.
    let odd = tmp.join("elsewhere");
    std::fs::create_dir_all(&odd).unwrap();
    assert!(cache::restore(&odd, "rcclx", &key).is_none());

    for i in 0..6 {
        cache::store(&first, "rcclx", &cache::digest(&format!("v{i}"), &[], true), &files, &[]);
    }
    let kept = std::fs::read_dir(tmp.join("release").join("kernel-cache")).unwrap().count();
    assert_eq!(kept, 4, "the newest four entries of the stem");
    let _ = std::fs::remove_dir_all(&tmp);
}
