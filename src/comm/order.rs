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

use crate::clique::Fence;
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
    /// The stream of the last operation enqueued outside a capture (`None` before the first).
    last_eager: Option<usize>,
    /// The event was recorded after that operation: it covers every operation enqueued
    /// outside a capture so far (each stream switch waited for the previous one).
    fenced: bool,
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
    /// Orders an operation on `now` (a stream of device `device`) after the previous one;
    /// whether `now` is being captured into a graph.
    pub fn before(&self, device: i32, now: Stream) -> Result<bool, Error> {
        let mut inner = self.inner.lock();
        let rt = gpu::runtime()?;
        let captured = rt.is_capturing(now)?;
        let now = now.as_raw() as usize;
        let Some((prev, prev_captured)) = inner.last.replace((now, captured)) else { return Ok(captured) };
        if prev == now {
            return Ok(captured);
        }
        if prev_captured != captured {
            tracing::debug!("rcclx: stream switch between a captured and an uncaptured stream left unordered");
            inner.current = false;
            return Ok(captured);
        }
        let _guard = rt.device_guard(device)?;
        let event = inner.event(device)?;
        if !inner.current {
            rt.record_event(event, stream(prev))?;
        }
        rt.stream_wait_event(stream(now), event)?;
        Ok(captured)
    }

    /// After an operation was enqueued on the stream given to [`Order::before`]; `launched`:
    /// its work is on the stream now (not deferred to the end of a stock group).
    pub fn after(&self, device: i32, launched: bool) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        inner.current = false;
        let Some((last, captured)) = inner.last else { return Ok(()) };
        if captured {
            return Ok(()); // an event recorded in a capture must not be waited for outside it
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
        let event = inner.event(device)?;
        rt.record_event(event, stream(last))?;
        inner.current = true;
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
                let event = inner.event(device)?;
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
        if let (Some(e), Ok(rt)) = (self.inner.get_mut().event.take(), gpu::runtime()) {
            // SAFETY: the event was made by `create_event` and nothing uses it any more.
            let _ = unsafe { rt.destroy_event(e) };
        }
    }
}
