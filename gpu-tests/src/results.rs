//! What a test program reports: one `PASS|FAIL|SKIP <name> <detail>` line per check or case,
//! then `N passed, M failed` (the GPU suite, `scripts/gpu-tests.sh`, picks these lines up), and
//! the exit status.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::time::Instant;

/// Exit status: a check failed. (0: everything passed or was skipped.)
pub const EXIT_FAILED: u8 = 1;
/// Exit status: no GPU runtime, too few GPUs, or bad arguments.
pub const EXIT_NO_GPU: u8 = 2;

/// The program's options parsed from its arguments, or (bad arguments, `-h`) the error and the
/// usage on stderr and the exit status [`EXIT_NO_GPU`]. `parse` returns an empty error for `-h`.
pub fn options_or_exit<T>(
    program: &str,
    usage: &str,
    parse: impl FnOnce(Vec<String>) -> Result<T, String>,
) -> Result<T, ExitCode> {
    parse(std::env::args().skip(1).collect()).map_err(|e| {
        if !e.is_empty() {
            eprintln!("{program}: {e}");
        }
        eprintln!("{usage}");
        ExitCode::from(EXIT_NO_GPU)
    })
}

/// Why a check (or a child's role) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail(pub String);

impl From<rcclx::gpu::Error> for Fail {
    fn from(e: rcclx::gpu::Error) -> Self {
        Fail(e.to_string())
    }
}
impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        Fail(format!("i/o: {e}"))
    }
}
impl From<String> for Fail {
    fn from(s: String) -> Self {
        Fail(s)
    }
}
impl From<&str> for Fail {
    fn from(s: &str) -> Self {
        Fail(s.to_string())
    }
}

/// A check that did not fail: passed, or skipped (e.g. it needs more GPUs), with its detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass(String),
    Skip(String),
}

/// Counts results as they are printed and prints the summary.
#[derive(Debug, Default)]
pub struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
    /// [`Tally::check`] appends the check's wall time to PASS and FAIL lines.
    timed: bool,
}

impl Tally {
    pub fn new() -> Tally {
        Tally::default()
    }

    /// A tally whose [`Tally::check`] lines end with ` [<seconds> s]`.
    pub fn timed() -> Tally {
        Tally { timed: true, ..Tally::default() }
    }

    /// Prints `line` (which starts with its own `PASS`/`FAIL`) and counts it.
    pub fn record(&mut self, ok: bool, line: &str) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        println!("{line}");
    }

    /// Runs one named check and prints its line; a panic in it is a failure. The watchdog (if
    /// started) reports a stall meanwhile as this check's failure.
    pub fn check(&mut self, name: &str, check: impl FnOnce() -> Result<Outcome, Fail>) {
        let started = Instant::now();
        crate::watchdog::check(name);
        let outcome = catch_unwind(AssertUnwindSafe(check));
        crate::watchdog::check("");
        let time = if self.timed { format!(" [{:.1} s]", started.elapsed().as_secs_f64()) } else { String::new() };
        match outcome {
            Ok(Ok(Outcome::Pass(detail))) => self.record(true, &format!("PASS {name} {detail}{time}")),
            Ok(Ok(Outcome::Skip(detail))) => {
                self.skipped += 1;
                println!("SKIP {name} {detail}");
            }
            Ok(Err(Fail(detail))) => self.record(false, &format!("FAIL {name} {detail}{time}")),
            Err(_) => self.record(false, &format!("FAIL {name} panicked")),
        }
    }

    /// Counts failures that have no line of their own (e.g. a process that died).
    pub fn count_failures(&mut self, n: usize) {
        self.failed += n;
    }

    pub fn failed(&self) -> usize {
        self.failed
    }

    /// Whether the run passed: nothing failed, and something passed (a run that checked
    /// nothing, say a filter that matched no case, asserted nothing: a failure).
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.passed > 0
    }

    /// Prints `N passed, M failed` (and `, K skipped` if any were) and returns the exit status:
    /// success, or [`EXIT_FAILED`] if anything failed or nothing passed.
    pub fn finish(self) -> ExitCode {
        let skipped = if self.skipped > 0 { format!(", {} skipped", self.skipped) } else { String::new() };
        println!("{} passed, {} failed{skipped}", self.passed, self.failed);
        if self.passed == 0 && self.failed == 0 {
            println!("FAIL no check passed: nothing was asserted");
        }
        if self.ok() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_checked_nothing_fails() {
        assert!(!Tally::new().ok(), "zero cases passed");
        let mut t = Tally::new();
        t.check("skipped", || Ok(Outcome::Skip("needs 2 GPUs".into())));
        assert!(!t.ok(), "only skips passed");
        t.check("one", || Ok(Outcome::Pass(String::new())));
        assert!(t.ok());
        t.check("two", || Err(Fail("no".into())));
        assert!(!t.ok());
    }
}
