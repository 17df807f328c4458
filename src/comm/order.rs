//! Ordering a communicator's operations across streams, as the stock library does: each
//! operation waits for the previous one of the same communicator, whatever its stream.
//!
//! The stock library orders its own operations, but not rcclx's kernels, which share the
//! clique's staging buffers and window counters: two rcclx kernels of one communicator running
//! at once on two streams would race (and ranks could pair different calls). So every
//! operation of a communicator that has rcclx kernels (rcclx's or the stock library's) goes
//! through [`Order::before`] and [`Order::after`]:
//! * after every operation enqueued outside a capture, one event is recorded on its stream
//!   (the stock library also records after every launch);
//! * at a switch from stream P to stream S, S waits for that event. A switch never touches P,
//!   which the application may have destroyed since. (Only an operation deferred to the end of
//!   a stock group has no event; a switch right after it records on P then.)
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
    /// The previous operation's stream and whether it was being captured (`None` before the first).
    last: Option<(usize, bool)>,
    event: Option<Event>,
    /// The event marks the previous operation (recorded right after it).
    current: bool,
    /// An operation was captured into a graph (its replays are not covered by the event).
    captured_any: bool,
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
        let rt = gpu::runtime()?;
        let captured = rt.is_capturing(now)?;
        inner.captured_any |= captured;
        let now = now.as_raw() as usize;
        let Some((prev, prev_captured)) = inner.last.replace((now, captured)) else { return Ok(()) };
        if prev == now {
            return Ok(());
        }
        if prev_captured != captured {
            tracing::debug!("rcclx: stream switch between a captured and an uncaptured stream left unordered");
            inner.current = false;
            return Ok(());
        }
        let _guard = rt.device_guard(device)?;
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
        let Some((last, captured)) = inner.last else { return Ok(()) };
        if !launched || captured {
            return Ok(()); // an event recorded in a capture must not be waited for outside it
        }
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(device)?;
        let event = inner.event(device)?;
        rt.record_event(event, stream(last))?;
        inner.current = true;
        Ok(())
    }
}

impl Order {
    /// Whether every operation of the communicator has completed, as the event after the last
    /// one says (never waits). `false` when that is unknown: an operation without an event of
    /// its own, or one captured into a graph.
    pub fn settled(&self) -> bool {
        let inner = self.inner.lock();
        match (inner.last, inner.current, inner.event) {
            _ if inner.captured_any => false,
            (None, _, _) => true,
            (Some(_), true, Some(event)) => gpu::runtime().is_ok_and(|rt| rt.query_event(event).unwrap_or(false)),
            _ => false,
        }
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
