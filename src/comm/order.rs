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
//! Operations enqueued outside a capture and captured ones are ordered apart: an eager
//! operation waits for the previous eager one (a captured one in between runs only at replay),
//! and a captured one for the previous one of the same capture (an event recorded and waited
//! for inside one capture joins its streams in the graph). No event crosses a capture boundary
//! (`cudaErrorStreamCaptureIsolation`): between captures, and between a capture and eager work,
//! ordering is the application's, like the stock library's rule that a group's streams are all
//! captured or none.

use parking_lot::Mutex;

use crate::clique::Fence;
use crate::error::Error;
use crate::gpu::{self, Event, Stream};

/// The previous operations of a communicator and the events that join streams.
#[derive(Default)]
pub struct Order {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The last operation given to `before`: its stream and capture (`None`: eager).
    now: Option<(usize, Option<u64>)>,
    /// The stream of the last operation enqueued outside a capture (`None` before the first).
    last_eager: Option<usize>,
    /// Recorded after eager operations; outside any capture.
    event: Option<Event>,
    /// `event` was recorded right after `last_eager`'s operation: it covers every operation
    /// enqueued outside a capture so far (each switch waited for the previous one).
    fenced: bool,
    /// The last captured operation: its capture and stream.
    last_captured: Option<(u64, usize)>,
    /// Recorded and waited for inside captures only; `capture_marked`: recorded right after
    /// `last_captured`'s operation (in its capture).
    capture_event: Option<Event>,
    capture_marked: bool,
}

// SAFETY: `Event` is an opaque handle usable from any thread; the mutex serializes its use.
unsafe impl Send for Inner {}

fn stream(raw: usize) -> Stream {
    // SAFETY: the raw value of a `Stream` given to `Order::before`.
    unsafe { Stream::from_raw(raw as *mut std::ffi::c_void) }
}

fn event_in(slot: &mut Option<Event>, device: i32) -> Result<Event, Error> {
    match *slot {
        Some(e) => Ok(e),
        None => Ok(*slot.insert(gpu::runtime()?.create_event(device)?)),
    }
}

impl Order {
    /// Orders an operation on `now` (a stream of device `device`) after the previous one of its
    /// kind (eager, or of the same capture); whether `now` is being captured into a graph.
    pub fn before(&self, device: i32, now: Stream) -> Result<bool, Error> {
        let mut inner = self.inner.lock();
        let rt = gpu::runtime()?;
        let capture = rt.capture_id(now)?;
        let raw = now.as_raw() as usize;
        inner.now = Some((raw, capture));
        match capture {
            None => {
                let Some(prev) = inner.last_eager.filter(|&p| p != raw) else { return Ok(false) };
                let _guard = rt.device_guard(device)?;
                let event = event_in(&mut inner.event, device)?;
                if !inner.fenced {
                    rt.record_event(event, stream(prev))?;
                    inner.fenced = true;
                }
                rt.stream_wait_event(now, event)?;
                Ok(false)
            }
            Some(id) => {
                // `capture_event` marks the last captured operation (recorded right after it, in
                // its capture): waiting for it joins the streams inside this graph.
                if !inner.last_captured.is_some_and(|(c, p)| c == id && p != raw) {
                    return Ok(true);
                }
                let Some(event) = inner.capture_event.filter(|_| inner.capture_marked) else { return Ok(true) };
                let _guard = rt.device_guard(device)?;
                rt.stream_wait_event(now, event)?;
                Ok(true)
            }
        }
    }

    /// After an operation was enqueued on the stream given to [`Order::before`]; `launched`:
    /// its work is on the stream now (not deferred to the end of a stock group).
    pub fn after(&self, device: i32, launched: bool) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        // Also called again, with `launched`, at the end of a group for its last operation.
        let Some((last, capture)) = inner.now else { return Ok(()) };
        if let Some(id) = capture {
            inner.last_captured = Some((id, last));
            inner.capture_marked = false;
            if !launched {
                return Ok(());
            }
            let rt = gpu::runtime()?;
            // A group's end may come after the capture ended: nothing to mark in it then.
            if rt.capture_id(stream(last))? != Some(id) {
                return Ok(());
            }
            let _guard = rt.device_guard(device)?;
            let event = event_in(&mut inner.capture_event, device)?;
            rt.record_event(event, stream(last))?;
            inner.capture_marked = true;
            return Ok(());
        }
        // An operation outside a capture (one whose launch failed never gets here): the fence
        // must cover it from now on.
        inner.last_eager = Some(last);
        inner.fenced = false;
        if !launched {
            return Ok(());
        }
        let rt = gpu::runtime()?;
        let _guard = rt.device_guard(device)?;
        let event = event_in(&mut inner.event, device)?;
        rt.record_event(event, stream(last))?;
        inner.fenced = true;
        Ok(())
    }
}

impl Order {
    /// What says that every operation of the communicator enqueued outside a capture has ended
    /// (the graphs that captured its kernels are tracked by the clique): the event after the
    /// last one, handed over (recorded now on that operation's stream if it has none yet: an
    /// operation forwarded inside a group that never ended). Never waits. The communicator
    /// records nothing more after this (it has ended).
    pub fn take_fence(&self, device: i32) -> Fence {
        let mut inner = self.inner.lock();
        let Some(last) = inner.last_eager else { return Fence::Ended };
        let Ok(rt) = gpu::runtime() else { return Fence::Unknown };
        if !inner.fenced {
            let recorded = rt.device_guard(device).map_err(Error::from).and_then(|_g| {
                let event = event_in(&mut inner.event, device)?;
                rt.record_event(event, stream(last))?;
                Ok(())
            });
            if let Err(e) = recorded {
                tracing::warn!("rcclx: marking a communicator's last operation: {e}; its memory is kept");
                return Fence::Unknown;
            }
            inner.fenced = true;
        }
        match inner.event.take() {
            Some(e) => Fence::Event(e),
            None => Fence::Unknown,
        }
    }
}

impl Drop for Order {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        for e in [inner.event.take(), inner.capture_event.take()].into_iter().flatten() {
            if let Ok(rt) = gpu::runtime() {
                // SAFETY: the event was made by `create_event` and nothing uses it any more.
                let _ = unsafe { rt.destroy_event(e) };
            }
        }
    }
}
