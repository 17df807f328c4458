//! Inputs whose f32 sums over ranks are exact in any order (the teardown programs check their
//! AllReduces with them: `lifecycle`, `teardown`).

/// Rank `rank`'s `count` inputs for `salt`: small integers.
pub fn input(count: usize, rank: usize, salt: usize) -> Vec<f32> {
    (0..count).map(|i| ((i * 7 + rank * 13 + salt) % 17) as f32 - 8.0).collect()
}

/// The sum over `nranks` ranks of [`input`].
pub fn expected(count: usize, nranks: usize, salt: usize) -> Vec<f32> {
    let mut sum = vec![0f32; count];
    for r in 0..nranks {
        sum.iter_mut().zip(input(count, r, salt)).for_each(|(s, x)| *s += x);
    }
    sum
}
