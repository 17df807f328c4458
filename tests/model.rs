//! The performance model (`bench/model.py`) and what is generated from it stay in step:
//! docs/RESULTS.md's model section and AllReduce's one-shot limits in `src/collective.rs`
//! (`AR_ONE_SHOT_MAX`) are what the model computes (`python3 bench/model.py --check`). The limits
//! are also read back through the library, so the check cannot pass on a table the code ignores.

mod common;

use rcclx::collective::{Coll, Fabric};

#[test]
fn results_and_defaults_match_the_model() {
    common::python_passes(&["bench/model.py", "--check"], "\n(regenerate with `python3 bench/model.py --write`)");
}

#[test]
fn the_library_uses_the_table_the_model_checks() {
    let ar = Coll::AllReduce.spec();
    let table = rcclx::collective::AR_ONE_SHOT_MAX;
    for n in 2..=8 {
        assert_eq!(
            ar.one_shot_default(n, Fabric::Switch),
            table.switch[n - 2].min(ar.max[rcclx::collective::rank_row(n)])
        );
        assert_eq!(ar.one_shot_default(n, Fabric::Mesh), table.mesh[n - 2].min(ar.max[rcclx::collective::rank_row(n)]));
    }
}
