//! The agent on a real host: the sans-IO [`Agent`] fed from two NFQUEUE queues (the nfq crate,
//! netlink without libnetfilter_queue) and the iptables rules that fill them.
//!
//! - queue `q` gets incoming TCP (mangle INPUT), copied whole: the agent may rewrite the IPv4
//!   header (clear CE, remove the delay flag) and gives the packet back with its verdict at
//!   once;
//! - queue `q + 1` gets outgoing TCP (mangle OUTPUT), headers only (256 bytes): the agent keeps
//!   the message and gives the verdict when the packet may leave. A held message pins only its
//!   small receive buffer. Packets copied whole (ACKs) of tracked flows are marked as the
//!   agent's echo ([`crate::wire::set_echo`]) and given back rewritten.
//!
//! One thread waits in `ppoll` on both sockets, a stop eventfd and the agent's next deadline;
//! it runs at real-time priority when allowed ([`sched`]) and, woken, releases what is due
//! before it reads new packets, so a batch of reads never delays a held ACK.
//! Fail open everywhere: the queues are set to accept packets when they are full
//! (`NFQA_CFG_F_FAIL_OPEN`), the rules carry `--queue-bypass` (no agent bound: packets pass),
//! the core passes packets at once when `max_held` are held, and on stop every held packet is
//! released before the rules go. Closing a queue socket with messages still held would drop
//! them (the kernel's verdict on flush), so the driver never does.

mod netlink;
pub mod sched;

use std::io;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nfq::{Message, Queue, Verdict};

use crate::agent::Agent;
use crate::config::{AgentConfig, ConfigError};
use crate::iptables::{self, Rules, Selection};
use crate::status::{AgentStatus, DriverCounters};

pub use netlink::queue_line;

/// Messages read from one socket before timers are looked at again.
const BATCH: usize = 256;
/// Bytes of each outgoing packet copied to the agent: IPv4 and TCP headers with options.
const OUT_COPY: u16 = 256;
/// The sockets' receive buffers.
const RCVBUF: libc::c_int = 4 << 20;

/// The agent and the system around it.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub agent: AgentConfig,
    /// Incoming packets use this NFQUEUE number, outgoing ones the next.
    pub queue: u16,
    /// Which flows the rules send to the agent.
    pub selection: Selection,
    /// Kernel queue length of each queue; beyond it packets pass unseen (fail open).
    pub kernel_queue_len: u32,
    /// `iptables` or `iptables-legacy`; None: the first that works.
    pub iptables: Option<String>,
    /// How often the published status is refreshed.
    pub status_interval: Duration,
    /// Run the agent's thread at SCHED_FIFO when permitted ([`sched::apply`]); the outcome
    /// is `driver.scheduling` in the status.
    pub realtime: bool,
    /// Record every held packet's release, at most this many (0: off), into the final
    /// status's `releases`, times in µs since `log_origin` (None: the agent's start).
    pub release_log: usize,
    pub log_origin: Option<Instant>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig::default(),
            queue: 7100,
            selection: Selection::default(),
            kernel_queue_len: 8192,
            iptables: None,
            status_interval: Duration::from_millis(500),
            realtime: true,
            release_log: 0,
            log_origin: None,
        }
    }
}

/// Why the agent cannot start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the RDC agent needs root (CAP_NET_ADMIN) for NFQUEUE and iptables; run it as root, e.g. with sudo")]
    NotPrivileged,
    #[error("iptables is missing (tried {tried}); install it with `apt-get install iptables` (run.sh does)")]
    IptablesMissing { tried: String },
    #[error("`{command}` failed: {reason}")]
    Iptables { command: String, reason: String },
    #[error("NFQUEUE queue {queue} is in use by another program; pick another with --queue")]
    QueueInUse { queue: u16 },
    #[error("{what} failed: {error}")]
    System { what: String, error: io::Error },
    #[error("the agent thread panicked")]
    Panicked,
}

fn system(what: impl Into<String>) -> impl FnOnce(io::Error) -> AgentError {
    let what = what.into();
    move |error| AgentError::System { what, error }
}

/// Stops a running agent from anywhere (another thread, a signal handler).
#[derive(Debug, Clone)]
pub struct Stopper(Arc<netlink::StopFd>);

impl Stopper {
    pub fn new() -> Result<Self, AgentError> {
        Ok(Stopper(Arc::new(
            netlink::StopFd::new().map_err(system("creating the stop eventfd"))?,
        )))
    }

    pub fn stop(&self) {
        self.0.signal();
    }
}

