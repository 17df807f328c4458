//! Setting up a clique, for a batch of communicators.
//!
//! Setup ([`Setup::start`], then [`Setup::poll`] until done; [`establish`] does both and waits):
//! 1. Each rank fills a [`record::Record`] (host, pid, device and its GPU's identity, arch,
//!    `Policies`): nothing is allocated yet. A rank that cannot take part (no kernels for its
//!    arch) still sends one, with `capable = 0`.
//! 2. An all-gather of the records through a [`Transport`]: the library's is `ncclAllGather` on
//!    the stock communicator, for all communicators of the batch in one stock group (one thread
//!    may own several ranks of a clique).
//! 3. From the records every rank computes the same verdict (one host, all capable, same arch
//!    and sizes, 2..=8 ranks, each on a GPU of its own unless the setup's [`Sharing`] allows
//!    otherwise). Only then does it allocate (so a communicator rcclx will not use costs no
//!    memory), and a second all-gather carries the records again with the buffers' IPC handles
//!    and pointers (`capable = 0`: this rank's allocation failed).
//! 4. With every rank's buffers, each rank joins the clique's lease (`lease.rs`) and maps its
//!    peers: raw pointers plus peer access for peers in its own process (IPC cannot open a handle
//!    in the process that made it), IPC for the others.
//! 5. A third exchange of "my mappings worked": the kernels are on iff they worked everywhere.
//!
//! [`Setup::with`] takes the members, the transport and the sharing explicitly: that is how a
//! test harness runs several ranks on one GPU (which the stock library refuses) through this
//! same setup and these same kernels (`gpu-tests/src/world.rs`).
//!
//! Every rank takes part in all three exchanges and reaches the same verdict: a local failure
//! (lease, allocation, mapping) travels as `capable = 0` or a "mapped" bit of 0, and every rank
//! turns the kernels off (every call forwards). An exchange that fails or a time limit that
//! passes ends [`Setup::poll`] with an error, which the caller turns into a communicator in
//! error; its peers time out into the same error. A rank that ends without a clique buries the
//! buffers whose handles it published (`teardown.rs`) and never frees anything.
//! The exchanges are the communicator's first operations on every rank (the caller makes sure
//! no user operation is issued before setup ends), so they never put ranks out of step.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::types::{ncclComm_t, ncclResult_t};
use crate::upstream;

use super::args::MAX_COMM_RANKS;
use super::exchange::{Member, StockTransport, Transport};
use super::host;
use super::live::Clique;
use super::record::{self, Record};

use super::fault::Fault;
use super::local::{Local, Mapped, Place, Sharing, allocate_for, assemble, describe, map_clique, start_rails};

/// A batch of communicators being set up together (all owned by the calling thread).
pub struct Setup {
    locals: Vec<Local>,
    transport: Box<dyn Transport>,
    stage: Stage,
    started: Instant,
    /// No exchange is posted after this much time (`None`: no bound).
    limit: Option<Duration>,
}

enum Stage {
    /// Waiting for the records.
    Records,
    /// Waiting for the records with the buffers' handles.
    Handles,
    /// Waiting for the rails' splits (a communicator spanning hosts); rank 0's record and the
    /// pointers mapped, per member.
    Rails(Vec<Record>, Vec<Option<Mapped>>),
    /// Waiting for every rank's "mapped" bit; rank 0's record and the pointers mapped, per
    /// member.
    Verdicts(Vec<Record>, Vec<Option<Mapped>>),
    Done,
}

/// The outcome per communicator: its clique, or none (every call forwards).
pub type Outcome = Vec<(ncclComm_t, Option<Clique>)>;

/// The code of a setup that ran past its limit.
pub const TIMED_OUT: ncclResult_t = ncclResult_t::RemoteError;

/// Whether a setup could not start because the stock library lacks a call it needs (the same
/// library, so the same answer, on every rank).
pub fn lacks_stock_calls(e: &Error) -> bool {
    e.code == ncclResult_t::InvalidUsage && e.what.starts_with("stock library lacks")
}

impl Setup {
    /// Starts setting up `comms`, whose stock initialisation is complete, through the stock
    /// communicators: issues the record exchange. Never blocks on a peer. `Err`: nothing was
    /// posted. Communicators of a size rcclx cannot serve (one rank, more than
    /// [`MAX_COMM_RANKS`]) take no part: that is the same on every one of their ranks, so all of them
    /// forward without an exchange; they come back at once as the second value (no clique), and
    /// the setup is `None` when no communicator is left.
    pub fn start(comms: &[(ncclComm_t, u32)]) -> Result<(Option<Setup>, Outcome), Error> {
        let all = comms.iter().map(|&(c, max_ctas)| query(c, max_ctas)).collect::<Result<Vec<_>, _>>()?;
        let (members, others): (Vec<Member>, Vec<Member>) =
            all.into_iter().partition(|m| (2..=MAX_COMM_RANKS).contains(&m.nranks));
        let forward = others.iter().map(|m| (m.comm, None)).collect();
        if members.is_empty() {
            return Ok((None, forward));
        }
        let transport = StockTransport::new(&members);
        let simulated = host::simulated_host(crate::config::get().sim_hostid.as_deref()).is_some();
        if simulated {
            warn_simulated_once();
        }
        Ok((Some(Setup::with(members, Box::new(transport), Sharing::of_library(simulated))?), forward))
    }

