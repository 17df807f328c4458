//! The GPU through `rcclx::gpu`, as the programs use it: the runtime with enough devices (or
//! the "no GPU" exit), and stream waits with a deadline.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use rcclx::gpu::{Runtime, Stream};

use crate::results::{EXIT_FAILED, EXIT_NO_GPU, Fail};

/// The GPU runtime if it sees at least `min_devices` devices; otherwise prints
/// `<program>: no GPU: <why>` and returns the exit status [`EXIT_NO_GPU`].
pub fn runtime_or_exit(program: &str, min_devices: usize) -> Result<&'static Runtime, ExitCode> {
    let why = match rcclx::gpu::runtime() {
        Ok(rt) if rt.device_count() as usize >= min_devices => return Ok(rt),
        Ok(rt) => format!("needs {min_devices} GPUs, the runtime sees {}", rt.device_count()),
        Err(e) => e.to_string(),
    };
    println!("{program}: no GPU: {why}");
    Err(ExitCode::from(EXIT_NO_GPU))
}

/// Waits up to `limit` for `stream` to finish; the error names `what`.
pub fn wait_stream(rt: &Runtime, stream: Stream, limit: Duration, what: &str) -> Result<(), Fail> {
    match rt.wait_stream(stream, limit) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Fail(format!("{what}: not finished after {} s", limit.as_secs_f64()))),
        Err(e) => Err(Fail(format!("{what}: stream wait: {e}"))),
    }
}

/// As [`wait_stream`], but a stream that does not finish ends the process (`FATAL ...`, exit
/// status [`EXIT_FAILED`]): its kernels cannot be stopped, so nothing after them could run.
pub fn wait_stream_or_exit(rt: &Runtime, stream: Stream, limit: Duration, what: &str) -> Result<(), Fail> {
    match rt.wait_stream(stream, limit) {
        Ok(true) => Ok(()),
        Ok(false) => {
            println!("FATAL {what}: stream did not finish within {} s", limit.as_secs_f64());
            let _ = std::io::stdout().flush();
            std::process::exit(EXIT_FAILED.into());
        }
        Err(e) => Err(Fail(format!("stream wait: {e}"))),
    }
}