/// A running agent on its own thread, in the network namespace of the thread that started it.
/// Dropping it stops the agent: held packets are released and the rules removed.
pub struct AgentHandle {
    stopper: Stopper,
    status: Arc<Mutex<AgentStatus>>,
    thread: Option<JoinHandle<Result<AgentStatus, AgentError>>>,
}

impl AgentHandle {
    /// Starts the agent; returns once its rules are installed (or with the reason it cannot).
    pub fn start(cfg: DriverConfig) -> Result<Self, AgentError> {
        let stopper = Stopper::new()?;
        let status = Arc::new(Mutex::new(Agent::<()>::new(cfg.agent.clone())?.status()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, shared) = (stopper.clone(), status.clone());
        let thread = std::thread::Builder::new()
            .name("lowtide-rdc".into())
            .spawn(move || {
                let ready = move || {
                    let _ = ready_tx.send(());
                };
                run(&cfg, &stop, ready, |s| {
                    if let Ok(mut g) = shared.lock() {
                        *g = s.clone();
                    }
                })
            })
            .map_err(system("spawning the agent thread"))?;
        let mut handle = AgentHandle {
            stopper,
            status,
            thread: Some(thread),
        };
        if ready_rx.recv().is_err() {
            // The thread ended before it was ready: its result says why.
            return Err(handle.join().err().unwrap_or(AgentError::Panicked));
        }
        Ok(handle)
    }

    /// The latest published status.
    pub fn status(&self) -> AgentStatus {
        self.status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }

    /// Stops the agent and returns its final status.
    pub fn stop(mut self) -> Result<AgentStatus, AgentError> {
        self.stopper.stop();
        self.join()
    }

    fn join(&mut self) -> Result<AgentStatus, AgentError> {
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| AgentError::Panicked)?,
            None => Ok(self.status()),
        }
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stopper.stop();
            if let Err(e) = self.join() {
                tracing::error!("the RDC agent stopped with an error: {e}");
            }
        }
    }
}

fn check_root() -> Result<(), AgentError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(AgentError::NotPrivileged);
    }
    Ok(())
}

/// One bound queue and its socket.
struct Bound {
    queue: Queue,
    num: u16,
    fd: std::os::fd::RawFd,
}

fn bind(num: u16, copy: u16, max_len: u32) -> Result<Bound, AgentError> {
    let mut queue = Queue::open().map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => AgentError::NotPrivileged,
        _ => AgentError::System {
            what: "opening a netfilter netlink socket".into(),
            error: e,
        },
    })?;
    // Root was checked: the kernel answers EPERM when another socket owns the queue.
    queue.bind(num).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM | libc::EBUSY) => AgentError::QueueInUse { queue: num },
        _ => AgentError::System {
            what: format!("binding NFQUEUE {num}"),
            error: e,
        },
    })?;
    let fd = netlink::queue_socket(num).ok_or_else(|| AgentError::System {
        what: format!("finding the socket of NFQUEUE {num}"),
        error: io::Error::other("no netfilter socket of ours is listed for the queue"),
    })?;
    let what = |s: &str| format!("setting {s} of NFQUEUE {num}");
    queue
        .set_copy_range(num, copy)
        .map_err(system(what("the copy range")))?;
    queue
        .set_queue_max_len(num, max_len)
        .map_err(system(what("the length")))?;
    queue
        .set_fail_open(num, true)
        .map_err(system(what("fail-open")))?;
    queue
        .set_recv_enobufs(true)
        .map_err(system(what("overrun reports")))?;
    netlink::set_rcvbuf(fd, RCVBUF).map_err(system(what("the receive buffer")))?;
    queue.set_nonblocking(true);
    Ok(Bound { queue, num, fd })
}

