//! The watchdog: a program marks progress with [`progress`]; when no mark comes for the stall
//! limit given to [`start`], the process prints `FAIL <check> stalled: ...` for the check then
//! running (named by [`check`], which `Tally::check` calls), then `FATAL no progress for N s
//! during: <phase>`, and exits with [`EXIT_STALL`]. So a check that hangs fails under its own
//! name within the stall limit instead of using up the caller's timeout silently. The programs bound every wait of their own; this also catches a
//! call that never returns (a driver call, a collective whose peer is gone), which no timeout
//! of theirs can interrupt.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Exit status: the watchdog saw no progress for its stall limit (beside `results`'
/// `EXIT_FAILED` and `EXIT_NO_GPU`).
pub const EXIT_STALL: u8 = 3;

/// How often the watchdog looks.
const POLL: Duration = Duration::from_secs(2);

static LAST_PROGRESS_MS: AtomicU64 = AtomicU64::new(0);
static PHASE: Mutex<String> = Mutex::new(String::new());
/// The check now running (empty: none, or between checks).
static CHECK: Mutex<String> = Mutex::new(String::new());

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Marks progress; `phase` is what the program does now (named if it stalls there).
pub fn progress(phase: &str) {
    LAST_PROGRESS_MS.store(epoch().elapsed().as_millis() as u64, Ordering::Relaxed);
    if let Ok(mut p) = PHASE.lock() {
        p.clear();
        p.push_str(phase);
    }
}

/// Names the check that starts now (empty: none) and marks progress: each check gets the whole
/// stall limit, and a stall is reported as its failure.
pub fn check(name: &str) {
    if let Ok(mut c) = CHECK.lock() {
        c.clear();
        c.push_str(name);
    }
    progress(if name.is_empty() { "between checks" } else { name });
}

/// The lines printed for a stall of `limit` in `phase` during check `check` (empty: none).
fn stall_report(check: &str, phase: &str, limit: Duration) -> String {
    let fatal = format!("FATAL no progress for {} s during: {phase}", limit.as_secs());
    if check.is_empty() {
        fatal
    } else {
        format!("FAIL {check} stalled: no progress for {} s during: {phase}\n{fatal}", limit.as_secs())
    }
}

/// Starts the watchdog thread (call once). It reads no environment variables, so a program
/// may still change its environment afterwards.
pub fn start(stall_limit: Duration) {
    progress("start");
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(POLL);
            let last = Duration::from_millis(LAST_PROGRESS_MS.load(Ordering::Relaxed));
            if epoch().elapsed().saturating_sub(last) > stall_limit {
                let phase = PHASE.lock().map(|p| p.clone()).unwrap_or_default();
                let check = CHECK.lock().map(|c| c.clone()).unwrap_or_default();
                println!("{}", stall_report(&check, &phase, stall_limit));
                let _ = std::io::stdout().flush();
                std::process::exit(EXIT_STALL.into());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_fails_the_check_by_name() {
        let r = stall_report("destroy-race", "destroy-race cycle", Duration::from_secs(90));
        assert_eq!(
            r,
            "FAIL destroy-race stalled: no progress for 90 s during: destroy-race cycle\nFATAL no progress for 90 s during: destroy-race cycle"
        );
        assert_eq!(stall_report("", "start", Duration::from_secs(5)), "FATAL no progress for 5 s during: start");
    }
}