    /// Starts setting up `members` (ranks of one or more cliques, all driven by the calling
    /// thread), exchanging through `transport`, with `sharing`. Never blocks on a peer. `Err`:
    /// nothing was posted.
    pub fn with(members: Vec<Member>, mut transport: Box<dyn Transport>, sharing: Sharing) -> Result<Setup, Error> {
        let cfg = crate::config::get();
        let identity = host::Identity::of_process(cfg.sim_hostid.as_deref());
        let mut locals = Vec::new();
        for member in members {
            crate::log::set_device(member.device);
            let fault = Fault::from_config(cfg.fault_inject.as_deref(), member.rank)
                .map_err(|e| Error::new(ncclResult_t::InvalidArgument, e))?;
            let mut l = Local::new(member, fault);
            describe(&mut l, identity, sharing);
            locals.push(l);
        }
        for l in &locals {
            l.fault.exchange(1)?;
        }
        transport.start(locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
        Ok(Setup { locals, transport, stage: Stage::Records, started: Instant::now(), limit: None })
    }

    /// No exchange is posted after `limit` from the start, and [`Setup::poll`] then fails with
    /// [`TIMED_OUT`].
    pub fn set_limit(&mut self, limit: Option<Duration>) {
        self.limit = limit;
    }

    fn expired(&self) -> bool {
        self.limit.is_some_and(|l| self.started.elapsed() > l)
    }

    fn timed_out(&self) -> Error {
        Error::new(TIMED_OUT, format!("no answer from every peer within {:?}", self.limit.unwrap_or_default()))
    }

    /// Advances the setup without blocking; the outcome once every exchange has arrived.
    ///
    /// Every rank takes part in all three exchanges, whatever it found (a local failure is a
    /// `capable = 0` or a "mapped" bit of 0, so every rank reaches the same verdict). `Err`: an
    /// exchange could not be posted or failed, or the limit passed before one arrived: the
    /// caller fails the communicators (their peers time out the same way); buffers whose
    /// handles were published are buried, never freed.
    pub fn poll(&mut self) -> Result<Option<Outcome>, Error> {
        loop {
            match &mut self.stage {
                Stage::Records => {
                    let Some(recs) = self.gathered()? else { return self.waiting() };
                    for (l, recs) in self.locals.iter_mut().zip(&recs) {
                        match record::verdict(l.member.nranks, recs) {
                            Ok(map) => {
                                let (host, local) = map.place(l.member.rank);
                                l.place = Some(Place { map, host, local });
                                allocate_for(l, recs)
                            }
                            Err(why) => {
                                let (comm, rank) = (l.member.comm, l.member.rank);
                                // Simulated hosts that do not hold are a test rig set up wrong.
                                if record::simulated(recs) {
                                    tracing::warn!(
                                        "comm {comm:p} rank {rank}: rcclx kernels off, every call forwards: {why}"
                                    );
                                } else {
                                    tracing::info!("comm {comm:p} rank {rank}: rcclx kernels off: {why}");
                                }
                                l.record.capable = 0;
                            }
                        }
                    }
                    if self.expired() {
                        return Err(self.timed_out());
                    }
                    for l in &mut self.locals {
                        l.fault.exchange(2)?;
                        l.published = l.res.is_some() && l.record.capable == 1;
                    }
                    self.transport.start(self.locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
                    self.stage = Stage::Handles;
                }
                Stage::Handles => {
                    let Some(recs) = self.gathered()? else { return self.waiting() };
                    let mapped: Vec<Option<Mapped>> =
                        self.locals.iter_mut().zip(&recs).map(|(l, r)| map_clique(l, r)).collect();
                    start_rails(&mut self.locals, &recs);
                    let rank0 = recs.iter().map(|r| r[0]).collect();
                    self.stage = Stage::Rails(rank0, mapped);
                }
                Stage::Rails(..) => {
                    for l in &mut self.locals {
                        if let Some(p) = l.splitting.as_mut() {
                            match p.poll() {
                                None => return self.waiting(),
                                Some(rail) => {
                                    l.rail = rail;
                                    l.splitting = None;
                                }
                            }
                        }
                    }
                    // No limit here: a rank whose second exchange arrived posts the third, so
                    // that a peer whose third one is already posted completes it (below).
                    let Stage::Rails(rank0, mapped) = &mut self.stage else { unreachable!() };
                    for l in &self.locals {
                        l.fault.exchange(3)?;
                    }
                    // Mapped, and holding its rail where the communicator spans hosts.
                    let ok = |(l, m): (&Local, &Option<Mapped>)| {
                        m.is_some() && (l.rail.is_some() || l.place.as_ref().is_none_or(|p| p.map.hosts() == 1))
                    };
                    let bits =
                        self.locals.iter().zip(mapped.iter()).map(|x| (ok(x) as u64).to_ne_bytes().to_vec()).collect();
                    self.transport.start(bits)?;
                    self.stage = Stage::Verdicts(std::mem::take(rank0), std::mem::take(mapped));
                }
                Stage::Verdicts(rank0, mapped) => {
                    // Every rank whose second exchange arrived posts its third at once, so once
                    // this one is posted the verdict is near on every rank: it gets a second
                    // limit, so that a rank whose limit passed just now does not end in error
                    // while its peers, their third exchange complete, turn the kernels on.
                    let Some(oks) = self.transport.poll()? else {
                        let past = self.limit.is_some_and(|l| self.started.elapsed() > l.saturating_mul(2));
                        return if past { Err(self.timed_out()) } else { Ok(None) };
                    };
                    let rank0 = std::mem::take(rank0);
                    let mapped = std::mem::take(mapped);
                    self.stage = Stage::Done;
                    let locals = std::mem::take(&mut self.locals);
                    let mut out = Vec::new();
                    for (((l, m), ok), r0) in locals.into_iter().zip(mapped).zip(oks).zip(rank0) {
                        let all_ok = ok.len() == 8 * l.member.nranks && ok.chunks(8).all(|c| c.iter().any(|&b| b != 0));
                        let comm = l.member.comm;
                        let clique = match (all_ok, m) {
                            (true, Some(m)) => Some(assemble(l, m, &r0, self.started)),
                            _ => {
                                if r0.simulated == 1 && r0.capable == 1 {
                                    // The verdict held: RCCLX_SIM_HOSTID joined ranks that cannot map each
                                    // other, or a rank has no rail.
                                    tracing::warn!(
                                        "comm {comm:p}: rcclx kernels off, every call forwards: a rank could not map \
                                         its peers or take its rail, though RCCLX_SIM_HOSTID puts them on simulated hosts"
                                    );
                                } else {
                                    tracing::info!(
                                        "comm {comm:p}: rcclx kernels off (a rank could not map its peers or take its rail)"
                                    );
                                }
                                None // `l` is dropped: its published buffers are buried
                            }
                        };
                        out.push((comm, clique));
                    }
                    return Ok(Some(out));
                }
                Stage::Done => return Err(Error::internal("setup polled after it finished")),
            }
        }
    }

    /// An exchange is still in flight: `Ok(None)`, or the timeout once the limit passed.
    fn waiting(&self) -> Result<Option<Outcome>, Error> {
        if self.expired() { Err(self.timed_out()) } else { Ok(None) }
    }

    /// Every member's gathered records, once the exchange has arrived.
    fn gathered(&mut self) -> Result<Option<Vec<Vec<Record>>>, Error> {
        let Some(gathered) = self.transport.poll()? else { return Ok(None) };
        if gathered.len() != self.locals.len()
            || gathered.iter().zip(&self.locals).any(|(g, l)| g.len() != record::BYTES * l.member.nranks)
        {
            return Err(Error::internal("the record exchange returned the wrong number of bytes"));
        }
        Ok(Some(gathered.iter().map(|g| Record::all(g)).collect()))
    }

    /// Drops `comm` from the batch (it was aborted): the others go on without it, its buffers
    /// are buried (a peer may have mapped them). `false`: the transport cannot drop a member of
    /// an exchange in flight (then the batch must end).
    pub fn drop_member(&mut self, comm: ncclComm_t) -> bool {
        let Some(i) = self.locals.iter().position(|l| l.member.comm == comm) else { return true };
        // A split in flight writes its child later: the batch ends instead.
        if self.locals[i].splitting.is_some() || !self.transport.drop_member(i) {
            return false;
        }
        // Aborted (or destroyed) during setup: its rail is aborted, never waited for.
        if let Some(rail) = self.locals[i].rail.take() {
            rail.end(true);
        }
        drop(self.locals.remove(i));
        if let Stage::Verdicts(rank0, mapped) | Stage::Rails(rank0, mapped) = &mut self.stage {
            rank0.remove(i);
            mapped.remove(i);
        }
        if self.locals.is_empty() {
            self.stage = Stage::Done;
        }
        true
    }

    /// How long ago the setup started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The communicators of this batch.
    pub fn comms(&self) -> Vec<ncclComm_t> {
        self.locals.iter().map(|l| l.member.comm).collect()
    }
}

/// Runs `setup` to its end, polling. Every communicator forwards when `stop` says so (the
/// communicator was aborted). `Err` when the setup failed or `limit` passed first (a peer that
/// died, or one without rcclx, never answers): the caller fails the communicators.
pub fn establish(mut setup: Setup, stop: impl Fn() -> bool, limit: Option<Duration>) -> Result<Outcome, Error> {
    let comms = setup.comms();
    setup.set_limit(limit);
    let mut nap = Duration::from_micros(20);
    loop {
        match setup.poll()? {
            Some(out) => return Ok(out),
            None if stop() => return Ok(comms.into_iter().map(|c| (c, None)).collect()),
            None => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }
}

/// Rank, size and device of `comm`, from the stock library; its SM budget is the caller's.
fn query(comm: ncclComm_t, max_ctas: u32) -> Result<Member, Error> {
    let u = upstream::get().map_err(|code| Error::new(code, "no stock library"))?;
    let (Some(count), Some(user_rank), Some(cu_device)) =
        (u.fns.ncclCommCount, u.fns.ncclCommUserRank, u.fns.ncclCommCuDevice)
    else {
        return Err(Error::new(ncclResult_t::InvalidUsage, "stock library lacks comm queries"));
    };
    let (mut n, mut r, mut d): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: valid communicator handle and out-pointers to locals.
    Error::check("ncclCommCount", upstream::guarded(|| unsafe { count(comm, &mut n) }))?;
    // SAFETY: as above.
    Error::check("ncclCommUserRank", upstream::guarded(|| unsafe { user_rank(comm, &mut r) }))?;
    // SAFETY: as above.
    Error::check("ncclCommCuDevice", upstream::guarded(|| unsafe { cu_device(comm, &mut d) }))?;
    Ok(Member { comm, rank: r as usize, nranks: n as usize, device: d, max_ctas })
}

/// The one WARN of a process whose host is simulated: what `RCCLX_SIM_HOSTID` does.
fn warn_simulated_once() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "RCCLX_SIM_HOSTID={:?} (a simulation setting): rcclx groups ranks into hosts by this id, not by \
             NCCL_HOSTID or the host name as the stock library does, and lets ranks of several processes share \
             one GPU (every grid capped at half of multiprocessors / ranks). Ranks that disagree or cannot map each \
             other's memory forward. Not for real clusters",
            crate::config::get().sim_hostid.as_deref().unwrap_or_default()
        )
    });
}

