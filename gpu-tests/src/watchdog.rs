//! The watchdog: a program marks progress with [`progress`]; when no mark comes for the stall
//! limit given to [`start`], the process prints `FATAL no progress for N s during: <phase>` and
//! exits with [`EXIT_STALL`]. The programs bound every wait of their own; this also catches a
//! call that never returns (a driver call, a collective whose peer is gone), which no timeout
//! of theirs can interrupt.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::results::EXIT_STALL;

/// How often the watchdog looks.
const POLL: Duration = Duration::from_secs(2);

static LAST_PROGRESS_MS: AtomicU64 = AtomicU64::new(0);
static PHASE: Mutex<String> = Mutex::new(String::new());

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
                println!("FATAL no progress for {} s during: {phase}", stall_limit.as_secs());
                let _ = std::io::stdout().flush();
                std::process::exit(EXIT_STALL.into());
            }
        }
    });
}
