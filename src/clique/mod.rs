//! Layer `clique`: the peer resources that DDA and low-precision kernels share, for one
//! communicator: this rank's staging buffer, flag array, LL inbox, window counters and status
//! word, every peer's mapped into this process, and what every rank agreed at setup.
//!
//! Layer: above `gpu`, `error`, `upstream`, `intercept`, `kernels`; below `dda`, `lowp`, `comm`.
//! It never looks into `comm`: [`Setup`] hands the finished [`Clique`]s back to the caller.
//!
//! Files, one job each: `setup.rs` runs the setup state machine (the three exchanges, the verdict)
//! and hands back [`Clique`]s; `local.rs` is one rank's work at each step (its record, buffers,
//! mappings, rail, and the clique it ends with); `fault.rs` the setup sites tests make fail; `live.rs` is an established clique
//! (kernel lookup, launch, abort, release); `exchange.rs` is setup's transport, `record.rs` what it
//! exchanges; `lease.rs` and `teardown.rs` say when a clique's memory goes back to the pool;
//! `args.rs` mirrors the kernels' argument structs; `p2p.rs` says whether the stock library would
//! let a host's GPUs go peer to peer; `rankmap.rs` groups a communicator's ranks
//! by host, and `rail.rs` makes and ends the rails of one spanning hosts, and runs the stock
//! steps plans take on them. Children import from each other, never from
//! this file (`tests/layers.rs`).

pub mod args;
mod exchange;
mod fault;
pub mod host;
mod lease;
mod live;
mod local;
mod p2p;
pub mod rail;
mod rankmap;
mod record;
mod setup;
mod teardown;

pub use args::{
    A2AV_CODED, A2AV_HEADER_BYTES, A2AV_RECV_PACKED, A2AV_SEND_PACKED, AllToAllvArgs, Buffers, FLAG_STRIDE, Grid,
    KernelArgs, LL128_MAX_BLOCKS, LL128_MIN_PAYLOAD, LL128_REGION_BYTES, LL128_SLOT_BYTES, LL128_SLOTS, Launch,
    LaunchArgs, MAX_RANKS, RAIL_WINDOW, THREADS, Work,
};
pub use exchange::{Member, StockTransport, Transport};
pub use fault::Fault;
pub use live::{Clique, Kernel, Span};
pub use local::{DEFAULT_STAGING, DEFAULT_STAGING_LOWP, Sharing, local_fabric};
pub use rail::StockStep;
pub use setup::{Outcome, Setup, TIMED_OUT, establish, lacks_stock_calls};
pub use teardown::{
    Counts as TeardownCounts, Fence, counts as teardown_counts, pending as ended_not_pooled, wait_pooled,
};
