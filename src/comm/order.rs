//! Ordering a communicator's operations across streams, as the stock library does: each
//! operation waits for the previous one of the same communicator, whatever its stream.
//!
//! The stock library orders its own operations, but not rcclx's kernels, which share the
//! clique's staging buffers and window counters: two rcclx kernels of one communicator running
//! at once on two streams would race (and ranks could pair different calls). So every
//! operation of a communicator that has rcclx kernels (rcclx's or the stock library's) goes
//! through [`Order::before`] and [`Order::after`]:
//! * consecutive operations on one stream cost one comparison;
//! * at a switch from stream P to stream S, S waits for an event that marks P's last operation:
//!   recorded on P right then the first time, and, once the communicator has switched streams
//!   (it may again), recorded after every operation (so a later switch never touches a stream
//!   the application may have destroyed since; the stock library records after every launch).
//!
//! Inside CUDA/HIP graph capture the streams of a graph are the application's to join; a
//! switch between a capturing and a non-capturing stream (which no event may cross) is left
//! unordered, like the stock library's own rule that a group's streams are all captured or none.

use parking_lot::Mutex;

use crate::error::Error;
use crate::gpu::{self, Event, Stream};

/// The stream of a communicator's previous operation and the event that joins streams.
#[derive(Default)]
pub struct Order {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The previous operation's stream (`None` before the first).
    last: Option<usize>,
    event: Option<Event>,
    /// The event marks the previous operation (recorded right after it).
    current: bool,
    /// The communicator has used more than one stream: record after every operation.
    multi: bool,
}

// SAFETY: `Event` is an opaque handle usable from any thread; the mutex serializes its use.
unsafe impl Send for Inner {}

fn stream(raw: usize) -> Stream {
    // SAFETY: the raw value of a `Stream` given to `Order::before`.
    unsafe { Stream::from_raw(raw as *mut std::ffi::c_void) }
}

impl Inner {
    fn event(&mut self, device: i32) -> Result<Event, Error> {
        match self.event {
            Some(e) => Ok(e),
            None => Ok(*self.event.insert(gpu::runtime()?.create_event(device)?)),
        }
    }
}

impl Order {
    /// Orders an operation on `now` (a stream of device `device`) after the previous one.
    pub fn before(&self, device: i32, now: Stream) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        let now = now.as_raw() as usize;
        let Some(prev) = inner.last.replace(now) else { return Ok(()) };
        if prev == now {
            return Ok(());
        }
        inner.multi = true;
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(device)?;
        if rt.is_capturing(stream(prev))? != rt.is_capturing(stream(now))? {
            tracing::debug!("rcclx: stream switch between a captured and an uncaptured stream left unordered");
            inner.current = false;
            return Ok(());
        }
        let event = inner.event(device)?;
        if !inner.current {
            rt.record_event(event, stream(prev))?;
        }
        rt.stream_wait_event(stream(now), event)?;
        Ok(())
    }

    /// After an operation was enqueued on the stream given to [`Order::before`]; `launched`:
    /// its work is on the stream now (not deferred to the end of a stock group).
    pub fn after(&self, device: i32, launched: bool) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        inner.current = false;
        if !(inner.multi && launched) {
            return Ok(());
        }
        let Some(last) = inner.last else { return Ok(()) };
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(device)?;
        if rt.is_capturing(stream(last))? {
            return Ok(()); // an event recorded in a capture must not be waited for outside it
        }
        let event = inner.event(device)?;
        rt.record_event(event, stream(last))?;
        inner.current = true;
        Ok(())
    }
}

impl Drop for Order {
    fn drop(&mut self) {
        if let (Some(e), Ok(rt)) = (self.inner.get_mut().event.take(), gpu::runtime()) {
            // SAFETY: the event was made by `create_event` and nothing uses it any more.
            let _ = unsafe { rt.destroy_event(e) };
        }
    }
}
