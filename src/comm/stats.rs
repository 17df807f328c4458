//! Per-communicator statistics: calls and bytes per path, forwarded calls per reason.

use crate::abi::own::rcclxCommStats;
use crate::intercept::{Reason, Route};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Stats {
    ll: [AtomicU64; 2],
    flat: [AtomicU64; 2],
    tree: [AtomicU64; 2],
    lowp: [AtomicU64; 2],
    forwarded: [AtomicU64; 2],
    by_reason: [AtomicU64; 16],
}

impl Stats {
    pub fn count(&self, route: Route, bytes: u64) {
        let slot = match route {
            Route::DdaLl => &self.ll,
            Route::DdaFlat => &self.flat,
            Route::DdaTree => &self.tree,
            Route::Lowp => &self.lowp,
            Route::Upstream(reason) => {
                self.by_reason[reason as usize].fetch_add(1, Relaxed);
                &self.forwarded
            }
        };
        slot[0].fetch_add(1, Relaxed);
        slot[1].fetch_add(bytes, Relaxed);
    }

    pub fn snapshot(&self) -> rcclxCommStats {
        let n = |a: &AtomicU64| a.load(Relaxed);
        rcclxCommStats {
            ddaLlCalls: n(&self.ll[0]),
            ddaLlBytes: n(&self.ll[1]),
            ddaFlatCalls: n(&self.flat[0]),
            ddaFlatBytes: n(&self.flat[1]),
            ddaTreeCalls: n(&self.tree[0]),
            ddaTreeBytes: n(&self.tree[1]),
            lowpCalls: n(&self.lowp[0]),
            lowpBytes: n(&self.lowp[1]),
            forwardedCalls: n(&self.forwarded[0]),
            forwardedBytes: n(&self.forwarded[1]),
            forwardedByReason: std::array::from_fn(|i| n(&self.by_reason[i])),
        }
    }

    /// One line for the INFO log on destroy.
    pub fn summary(&self) -> String {
        let s = self.snapshot();
        let mut reasons = String::new();
        for (i, r) in Reason::ALL.iter().enumerate() {
            if s.forwardedByReason[i] > 0 {
                reasons += &format!(" {}={}", r.c_name().to_string_lossy(), s.forwardedByReason[i]);
            }
        }
        format!(
            "ll {} calls {} B, flat {} calls {} B, tree {} calls {} B, fp8 {} calls {} B, forwarded {} calls {} B{}{}",
            s.ddaLlCalls,
            s.ddaLlBytes,
            s.ddaFlatCalls,
            s.ddaFlatBytes,
            s.ddaTreeCalls,
            s.ddaTreeBytes,
            s.lowpCalls,
            s.lowpBytes,
            s.forwardedCalls,
            s.forwardedBytes,
            if reasons.is_empty() { "" } else { " by reason:" },
            reasons
        )
    }
}

/// A running sum of snapshots (process totals).
pub struct Totals(parking_lot::Mutex<rcclxCommStats>);

impl Default for Totals {
    fn default() -> Self {
        Self::new()
    }
}

impl Totals {
    pub const fn new() -> Self {
        Self(parking_lot::Mutex::new(rcclxCommStats {
            ddaLlCalls: 0,
            ddaLlBytes: 0,
            ddaFlatCalls: 0,
            ddaFlatBytes: 0,
            ddaTreeCalls: 0,
            ddaTreeBytes: 0,
            lowpCalls: 0,
            lowpBytes: 0,
            forwardedCalls: 0,
            forwardedBytes: 0,
            forwardedByReason: [0; 16],
        }))
    }

    pub fn add(&self, s: &rcclxCommStats) {
        let mut t = self.0.lock();
        t.ddaLlCalls += s.ddaLlCalls;
        t.ddaLlBytes += s.ddaLlBytes;
        t.ddaFlatCalls += s.ddaFlatCalls;
        t.ddaFlatBytes += s.ddaFlatBytes;
        t.ddaTreeCalls += s.ddaTreeCalls;
        t.ddaTreeBytes += s.ddaTreeBytes;
        t.lowpCalls += s.lowpCalls;
        t.lowpBytes += s.lowpBytes;
        t.forwardedCalls += s.forwardedCalls;
        t.forwardedBytes += s.forwardedBytes;
        for (a, b) in t.forwardedByReason.iter_mut().zip(s.forwardedByReason) {
            *a += b;
        }
    }

    pub fn snapshot(&self) -> rcclxCommStats {
        *self.0.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_path_and_reason() {
        let s = Stats::default();
        s.count(Route::DdaFlat, 100);
        s.count(Route::DdaFlat, 28);
        s.count(Route::Upstream(Reason::Size), 7);
        let snap = s.snapshot();
        assert_eq!((snap.ddaFlatCalls, snap.ddaFlatBytes), (2, 128));
        assert_eq!((snap.forwardedCalls, snap.forwardedBytes), (1, 7));
        assert_eq!(snap.forwardedByReason[Reason::Size as usize], 1);
        assert!(s.summary().contains("size=1"));
    }
}
