//! Per-communicator statistics: calls and bytes per route (each kernel family of
//! `kernel_table`, plus the stock library), and forwarded calls per reason.

use crate::intercept::{FamilyKey, Reason, Route};
use crate::kernel_table::{FAMILIES, family_of_route, route_count};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Number of routes: "forwarded to the stock library", then the kernel families' route numbers
/// (`Family::route`: explicit and stable, whatever the table's order).
pub const ROUTES: usize = route_count();
/// Index of the forwarded route.
pub const FORWARDED: usize = 0;

/// The route of kernel family `family` (index in `FAMILIES`).
pub const fn family_route(family: usize) -> usize {
    FAMILIES[family].route as usize
}

/// Name of route `i`: `forwarded`, or `<collective>.<algorithm>` (e.g. `allreduce.ll`).
pub fn route_name(i: usize) -> Option<String> {
    match i {
        FORWARDED => Some("forwarded".into()),
        _ => family_of_route(i).map(|f| format!("{}.{}", FAMILIES[f].coll, FAMILIES[f].algo)),
    }
}

/// Calls and bytes of one route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub calls: u64,
    pub bytes: u64,
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub routes: [Counter; ROUTES],
    pub reasons: [u64; Reason::ALL.len()],
}

impl Default for Snapshot {
    fn default() -> Self {
        Self { routes: [Counter::default(); ROUTES], reasons: [0; Reason::ALL.len()] }
    }
}

impl Snapshot {
    pub fn add(&mut self, o: &Snapshot) {
        for (a, b) in self.routes.iter_mut().zip(&o.routes) {
            a.calls += b.calls;
            a.bytes += b.bytes;
        }
        for (a, b) in self.reasons.iter_mut().zip(&o.reasons) {
            *a += b;
        }
    }

    /// Calls and bytes summed over the families whose algorithm is `algo` (`ll`, `lowp`, ...).
    pub fn algo(&self, algo: &str) -> Counter {
        self.algos(&[algo])
    }

    /// Calls and bytes summed over the families whose algorithm is one of `algos`.
    pub fn algos(&self, algos: &[&str]) -> Counter {
        FAMILIES
            .iter()
            .filter(|f| algos.contains(&f.algo))
            .map(|f| self.routes[f.route as usize])
            .fold(Counter::default(), |a, c| Counter { calls: a.calls + c.calls, bytes: a.bytes + c.bytes })
    }

    /// One line for the INFO log.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for (i, c) in self.routes.iter().enumerate() {
            if c.calls > 0 {
                s += &format!("{} {} calls {} B, ", route_name(i).unwrap_or_default(), c.calls, c.bytes);
            }
        }
        if s.is_empty() {
            s += "no intercepted calls";
        }
        let s = s.trim_end_matches(", ").to_string();
        let reasons: Vec<String> = Reason::ALL
            .iter()
            .zip(&self.reasons)
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{}={n}", r.c_name().to_string_lossy()))
            .collect();
        if reasons.is_empty() { s } else { format!("{s}; forwarded by reason: {}", reasons.join(" ")) }
    }
}

/// Live counters of one communicator.
pub struct Stats {
    routes: [[AtomicU64; 2]; ROUTES],
    reasons: [AtomicU64; Reason::ALL.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            routes: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            reasons: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Stats {
    /// Counts one call of `bytes` that `coll` took on `route`.
    pub fn count(&self, coll: crate::intercept::Coll, route: Route, bytes: u64) {
        match route {
            Route::Own(kernel) => match crate::intercept::family(FamilyKey::Coll(coll, kernel)) {
                Some(f) => self.count_family(f, bytes),
                None => self.count_forwarded(Reason::Failed, bytes),
            },
            // A plan counts itself, under its family (`plan::Plan::family`): not through here.
            Route::AcrossHosts(_) => self.count_forwarded(Reason::Failed, bytes),
            Route::Upstream(reason) => self.count_forwarded(reason, bytes),
        }
    }

    /// Counts one call of `bytes` run by a kernel of family `family` (index in `FAMILIES`).
    pub fn count_family(&self, family: usize, bytes: u64) {
        if let Some(f) = FAMILIES.get(family) {
            let i = f.route as usize;
            self.routes[i][0].fetch_add(1, Relaxed);
            self.routes[i][1].fetch_add(bytes, Relaxed);
        }
    }

    /// Counts one call of `bytes` that went to the stock library (or failed) for `reason`.
    pub fn count_forwarded(&self, reason: Reason, bytes: u64) {
        self.reasons[reason as usize].fetch_add(1, Relaxed);
        self.routes[FORWARDED][0].fetch_add(1, Relaxed);
        self.routes[FORWARDED][1].fetch_add(bytes, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            routes: std::array::from_fn(|i| Counter {
                calls: self.routes[i][0].load(Relaxed),
                bytes: self.routes[i][1].load(Relaxed),
            }),
            reasons: std::array::from_fn(|i| self.reasons[i].load(Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LowpCodec;
    use crate::intercept::{Coll, Kernel};

    #[test]
    fn counts_per_route_and_reason() {
        let s = Stats::default();
        s.count(Coll::AllReduce, Route::Own(Kernel::FLAT), 100);
        s.count(Coll::AllReduce, Route::Own(Kernel::FLAT), 28);
        s.count(Coll::AllGather, Route::Own(Kernel::coded(Coll::AllGather, LowpCodec::Fp8)), 5);
        s.count(Coll::AllGather, Route::Upstream(Reason::Size), 7);
        let snap = s.snapshot();
        let flat = crate::intercept::family(FamilyKey::Coll(Coll::AllReduce, Kernel::FLAT)).unwrap();
        assert_eq!(snap.routes[family_route(flat)], Counter { calls: 2, bytes: 128 });
        assert_eq!(snap.routes[FORWARDED], Counter { calls: 1, bytes: 7 });
        assert_eq!(snap.reasons[Reason::Size as usize], 1);
        assert_eq!(snap.algo("lowp"), Counter { calls: 1, bytes: 5 });
        assert!(snap.summary().contains("allreduce.flat 2 calls 128 B"), "{}", snap.summary());
        assert!(snap.summary().contains("size=1"));
    }

    #[test]
    fn route_names_are_unique() {
        let mut names: Vec<String> = (0..ROUTES).map(|i| route_name(i).unwrap()).collect();
        assert_eq!(route_name(ROUTES), None);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ROUTES);
    }
}