#[cfg(test)]
impl Setup {
    /// [`Setup::with`] with `fault` on every member instead of `RCCLX_FAULT_INJECT`.
    fn with_fault(
        members: Vec<Member>,
        mut transport: Box<dyn Transport>,
        fault: Fault,
        limit: Option<Duration>,
    ) -> Result<Setup, Error> {
        let mut locals = Vec::new();
        for member in members {
            let mut l = Local::new(member, fault);
            describe(&mut l, host::Identity::of_process(None), Sharing::default());
            locals.push(l);
        }
        fault.exchange(1)?;
        transport.start(locals.iter().map(|l| l.record.as_bytes().to_vec()).collect())?;
        Ok(Setup { locals, transport, stage: Stage::Records, started: Instant::now(), limit })
    }
}

#[cfg(test)]
mod tests {
    use super::super::local::per_rank_cap;
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An all-gather whose peers never answer (they died, or run without rcclx).
    struct Silent;
    impl Transport for Silent {
        fn start(&mut self, _: Vec<Vec<u8>>) -> Result<(), Error> {
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            Ok(None)
        }
    }

    /// Every rank of the clique is a member of this batch: the all-gather is a concatenation.
    /// Counts its rounds.
    struct Local(Option<Vec<Vec<u8>>>, Arc<AtomicUsize>);
    impl Transport for Local {
        fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
            let all = parts.concat();
            self.0 = Some(vec![all; parts.len()]);
            self.1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            Ok(self.0.take())
        }
    }

    /// The all-gathers of several cliques, each rank a setup of its own (as ranks in separate
    /// processes are): parts by (clique, round), rank.
    type Parts = HashMap<(usize, usize), Vec<Option<Vec<u8>>>>;
    #[derive(Clone, Default)]
    struct Board(Arc<parking_lot::Mutex<Parts>>);

    /// One setup's view of the board: member i is rank `ranks[i]` of clique `cliques[i]`.
    struct OnBoard {
        board: Board,
        cliques: Vec<usize>,
        ranks: Vec<usize>,
        nranks: usize,
        round: Vec<usize>,
        /// Exchanges this setup posted.
        posted: Arc<AtomicUsize>,
    }

    impl Transport for OnBoard {
        fn start(&mut self, parts: Vec<Vec<u8>>) -> Result<(), Error> {
            let mut b = self.board.0.lock();
            for (i, part) in parts.into_iter().enumerate() {
                self.round[i] += 1;
                let slot = b.entry((self.cliques[i], self.round[i])).or_insert_with(|| vec![None; self.nranks]);
                slot[self.ranks[i]] = Some(part);
            }
            self.posted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn poll(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
            let b = self.board.0.lock();
            let mut out = Vec::new();
            for (i, &c) in self.cliques.iter().enumerate() {
                match b.get(&(c, self.round[i])) {
                    Some(parts) if parts.iter().all(Option::is_some) => {
                        out.push(parts.iter().flatten().flatten().copied().collect())
                    }
                    _ => return Ok(None),
                }
            }
            Ok(Some(out))
        }
        fn drop_member(&mut self, i: usize) -> bool {
            self.cliques.remove(i);
            self.ranks.remove(i);
            self.round.remove(i);
            true
        }
    }

    fn member(clique: usize, rank: usize, nranks: usize) -> Member {
        Member { comm: (0x7200_0000 + clique * 4096 + rank * 64) as ncclComm_t, rank, nranks, device: 0, max_ctas: 0 }
    }

    fn members(n: usize) -> Vec<Member> {
        // Handles no stock library made, all on device 0: the verdict turns the kernels off
        // (two ranks on one GPU), so nothing is allocated even where a GPU is present.
        (0..n).map(|rank| member(9, rank, n)).collect()
    }

    /// Rank `rank` of `nranks` of clique `clique` as a setup of its own on `board`.
    fn rank_setup(
        board: &Board,
        clique: usize,
        rank: usize,
        nranks: usize,
        fault: Fault,
        limit: Option<Duration>,
    ) -> (Result<Setup, Error>, Arc<AtomicUsize>) {
        let posted = Arc::new(AtomicUsize::new(0));
        let t = OnBoard {
            board: board.clone(),
            cliques: vec![clique],
            ranks: vec![rank],
            nranks,
            round: vec![0],
            posted: posted.clone(),
        };
        (Setup::with_fault(vec![member(clique, rank, nranks)], Box::new(t), fault, limit), posted)
    }

    /// What each rank ended with: `Ok(kernels on)`, or the error code.
    type Verdicts = Vec<Result<bool, ncclResult_t>>;

    /// Polls every setup round-robin (as separate processes would progress) until each ended.
    fn run_all(mut setups: Vec<Option<Setup>>, mut ends: Verdicts) -> Verdicts {
        let deadline = Instant::now() + Duration::from_secs(10);
        while setups.iter().any(Option::is_some) {
            assert!(Instant::now() < deadline, "a setup neither finished nor timed out");
            for (s, end) in setups.iter_mut().zip(&mut ends) {
                let Some(setup) = s else { continue };
                match setup.poll() {
                    Ok(None) => continue,
                    Ok(Some(out)) => *end = Ok(out.iter().all(|(_, c)| c.is_some())),
                    Err(e) => *end = Err(e.code),
                }
                *s = None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ends
    }

    #[test]
    fn a_setup_whose_peers_never_answer_ends_at_its_limit() {
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        let started = Instant::now();
        let outcome = establish(setup, || false, Some(Duration::from_millis(50)));
        let took = started.elapsed();
        let Err(e) = outcome else { panic!("a setup nobody answered succeeded") };
        assert_eq!(e.code, TIMED_OUT);
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "{took:?}");
        // Stopped (the communicator was aborted): no error, every call forwards.
        let setup = Setup::with(members(2)[..1].to_vec(), Box::new(Silent), Sharing::default()).unwrap();
        assert!(establish(setup, || true, None).is_ok_and(|o| o.iter().all(|(_, c)| c.is_none())));
    }

    #[test]
    fn a_setup_whose_verdict_fails_ends_after_its_three_exchanges() {
        let rounds = Arc::new(AtomicUsize::new(0));
        let setup = Setup::with(members(3), Box::new(Local(None, rounds.clone())), Sharing::default()).unwrap();
        let Ok(outcome) = establish(setup, || false, Some(Duration::from_secs(5))) else {
            panic!("every exchange answered, yet the setup failed")
        };
        // Every rank takes part in all three, whatever the verdict (they are the communicator's
        // first operations on every rank: a rank that skipped one would pair the next with a
        // user's collective).
        assert_eq!(rounds.load(Ordering::Relaxed), 3);
        assert_eq!(outcome.len(), 3);
        assert!(outcome.iter().all(|(_, c)| c.is_none()), "three ranks on one GPU got kernels");
    }

    /// Item 3: a local failure on one rank, at any stage, is reported through the remaining
    /// exchanges: every rank takes all three and reaches the same verdict (kernels off), none
    /// forwards alone.
    #[test]
    fn a_local_failure_on_one_rank_gives_every_rank_the_same_verdict() {
        for site in ["describe", "alloc", "lease", "ipc", "peer"] {
            for n in [2, 3, 8] {
                let board = Board::default();
                let mut setups = Vec::new();
                let mut posted = Vec::new();
                for r in 0..n {
                    let fault = Fault::parse(Some(&format!("{site}:1")), r).unwrap();
                    let (s, p) = rank_setup(&board, 0, r, n, fault, Some(Duration::from_secs(5)));
                    setups.push(Some(s.unwrap()));
                    posted.push(p);
                }
                let ends = run_all(setups, vec![Err(ncclResult_t::InternalError); n]);
                assert!(ends.iter().all(|e| *e == Ok(false)), "{site} on rank 1 of {n}: {ends:?}");
                assert!(posted.iter().all(|p| p.load(Ordering::Relaxed) == 3), "{site}: a rank skipped an exchange");
            }
        }
    }

    /// Items 3 and 4: an exchange that cannot be posted fails that rank's setup (the
    /// communicator is in error), and its peers end in the same error at their limit: no rank
    /// turns its kernels on or forwards.
    #[test]
    fn an_exchange_that_cannot_be_posted_fails_every_rank() {
        for k in 2..=3u8 {
            let board = Board::default();
            let n = 3;
            let mut setups = Vec::new();
            let mut posted = Vec::new();
            for r in 0..n {
                let fault = Fault::parse(Some(&format!("exchange{k}:1")), r).unwrap();
                let (s, p) = rank_setup(&board, 0, r, n, fault, Some(Duration::from_millis(100)));
                setups.push(Some(s.unwrap()));
                posted.push(p);
            }
            let ends = run_all(setups, vec![Ok(true); n]);
            assert_eq!(ends[1], Err(ncclResult_t::SystemError), "exchange{k}");
            assert_eq!(ends[0], Err(TIMED_OUT), "exchange{k}");
            assert_eq!(ends[2], Err(TIMED_OUT), "exchange{k}");
            assert_eq!(posted[1].load(Ordering::Relaxed), usize::from(k - 1), "rank 1 posted exchange {k}");
        }
        // The first exchange: nothing was posted, `Setup::with` itself fails.
        let (s, p) = rank_setup(&Board::default(), 0, 0, 2, Fault::parse(Some("exchange1"), 0).unwrap(), None);
        assert!(s.is_err() && p.load(Ordering::Relaxed) == 0);
    }

    /// Item 4: the limit is checked before an exchange is posted, never after: a rank whose
    /// limit passed while it waited posts nothing more.
    #[test]
    fn no_exchange_is_posted_after_the_limit() {
        let board = Board::default();
        let (s0, posted0) = rank_setup(&board, 0, 0, 2, Fault::default(), Some(Duration::from_millis(30)));
        let mut s0 = s0.unwrap();
        assert!(s0.poll().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(60));
        // Rank 1 comes late: rank 0's first exchange completes after rank 0's limit.
        let (s1, _) = rank_setup(&board, 0, 1, 2, Fault::default(), None);
        let mut s1 = s1.unwrap();
        let e = s0.poll().err().expect("a setup past its limit went on");
        assert_eq!(e.code, TIMED_OUT);
        assert_eq!(posted0.load(Ordering::Relaxed), 1, "rank 0 posted an exchange after its limit");
        assert!(s1.poll().unwrap().is_none(), "rank 1 waits for rank 0's second exchange");
    }

    /// Item 3: an abort of one communicator of a batch drops only that one; the batch's other
    /// communicators finish their setup with their peers.
    #[test]
    fn an_aborted_member_leaves_the_rest_of_its_batch_going() {
        let board = Board::default();
        let posted = Arc::new(AtomicUsize::new(0));
        let t = OnBoard {
            board: board.clone(),
            cliques: vec![1, 2],
            ranks: vec![0, 0],
            nranks: 2,
            round: vec![0, 0],
            posted: posted.clone(),
        };
        let (a0, b0) = (member(1, 0, 2), member(2, 0, 2));
        let mut batch = Setup::with_fault(vec![a0, b0], Box::new(t), Fault::default(), None).unwrap();
        let (a1, _) = rank_setup(&board, 1, 1, 2, Fault::default(), Some(Duration::from_millis(100)));
        let (b1, _) = rank_setup(&board, 2, 1, 2, Fault::default(), Some(Duration::from_secs(5)));
        assert!(batch.poll().unwrap().is_none());
        assert!(batch.drop_member(a0.comm));
        assert_eq!(batch.comms(), vec![b0.comm]);
        let ends = run_all(vec![Some(batch), Some(a1.unwrap()), Some(b1.unwrap())], vec![Ok(true); 3]);
        assert_eq!(ends[0], Ok(false), "the batch's other communicator finished");
        assert_eq!(ends[2], Ok(false), "its peer finished with the same verdict");
        assert_eq!(ends[1], Err(TIMED_OUT), "the aborted communicator's peer ends in error");
    }

    /// Only a stock library without the setup's calls (the same on every rank) lets a setup
    /// that posted nothing forward; any other failure to start may be this rank's alone.
    #[test]
    fn only_missing_stock_calls_forward_without_an_exchange() {
        assert!(lacks_stock_calls(&Error::new(ncclResult_t::InvalidUsage, "stock library lacks ncclAllGather")));
        assert!(!lacks_stock_calls(&Error::upstream(
            "ncclAllGather (rcclx setup exchange)",
            ncclResult_t::InvalidUsage
        )));
        assert!(!lacks_stock_calls(&Error::internal("an exchange buffer could not be allocated")));
    }

    /// The WARN lines logged on this thread (what `tracing::warn!` writes).
    #[derive(Clone, Default)]
    struct Warnings(Arc<parking_lot::Mutex<Vec<String>>>);
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            struct Message(String);
            impl tracing::field::Visit for Message {
                fn record_debug(&mut self, _: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                    self.0 += &format!("{value:?}");
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut m = Message(String::new());
                event.record(&mut m);
                self.0.lock().push(m.0);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// `RCCLX_SIM_HOSTID` set wrong (issue 46): different ids on ranks that share memory, the
    /// same id on ranks of different machines, or the id on some ranks only. Each rank is a
    /// setup of its own, as processes are; each record says what a rank on a GPU would (this
    /// machine may have none). Every rank takes all three exchanges, warns that its kernels are
    /// off (the verdict refuses, before anything is allocated) and forwards; nobody waits past
    /// the exchanges.
    #[test]
    fn simulated_hosts_set_wrong_forward_on_every_rank() {
        let sim = |id: &str| host::Identity::of_process(Some(id));
        let other_machine = |id: &str| host::Identity { machine: sim(id).machine ^ 1, ..sim(id) };
        // (what, whether rank r of n is the odd one, the identity of the odd ranks and of the
        // others); the first is set right: a control, whose verdict holds.
        type Case<'a> = (&'a str, fn(usize, usize) -> bool, &'a dyn Fn(bool) -> host::Identity);
        let cases: [Case; 4] = [
            ("one id on one machine", |_, _| false, &|_| sim("a")),
            ("different ids", |r, n| r == n - 1, &|odd| sim(if odd { "b" } else { "a" })),
            ("another machine", |r, _| r == 1, &|odd| if odd { other_machine("a") } else { sim("a") }),
            ("set on some ranks", |r, _| r % 2 == 1, &|odd| {
                if odd { sim("a") } else { host::Identity::of_process(None) }
            }),
        ];
        for (what, odd, identity) in cases {
            for n in [2, 4, 8] {
                let board = Board::default();
                let mut setups = Vec::new();
                let mut posted = Vec::new();
                for r in 0..n {
                    let p = Arc::new(AtomicUsize::new(0));
                    let mut t = OnBoard {
                        board: board.clone(),
                        cliques: vec![0],
                        ranks: vec![r],
                        nranks: n,
                        round: vec![0],
                        posted: p.clone(),
                    };
                    let me = identity(odd(r, n));
                    let mut l = super::Local::new(member(0, r, n), Fault::default());
                    describe(&mut l, me, Sharing::of_library(me.simulated));
                    // What a rank on an H200 says (describe found no GPU here, or one without
                    // this rank's kernels loaded).
                    l.record.capable = 1;
                    l.record.arch[..5].copy_from_slice(b"sm_90");
                    l.record.multiprocessors = 132;
                    l.record.gpu = 77;
                    l.record.grid_cap = if me.simulated { per_rank_cap(132, n) } else { 0 };
                    t.start(vec![l.record.as_bytes().to_vec()]).unwrap();
                    let limit = Some(Duration::from_secs(5));
                    setups.push(Some(Setup {
                        locals: vec![l],
                        transport: Box::new(t),
                        stage: Stage::Records,
                        started: Instant::now(),
                        limit,
                    }));
                    posted.push(p);
                }
                let warnings = Warnings::default();
                let ends = tracing::subscriber::with_default(warnings.clone(), || {
                    run_all(setups, vec![Err(ncclResult_t::InternalError); n])
                });
                assert!(posted.iter().all(|p| p.load(Ordering::Relaxed) == 3), "{what}: a rank skipped an exchange");
                let refusals =
                    warnings.0.lock().iter().filter(|w| w.contains("kernels off, every call forwards")).count();
                if what == cases[0].0 {
                    // Its ranks allocate (which fails without a GPU): the same outcome everywhere.
                    assert!(ends.iter().all(|e| *e == ends[0] && e.is_ok()), "{what}, {n} ranks: {ends:?}");
                    assert_eq!(refusals, 0, "{what}, {n} ranks: {:?}", warnings.0.lock());
                } else {
                    assert!(ends.iter().all(|e| *e == Ok(false)), "{what}, {n} ranks: {ends:?}");
                    assert_eq!(refusals, n, "{what}, {n} ranks: every rank warns once: {:?}", warnings.0.lock());
                }
            }
        }
    }

    /// Audit N5: rank 1's limit passes while its third exchange is in flight, or before it could
    /// post it (its second arrived late): both ranks end with the same verdict.
    #[test]
    fn a_limit_passing_at_the_third_exchange_keeps_the_verdicts_equal() {
        let limit = Duration::from_millis(100);
        for late in ["after posting", "before posting"] {
            let board = Board::default();
            let (r0, p0) = rank_setup(&board, 0, 0, 2, Fault::default(), Some(Duration::from_secs(10)));
            let (r1, p1) = rank_setup(&board, 0, 1, 2, Fault::default(), Some(limit));
            let (mut r0, mut r1) = (r0.unwrap(), r1.unwrap());
            let posted = || (p0.load(Ordering::Relaxed), p1.load(Ordering::Relaxed));
            if late == "after posting" {
                // Rank 0 posts its second exchange, rank 1 its second and (that one complete) its
                // third; then rank 1's limit passes.
                assert!(r0.poll().unwrap().is_none());
                assert!(r1.poll().unwrap().is_none());
                assert_eq!(posted(), (2, 3));
                std::thread::sleep(limit + Duration::from_millis(20));
            } else {
                // Rank 1 posts its second exchange; its limit passes before rank 0 posts its
                // second (and, that one complete, its third), so rank 1 sees its second exchange
                // complete only past its limit.
                assert!(r1.poll().unwrap().is_none());
                std::thread::sleep(limit + Duration::from_millis(20));
                assert!(r0.poll().unwrap().is_none());
                assert_eq!(posted(), (3, 2));
            }
            let first =
                r1.poll().unwrap_or_else(|e| panic!("{late}: rank 1 gave up though its peer was a little late: {e:?}"));
            assert_eq!(posted().1, 3, "{late}: rank 1 did not post its third exchange");
            let end0 = r0.poll().unwrap().expect("rank 0: every exchange arrived");
            let end1 = first.unwrap_or_else(|| r1.poll().unwrap().expect("rank 1: every exchange arrived"));
            let on = |o: &Outcome| o.iter().all(|(_, c)| c.is_some());
            assert_eq!(on(&end0), on(&end1), "{late}: the ranks reached different verdicts");
        }
        // A peer that never posts its third exchange: the limit still ends the setup (twice it).
        let board = Board::default();
        let (r0, _) = rank_setup(&board, 1, 0, 2, Fault::default(), Some(Duration::from_secs(10)));
        let (r1, _) = rank_setup(&board, 1, 1, 2, Fault::default(), Some(limit));
        let (mut r0, mut r1) = (r0.unwrap(), r1.unwrap());
        assert!(r0.poll().unwrap().is_none() && r1.poll().unwrap().is_none() && r1.poll().unwrap().is_none());
        std::thread::sleep(2 * limit + Duration::from_millis(20));
        assert_eq!(r1.poll().map(|_| ()).unwrap_err().code, TIMED_OUT);
    }

    #[test]
    fn fault_spec() {
        assert_eq!(Fault::parse(None, 0), Ok(Fault::default()));
        assert_eq!(Fault::parse(Some(""), 0), Ok(Fault::default()));
        assert!(Fault::parse(Some("alloc"), 3).unwrap().alloc);
        assert!(Fault::parse(Some("ipc:1"), 1).unwrap().ipc);
        assert!(!Fault::parse(Some("ipc:1"), 0).unwrap().ipc);
        assert!(Fault::parse(Some("peer:0"), 0).unwrap().peer);
        assert!(Fault::parse(Some("lease:2"), 2).unwrap().lease);
        assert!(Fault::parse(Some("describe"), 5).unwrap().describe);
        assert_eq!(Fault::parse(Some("exchange3:1"), 1).unwrap().exchange, 3);
        assert_eq!(Fault::parse(Some("exchange3:1"), 0).unwrap().exchange, 0);
        // A typo is an error, not a test that injects nothing.
        assert!(Fault::parse(Some("bogus"), 0).unwrap_err().contains("no setup site"));
        assert!(Fault::parse(Some("alloc:x"), 0).unwrap_err().contains("not a rank"));
        assert!(Fault::parse(Some("allocc:1"), 0).is_err());
    }
}
