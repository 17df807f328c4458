//! Child processes: copies of the running program in another role (chosen by their arguments),
//! spoken to one line at a time over their stdin and stdout. Lines are read on background
//! threads, so every wait for one has a deadline; a child still running when its owner is
//! dropped is killed.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::results::Fail;

/// One line from another process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Which sender: the child's index in [`Children`] (0 for [`Lines::stdin`]).
    pub from: usize,
    /// The line without its newline; `None` once that sender's output has ended.
    pub text: Option<String>,
}

/// Lines arriving from other processes.
pub struct Lines(Receiver<Line>);

impl Lines {
    /// This process's stdin: in a child, the parent's messages.
    pub fn stdin() -> Lines {
        let (tx, rx) = mpsc::channel();
        forward_lines(std::io::stdin(), 0, tx);
        Lines(rx)
    }

    /// The next line from any sender, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Result<Line, RecvTimeoutError> {
        self.0.recv_timeout(timeout)
    }

    /// Waits at most `limit` for the line `key` or `key rest` and returns `rest` (empty for a
    /// bare `key`). `ERROR <text>` from the other side fails at once; other lines are echoed to
    /// stderr. Meant for one sender, called `from` in the messages.
    pub fn expect(&self, key: &str, from: &str, limit: Duration) -> Result<String, Fail> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let text = match self.recv(left) {
                Ok(Line { text: Some(text), .. }) => text,
                Ok(Line { text: None, .. }) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(Fail(format!("the {from} closed the pipe before sending {key}")));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Fail(format!("no {key} from the {from} within {} s", limit.as_secs_f64())));
                }
            };
            if let Some(rest) = text.strip_prefix("ERROR ") {
                return Err(Fail(format!("{from}: {rest}")));
            }
            if text == key {
                return Ok(String::new());
            }
            if let Some(rest) = text.strip_prefix(key).and_then(|r| r.strip_prefix(' ')) {
                return Ok(rest.to_string());
            }
            eprintln!("  ({from}) {text}");
        }
    }
}

/// Sends every line of `input` as coming `from`, then the end of output.
fn forward_lines(input: impl Read + Send + 'static, from: usize, tx: Sender<Line>) {
    std::thread::spawn(move || {
        for line in BufReader::new(input).lines() {
            let Ok(text) = line else { break };
            if tx.send(Line { from, text: Some(text) }).is_err() {
                return;
            }
        }
        let _ = tx.send(Line { from, text: None });
    });
}

/// Writes one message line to the parent (stdout, flushed at once).
pub fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Copies of this program in child roles; their stdout lines arrive merged in [`Children::lines`],
/// tagged with the child's index.
pub struct Children {
    procs: Vec<Child>,
    stdins: Vec<ChildStdin>,
    lines: Lines,
}

impl Children {
    /// Starts one child per argument list (stdin and stdout piped to us, stderr inherited).
    pub fn spawn(
        arg_lists: impl IntoIterator<Item = impl IntoIterator<Item = impl AsRef<OsStr>>>,
    ) -> Result<Children, Fail> {
        let exe = std::env::current_exe()?;
        let (tx, rx) = mpsc::channel();
        // Children already started are killed (by drop) if a later one fails to start.
        let mut children = Children { procs: Vec::new(), stdins: Vec::new(), lines: Lines(rx) };
        for (index, args) in arg_lists.into_iter().enumerate() {
            let mut child = Command::new(&exe)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| Fail(format!("starting child {index}: {e}")))?;
            let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
            children.procs.push(child);
            let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
                return Err(Fail(format!("child {index} has no pipes")));
            };
            children.stdins.push(stdin);
            forward_lines(stdout, index, tx.clone());
        }
        Ok(children)
    }

    /// The children's output, merged.
    pub fn lines(&self) -> &Lines {
        &self.lines
    }

    /// Sends one line to child `index`.
    pub fn send(&mut self, index: usize, line: &str) -> Result<(), Fail> {
        let stdin = &mut self.stdins[index];
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    pub fn kill_all(&mut self) {
        for child in &mut self.procs {
            let _ = child.kill();
        }
    }

    /// Waits at most `limit` in all for every child to exit and kills those still running
    /// then. Per child: its exit status, or why there is none.
    pub fn wait_all(&mut self, limit: Duration) -> Vec<Result<ExitStatus, Fail>> {
        let deadline = Instant::now() + limit;
        let names: Vec<String> = (0..self.procs.len()).map(|i| self.name(i)).collect();
        self.procs
            .iter_mut()
            .zip(names)
            .map(|(child, name)| {
                loop {
                    match child.try_wait() {
                        Ok(Some(status)) => break Ok(status),
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                        result => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break Err(match result {
                                Err(e) => Fail(format!("{name}: {e}")),
                                _ => Fail(format!("{name} still running after {} s; killed", limit.as_secs_f64())),
                            });
                        }
                    }
                }
            })
            .collect()
    }

    /// [`Children::wait_all`], and every child must have exited successfully.
    pub fn finish(&mut self, limit: Duration) -> Result<(), Fail> {
        for (index, result) in self.wait_all(limit).into_iter().enumerate() {
            let status = result?;
            if !status.success() {
                return Err(Fail(format!("{} exited with {status}", self.name(index))));
            }
        }
        Ok(())
    }

    /// `child`, or `child N` when there are several.
    fn name(&self, index: usize) -> String {
        if self.procs.len() == 1 { "child".into() } else { format!("child {index}") }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.procs {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