/// Runs the agent in the calling thread until `stop`: binds the queues, installs the rules,
/// calls `ready`, then `publish` with the status every `status_interval` and once at the end.
pub fn run(
    cfg: &DriverConfig,
    stop: &Stopper,
    ready: impl FnOnce(),
    mut publish: impl FnMut(&AgentStatus),
) -> Result<AgentStatus, AgentError> {
    let mut agent = Agent::<Message>::new(cfg.agent.clone())?;
    let origin = cfg.log_origin.unwrap_or_else(Instant::now);
    agent.record_releases(cfg.release_log);
    check_root()?;
    let tool = iptables::find_tool(cfg.iptables.as_deref())?;
    let out_num = cfg
        .queue
        .checked_add(1)
        .ok_or(AgentError::QueueInUse { queue: cfg.queue })?;
    let mut inq = bind(cfg.queue, u16::MAX, cfg.kernel_queue_len)?;
    let mut outq = bind(out_num, OUT_COPY, cfg.kernel_queue_len)?;
    let rules = Rules::install(&tool, cfg.queue, &cfg.selection)?;
    let mut counts = DriverCounters {
        scheduling: sched::apply(cfg.realtime),
        ..DriverCounters::default()
    };
    ready();
    let mut next_status = Instant::now();
    let result = loop {
        let now = Instant::now();
        if now >= next_status {
            publish(&status(&agent, &counts, cfg.queue));
            next_status = now + cfg.status_interval;
        }
        let deadline = agent
            .poll_timeout()
            .map_or(next_status, |t| t.min(next_status));
        let stopping = match netlink::wait(
            &[inq.fd, outq.fd],
            stop.0.raw(),
            Some(deadline.saturating_duration_since(now)),
        ) {
            Ok(r) => r,
            Err(e) => break Err(system("waiting for packets")(e)),
        };
        if stopping {
            break Ok(());
        }
        // Due packets first: the reads below may take a while in a burst.
        let woke = Instant::now();
        counts.on_wake(woke.saturating_duration_since(deadline), woke >= deadline);
        agent.handle_timeout(woke);
        release(&mut agent, &mut outq, &mut counts);
        let drained = drain(&mut inq, &mut counts, |mut msg| {
            let rewrite = agent.handle_incoming(Instant::now(), msg.get_payload());
            if !rewrite.is_empty() {
                // The core parsed this header; an edit cannot fail on it.
                let _ = rewrite.apply(msg.get_payload_mut());
            }
            Some(msg)
        })
        .and_then(|()| {
            drain(&mut outq, &mut counts, |mut msg| {
                let parsed = crate::segment::parse(msg.get_payload());
                // Only a packet that is echoed is written back (a header-only copy of a
                // longer packet given back would trim it).
                if agent.wants_echo(&parsed, msg.get_payload()) {
                    let _ = crate::wire::set_echo(msg.get_payload_mut());
                }
                agent.handle_outgoing(Instant::now(), parsed, msg);
                None
            })
        });
        release(&mut agent, &mut outq, &mut counts);
        if let Err(e) = drained {
            break Err(e);
        }
        agent.handle_timeout(Instant::now());
        release(&mut agent, &mut outq, &mut counts);
    };
    // Held packets leave before the queues close (closing would drop them) and the rules go.
    agent.release_all(Instant::now());
    release(&mut agent, &mut outq, &mut counts);
    let removed = rules.remove();
    let _ = inq.queue.unbind(inq.num);
    let _ = outq.queue.unbind(outq.num);
    let mut last = status(&agent, &counts, cfg.queue);
    (last.releases, last.releases_not_kept) = agent.take_release_log(origin);
    publish(&last);
    result?;
    removed?;
    Ok(last)
}

/// Reads up to [`BATCH`] messages from `q`; `handle` returns a message to accept at once.
fn drain(
    q: &mut Bound,
    counts: &mut DriverCounters,
    mut handle: impl FnMut(Message) -> Option<Message>,
) -> Result<(), AgentError> {
    for n in 0..BATCH {
        match q.queue.recv() {
            Ok(msg) => {
                if let Some(mut msg) = handle(msg) {
                    msg.set_verdict(Verdict::Accept);
                    if q.queue.verdict(msg).is_err() {
                        counts.verdict_errors += 1;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                counts.packets_per_batch_max = counts.packets_per_batch_max.max(n as u64);
                return Ok(());
            }
            // The socket overflowed: those packets passed unseen (fail open).
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => counts.overruns += 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(system(format!("reading NFQUEUE {}", q.num))(e)),
        }
    }
    counts.packets_per_batch_max = counts.packets_per_batch_max.max(BATCH as u64);
    Ok(())
}

/// Gives the verdict on every packet the core released, in its order.
fn release(agent: &mut Agent<Message>, outq: &mut Bound, counts: &mut DriverCounters) {
    while let Some(mut msg) = agent.poll_release() {
        msg.set_verdict(Verdict::Accept);
        if outq.queue.verdict(msg).is_err() {
            counts.verdict_errors += 1;
        }
    }
}

/// The core's status with the kernel's counters of both queues.
fn status(agent: &Agent<Message>, counts: &DriverCounters, queue: u16) -> AgentStatus {
    let mut s = agent.status();
    let mut k = *counts;
    for q in [queue, queue.wrapping_add(1)] {
        if let Some(line) = queue_line(q) {
            k.queue_dropped += line.dropped;
            k.user_dropped += line.user_dropped;
        }
    }
    k.cpu_seconds = netlink::thread_cpu_time().as_secs_f64();
    s.driver = k;
    s
}
