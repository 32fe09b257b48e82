//! The dumbbell: sender hosts on the left, receiver hosts on the right, one emulator
//! namespace in the middle that every packet crosses.
//!
//! ```text
//!  lt-ID-s1 ─veth─┐                                                        ┌─veth─ lt-ID-r1
//!  lt-ID-s2 ─veth─┤ lt-ID-emu: forward  queue+AQM → delay → tap → router  ├─veth─ lt-ID-r2
//!     …           │            reverse  router ← tap ← delay ← queue+AQM   │        …
//! ```
//!
//! Each direction is a chain of rattan-core cells: our [`RateCell`](crate::cells::rate::RateCell) (the bottleneck queue
//! drained at the link's rate or by its capacity trace), our [`DelayCell`](crate::cells::delay::DelayCell), our
//! [`LinkTap`](crate::tap::LinkTap) (random loss, counters, lateness, pcap), and rattan's
//! router to the destination host's veth. Frames cross unchanged: each host has static
//! neighbour entries with the far hosts' MAC addresses, as rattan's own environments do.
//! Senders are 10.1.i.1, receivers 10.2.j.1, inside namespaces this process made.
//!
//! With a second path (`path_b` in the topology), each sender host also has a second veth,
//! 10.3.i.1, whose packets cross path B's own chain of cells (`forward_b_*`, `reverse_b_*`) to
//! the same receivers; each receiver's packets go through a router (`r{j}_paths`) that picks
//! the reverse link by the destination's path. On the sender, a policy rule sends what leaves
//! from 10.3.i.1 out of the second veth (table 100), and the main table also routes the
//! receivers through it at metric 100, so a socket bound to that address or to that device
//! (`SO_BINDTODEVICE`) takes path B and every other socket path A:
//!
//! ```text
//!  lt-ID-s1 ─veth A─ forward  → … → router ─┐        ┌─ reverse   ← …  ← r1_paths ─ lt-ID-r1
//!          ─veth B─ forward_b → … → router ─┴─ r1 ─── ┴─ reverse_b ← … ←┘
//! ```
//!
//! Every cell runs inside a [`Guarded`]: a cell that panics or errs is recorded as the run's
//! [`EmulatorFailure`](crate::failure::EmulatorFailure) (see [`Dumbbell::failure`]) and never
//! takes the process down; dropping the network still removes everything.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::distributions::{Alphanumeric, DistString};
use rattan_core::cells::external::{VirtualEthernet, VirtualEthernetId};
use rattan_core::cells::router::{RouterCell, RoutingEntry, SimpleRoutingTable};
use rattan_core::cells::StdPacket;
use rattan_core::core::RattanCore;
use rattan_core::metal::io::af_packet::AfPacketDriver;
use rattan_env::{add_arp_entry_with_netns, add_route_with_netns, NetNs, NetNsGuard};
use rattan_env::{VethPair, VethPairBuilder};
use rtnetlink::packet_route::route::RouteScope;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::access;
use crate::cells::guard::{Guarded, Watch};
use crate::cleanup;
use crate::config::{PathConfig, TopologyConfig};
use crate::error::NetemError;
use crate::failure::{Direction, FailureWatch, Site};
use crate::host::Host;
use crate::link::Outages;
use crate::stats::LinkStats;
use crate::timing::{worker_runtime, Timing, WorkerInfo};

mod links;
mod path_b;

use links::{bottleneck_queue, build_direction, LinkParts, LinkPlan};
use path_b::{path_b_addr, path_b_cell_id};

pub(crate) type Core = RattanCore<AfPacketDriver>;

/// Options that are about a run, not about the network.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Write `forward.pcap` and `reverse.pcap` into this folder.
    pub pcap_dir: Option<PathBuf>,
    /// Seed for the AQMs' and the loss's random numbers.
    pub seed: u64,
}

/// A running dumbbell. Dropping it stops the emulator and removes every namespace and device.
pub struct Dumbbell {
    config: TopologyConfig,
    senders: Vec<Host>,
    receivers: Vec<Host>,
    forward: Arc<LinkStats>,
    reverse: Arc<LinkStats>,
    /// Path B's forward and reverse links, when the topology has a second path.
    path_b: Option<[Arc<LinkStats>; 2]>,
    start: Instant,
    /// Time 0 of every link's outages, nanoseconds after `start` ([`Dumbbell::start_outages_at`]).
    outage_shift: Arc<std::sync::atomic::AtomicU64>,
    timing: Timing,
    watch: FailureWatch,
    /// Per direction: make the rate cell fail at its next packet (tests).
    faults: [Arc<AtomicBool>; 2],
    worker: Option<Arc<WorkerInfo>>,
    // Teardown order matters: the emulator, then the devices, then the namespaces.
    core: Option<Core>,
    runtime_thread: Option<std::thread::JoinHandle<()>>,
    runtime_cancel: CancellationToken,
    veths: Vec<Arc<VethPair>>,
    /// Each sender's second interface, when there is a path B.
    veths_b: Vec<Arc<VethPair>>,
    namespaces: Vec<(String, Arc<NetNs>)>,
}

impl Dumbbell {
    /// Validates `config`, builds the namespaces, devices and emulator, and starts it.
    pub fn new(config: TopologyConfig, options: RunOptions) -> Result<Self, NetemError> {
        Self::with_timing(config, options, Timing::default())
    }

    /// [`Dumbbell::new`] with the emulator's worker scheduled and waiting as `timing` says
    /// (for measuring the choices; the default is what measured best).
    pub fn with_timing(
        config: TopologyConfig,
        options: RunOptions,
        timing: Timing,
    ) -> Result<Self, NetemError> {
        config.validate()?;
        check_privileges()?;
        check_congestion_available(&config.hosts.congestion)?;
        let id = Alphanumeric
            .sample_string(&mut rand::thread_rng(), 5)
            .to_lowercase();
        let start = Instant::now();
        let mut net = Dumbbell {
            forward: Arc::new(LinkStats::new(start)),
            reverse: Arc::new(LinkStats::new(start)),
            path_b: config.path_b.as_ref().map(|_| {
                [
                    Arc::new(LinkStats::new(start)),
                    Arc::new(LinkStats::new(start)),
                ]
            }),
            outage_shift: Arc::default(),
            config,
            senders: vec![],
            receivers: vec![],
            start,
            timing,
            watch: FailureWatch::new(start),
            faults: Default::default(),
            worker: None,
            core: None,
            runtime_thread: None,
            runtime_cancel: CancellationToken::new(),
            veths: vec![],
            veths_b: vec![],
            namespaces: vec![],
        };
        // On any error below, dropping `net` removes what was made so far.
        net.build(&id, &options)?;
        Ok(net)
    }

    fn build(&mut self, id: &str, options: &RunOptions) -> Result<(), NetemError> {
        let emu = self.namespace(&format!("lt-{id}-emu"))?;
        for (side, count) in [
            (Side::Sender, self.config.senders),
            (Side::Receiver, self.config.receivers),
        ] {
            for i in 1..=count {
                let host_ns = self.namespace(&format!("lt-{id}-{}{i}", side.letter()))?;
                let pair = VethPairBuilder::new()
                    .name(
                        format!("lt{id}{}{i}h", side.letter()),
                        format!("lt{id}{}{i}e", side.letter()),
                    )
                    .namespace(Some(host_ns.clone()), Some(emu.clone()))
                    .mac_addr(side.mac(i, 1).into(), side.mac(i, 2).into())
                    .ip_addr(
                        (IpAddr::V4(side.addr(i, 1)), 32),
                        (IpAddr::V4(side.addr(i, 2)), 32),
                    )
                    .build(i)
                    .map_err(|e| {
                        NetemError::setup(format!("creating the veth pair of host {i}"), e)
                    })?;
                self.veths.push(pair);
                let path_b = match side {
                    Side::Sender if self.config.path_b.is_some() => {
                        Some(self.second_interface(id, i, &host_ns, &emu)?)
                    }
                    _ => None,
                };
                let host = Host {
                    name: format!("lt-{id}-{}{i}", side.letter()),
                    addr: side.addr(i, 1),
                    path_b,
                    ns: host_ns,
                    congestion: self.config.hosts.congestion.clone(),
                    ecn: self.config.hosts.ecn,
                };
                match side {
                    Side::Sender => self.senders.push(host),
                    Side::Receiver => self.receivers.push(host),
                }
            }
        }
        self.route_hosts()?;
        if self.config.path_b.is_some() {
            self.route_path_b()?;
        }
        for host in self.senders.iter().chain(&self.receivers) {
            host.sysctl("net.ipv4.tcp_ecn", if host.ecn { "1" } else { "0" })?;
            // Each run starts from scratch, not from the previous connection's ssthresh.
            host.sysctl("net.ipv4.tcp_no_metrics_save", "1")?;
        }
        self.start_emulator(emu, options)
    }

    fn namespace(&mut self, name: &str) -> Result<Arc<NetNs>, NetemError> {
        cleanup::register(name);
        let ns = NetNs::new(name).map_err(|e| {
            cleanup::unregister(name);
            NetemError::setup(format!("creating network namespace {name}"), e)
        })?;
        self.namespaces.push((name.to_string(), ns.clone()));
        Ok(ns)
    }

    /// Every host reaches every host on the other side through its one veth.
    fn route_hosts(&self) -> Result<(), NetemError> {
        let pairs = &self.veths;
        let (senders, receivers) = pairs.split_at(self.senders.len());
        for (near, far) in [(senders, receivers), (receivers, senders)] {
            for local in near {
                for remote in far {
                    let dest = remote.left.ip_addr;
                    let ns = local.left.namespace.clone();
                    let what = || format!("routing {} to {}", local.left.name, dest.0);
                    add_route_with_netns(
                        dest,
                        None,
                        local.left.index,
                        ns.clone(),
                        RouteScope::Link,
                    )
                    .map_err(|e| NetemError::setup(what(), e))?;
                    add_arp_entry_with_netns(dest.0, remote.left.mac_addr, local.left.index, ns)
                        .map_err(|e| NetemError::setup(what(), e))?;
                }
            }
        }
        Ok(())
    }

    fn start_emulator(&mut self, emu: Arc<NetNs>, options: &RunOptions) -> Result<(), NetemError> {
        let (runtime, worker, thread) = emulator_runtime(
            emu.clone(),
            self.runtime_cancel.clone(),
            self.timing,
            self.watch.thread_ended.clone(),
        )?;
        self.runtime_thread = Some(thread);
        self.worker = Some(worker);
        let (heartbeat, start) = (self.watch.heartbeat_ms.clone(), self.start);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                heartbeat.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
        });
        let mut core = Core::new(
            runtime.clone(),
            CancellationToken::new(),
            self.runtime_cancel.clone(),
        );
        let rtt = self.config.base_rtt();
        let what = |s: &str| format!("building the emulator's {s}");
        for (n, pair) in self.veths.iter().enumerate() {
            let (side, i) = if n < self.senders.len() {
                (1, n + 1)
            } else {
                (2, n + 1 - self.senders.len())
            };
            let cell = pair.right.clone();
            let ns = emu.clone();
            let mut vid = VirtualEthernetId::new();
            vid.set_ns_id(side);
            vid.set_veth_id(i as u8);
            // A sender's interface starts the forward link and ends the reverse one.
            let (host, from, into, into_stats) = if side == 1 {
                (
                    "sender",
                    Direction::Forward,
                    Direction::Reverse,
                    &self.reverse,
                )
            } else {
                (
                    "receiver",
                    Direction::Reverse,
                    Direction::Forward,
                    &self.forward,
                )
            };
            let watch = Watch {
                egress: Site::new(from, format!("interface of {host} {i} (reading)")),
                ingress: Site::new(into, format!("interface of {host} {i} (writing)")),
                failures: self.watch.failures.clone(),
                drops: Some(into_stats.clone()),
            };
            core.build_cell(veth_cell_id(side, i), move |rt: &tokio::runtime::Handle| {
                let _rt = rt.enter();
                let _ns = NetNsGuard::new(ns)?;
                let veth = VirtualEthernet::<AfPacketDriver>::new(cell, vid)?;
                Ok(Guarded::new(veth, watch))
            })
            .map_err(|e| NetemError::setup(what("interfaces"), e))?;
        }
        for (i, pair) in self.veths_b.iter().enumerate() {
            let (cell, ns, i) = (pair.right.clone(), emu.clone(), i + 1);
            let mut vid = VirtualEthernetId::new();
            vid.set_ns_id(3);
            vid.set_veth_id(i as u8);
            let watch = Watch {
                egress: Site::new(
                    Direction::Forward,
                    format!("path B interface of sender {i} (reading)"),
                ),
                ingress: Site::new(
                    Direction::Reverse,
                    format!("path B interface of sender {i} (writing)"),
                ),
                failures: self.watch.failures.clone(),
                drops: self.path_b.as_ref().map(|[_, reverse]| reverse.clone()),
            };
            core.build_cell(path_b_cell_id(i), move |rt: &tokio::runtime::Handle| {
                let _rt = rt.enter();
                let _ns = NetNsGuard::new(ns)?;
                let veth = VirtualEthernet::<AfPacketDriver>::new(cell, vid)?;
                Ok(Guarded::new(veth, watch))
            })
            .map_err(|e| NetemError::setup(what("path B interfaces"), e))?;
        }
        let access = self.config.access_delay_ms.clone();
        access::build(&mut core, &access, self.timing.tail, &self.watch.failures)?;
        let (n_senders, n_receivers) = (self.senders.len(), self.receivers.len());
        let seed_of = |k: usize| options.seed.wrapping_add(k as u64 * 1_000_003);
        let two_paths = self.config.path_b.is_some();
        let mut plans = vec![
            LinkPlan {
                direction: Direction::Forward,
                name: "forward".into(),
                label: "",
                link: self.config.forward.clone(),
                rtt,
                stats: self.forward.clone(),
                entries: (1..=n_senders)
                    .map(|i| access::entry(1, i, &access))
                    .collect(),
                exits: (1..=n_receivers)
                    .map(|j| (Side::Receiver.addr(j, 1), access::exit(2, j, &access)))
                    .collect(),
                fault: self.faults[0].clone(),
                seed: seed_of(0),
            },
            LinkPlan {
                direction: Direction::Reverse,
                name: "reverse".into(),
                label: "",
                link: self.config.reverse.clone(),
                rtt,
                stats: self.reverse.clone(),
                // With two paths, each receiver's router picks the link (below).
                entries: if two_paths {
                    vec![]
                } else {
                    (1..=n_receivers)
                        .map(|j| access::entry(2, j, &access))
                        .collect()
                },
                exits: (1..=n_senders)
                    .map(|i| (Side::Sender.addr(i, 1), access::exit(1, i, &access)))
                    .collect(),
                fault: self.faults[1].clone(),
                seed: seed_of(1),
            },
        ];
        if let (Some(b), Some([fwd_stats, rev_stats])) = (&self.config.path_b, &self.path_b) {
            let PathConfig { forward, reverse } = b;
            let rtt_b = b.base_rtt();
            plans.push(LinkPlan {
                direction: Direction::Forward,
                name: "forward_b".into(),
                label: "path B ",
                link: forward.clone(),
                rtt: rtt_b,
                stats: fwd_stats.clone(),
                entries: (1..=n_senders).map(path_b_cell_id).collect(),
                exits: (1..=n_receivers)
                    .map(|j| (Side::Receiver.addr(j, 1), access::exit(2, j, &access)))
                    .collect(),
                fault: Arc::default(),
                seed: seed_of(2),
            });
            plans.push(LinkPlan {
                direction: Direction::Reverse,
                name: "reverse_b".into(),
                label: "path B ",
                link: reverse.clone(),
                rtt: rtt_b,
                stats: rev_stats.clone(),
                entries: vec![],
                exits: (1..=n_senders)
                    .map(|i| (path_b_addr(i, 1), path_b_cell_id(i)))
                    .collect(),
                fault: Arc::default(),
                seed: seed_of(3),
            });
        }
        // Every bottleneck queue first: an RDC cell learns which flows answer from the
        // agents' echoes on the other direction's link (path A's only: RDC runs there).
        let mut queues = plans
            .iter()
            .map(|p| bottleneck_queue(&p.link, &p.name, p.rtt, p.seed, &p.stats))
            .collect::<Result<Vec<_>, _>>()?;
        for k in 0..2 {
            if let Some(table) = queues[k].answering_flows() {
                queues[1 - k].read_echoes_into(table);
            }
        }
        let epoch = self.start;
        for (plan, queue) in plans.into_iter().zip(queues) {
            let parts = LinkParts {
                direction: plan.direction,
                label: plan.label,
                tail: self.timing.tail,
                fault: plan.fault.clone(),
                failures: self.watch.failures.clone(),
                outages: Outages::new(&plan.link.outages, epoch)
                    .shifted_by(self.outage_shift.clone()),
            };
            build_direction(&mut core, &plan, queue, parts, options)?;
        }
        if two_paths {
            // Each receiver's packets take the reverse link of their destination's path.
            for j in 1..=n_receivers {
                let links = ["reverse_bw", "reverse_b_bw"]
                    .map(|c| core.get_receiver(&c.to_string()))
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| NetemError::setup(what("paths"), e))?;
                let table = vec![
                    RoutingEntry::new("10.1.0.0/16".parse().expect("a prefix"), Some(0)),
                    RoutingEntry::new("10.3.0.0/16".parse().expect("a prefix"), Some(1)),
                ];
                let watch = Watch::inside(
                    Site::new(Direction::Reverse, format!("path router of receiver {j}")),
                    &self.watch.failures,
                );
                core.build_cell(format!("r{j}_paths"), move |rt: &tokio::runtime::Handle| {
                    let _rt = rt.enter();
                    let router = RouterCell::<StdPacket, SimpleRoutingTable>::new(links, table)?;
                    Ok(Guarded::new(router, watch))
                })
                .map_err(|e| NetemError::setup(what("paths"), e))?;
                core.link_cell(access::entry(2, j, &access), format!("r{j}_paths"));
            }
        }
        core.spawn_rattan()
            .map_err(|e| NetemError::setup(what("tasks"), e))?;
        core.start_rattan()
            .map_err(|e| NetemError::setup("starting the emulator", e))?;
        self.core = Some(core);
        Ok(())
    }

    pub fn config(&self) -> &TopologyConfig {
        &self.config
    }

    /// Sender host `i` (0-based).
    pub fn sender(&self, i: usize) -> &Host {
        &self.senders[i]
    }

    /// Receiver host `j` (0-based).
    pub fn receiver(&self, j: usize) -> &Host {
        &self.receivers[j]
    }

    pub fn senders(&self) -> &[Host] {
        &self.senders
    }

    pub fn receivers(&self) -> &[Host] {
        &self.receivers
    }

    /// Measurements of the left-to-right bottleneck.
    pub fn forward(&self) -> &Arc<LinkStats> {
        &self.forward
    }

    /// Measurements of the right-to-left bottleneck.
    pub fn reverse(&self) -> &Arc<LinkStats> {
        &self.reverse
    }

    /// Path B's forward and reverse links' measurements, when the topology has a second path.
    pub fn path_b(&self) -> Option<&[Arc<LinkStats>; 2]> {
        self.path_b.as_ref()
    }

    /// When the network started: the zero of every time series.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Counts the links' outages (`at_s`) from `t` instead of the network's start: a run
    /// that starts after the network is built calls this with its own start.
    pub fn start_outages_at(&self, t: Instant) {
        Outages::shift(&self.outage_shift, self.start, t);
    }

    /// How the emulator's worker is scheduled and waits.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Whether the emulator's worker got real-time priority.
    pub fn realtime(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| w.realtime())
    }

    /// CPU time the emulator's worker thread has used since the network started.
    pub fn emulator_cpu_time(&self) -> Option<Duration> {
        self.worker.as_ref()?.cpu_time()
    }

    /// The emulator's first failure, if it has failed: a cell that panicked or erred (which
    /// link, which cell, why), its thread gone, or its worker not run for 2 s. Cheap: poll it
    /// while an experiment runs and end the run with it. The network keeps running (a failed
    /// cell forwards nothing more); dropping the `Dumbbell` still removes everything.
    pub fn failure(&self) -> Option<NetemError> {
        self.watch.failure().map(NetemError::Emulator)
    }

    /// A view of [`Dumbbell::failure`] for other threads (the `Dumbbell` itself is not `Sync`).
    pub fn failure_watch(&self) -> FailureWatch {
        self.watch.clone()
    }

    /// `Err` with [`Dumbbell::failure`] if the emulator has failed.
    pub fn check_alive(&self) -> Result<(), NetemError> {
        self.failure().map_or(Ok(()), Err)
    }

    /// For tests of failure handling only: makes `link`'s rate cell panic at its next packet,
    /// as a bug in a cell would. The run then reports the failure through
    /// [`Dumbbell::failure`]; nothing else changes.
    #[doc(hidden)]
    pub fn inject_fault(&self, link: Direction) {
        let k = match link {
            Direction::Forward => 0,
            Direction::Reverse => 1,
        };
        self.faults[k].store(true, Ordering::Relaxed);
    }
}

impl Drop for Dumbbell {
    fn drop(&mut self) {
        self.watch.stopping.store(true, Ordering::Relaxed);
        if let Some(mut core) = self.core.take() {
            // rattan unwraps each task's JoinError here; guarded cells do not panic, but a
            // panic in rattan's own task loop would still reach us: keep tearing down.
            let cancelled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| core.cancel_rattan()));
            if cancelled.is_err() {
                tracing::error!("an emulator task panicked; the network is removed anyway");
            }
            drop(core);
        }
        self.runtime_cancel.cancel();
        if let Some(thread) = self.runtime_thread.take() {
            let _ = thread.join();
        }
        self.senders.clear();
        self.receivers.clear();
        // rattan deletes each pair through netlink while its namespaces still exist.
        self.veths.clear();
        self.veths_b.clear();
        // rattan removes a namespace when its last handle drops: that is the one owner of
        // the removal. `ip netns delete` is only the fallback for a namespace rattan failed
        // to remove, or one a host thread still holds (a caller that did not join it):
        // removed now so nothing outlives the network, and rattan's own removal when that
        // thread ends then fails with ENOENT, which the warning here explains.
        for (name, ns) in self.namespaces.drain(..).rev() {
            let held = Arc::strong_count(&ns) - 1;
            drop(ns);
            if held > 0 {
                tracing::warn!(
                    "namespace {name}: {held} handle(s) still held by threads of its host at \
                     teardown; removed now (join host threads before dropping the network)"
                );
            }
            if cleanup::leftover_namespaces().contains(&name) {
                cleanup::delete_namespace(&name);
            }
            cleanup::unregister(&name);
        }
    }
}

#[derive(Clone, Copy)]
enum Side {
    Sender,
    Receiver,
}

impl Side {
    fn letter(self) -> char {
        match self {
            Side::Sender => 's',
            Side::Receiver => 'r',
        }
    }
    fn group(self) -> u8 {
        match self {
            Side::Sender => 1,
            Side::Receiver => 2,
        }
    }
    fn addr(self, i: usize, end: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.group(), i as u8, end)
    }
    fn mac(self, i: usize, end: u8) -> [u8; 6] {
        [0x38, 0x7e, 0x58, self.group(), i as u8, end]
    }
}

pub(crate) fn veth_cell_id(side: u8, i: usize) -> String {
    format!("{}{i}", if side == 1 { "s" } else { "r" })
}

/// The emulator's tokio runtime runs on its own thread inside the emulator namespace (the
/// worker thread it starts inherits the namespace).
type EmulatorRuntime = (Arc<Runtime>, Arc<WorkerInfo>, std::thread::JoinHandle<()>);

fn emulator_runtime(
    emu: Arc<NetNs>,
    cancel: CancellationToken,
    timing: Timing,
    ended: Arc<AtomicBool>,
) -> Result<EmulatorRuntime, NetemError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("lowtide-emulator".into())
        .spawn(move || {
            // However the thread ends, say so.
            struct Ended(Arc<AtomicBool>);
            impl Drop for Ended {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _ended = Ended(ended);
            if let Err(e) = emu.enter() {
                let _ = tx.send(Err(format!("entering the emulator namespace: {e}")));
                return;
            }
            match worker_runtime("lowtide-emulator-worker", timing) {
                Ok((rt, worker)) => {
                    let rt = Arc::new(rt);
                    let _ = tx.send(Ok((rt.clone(), worker)));
                    rt.block_on(cancel.cancelled());
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("building the emulator runtime: {e}")));
                }
            }
        })
        .map_err(|e| NetemError::setup("spawning the emulator thread", e))?;
    let (runtime, worker) = rx
        .recv()
        .map_err(|e| NetemError::setup("starting the emulator thread", e))?
        .map_err(|e| NetemError::setup("starting the emulator", e))?;
    Ok((runtime, worker, thread))
}

/// Namespaces need CAP_SYS_ADMIN and devices CAP_NET_ADMIN; say so before trying.
fn check_privileges() -> Result<(), NetemError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetemError::NotPrivileged {
            what: "building an emulated network (network namespaces and veth devices)".into(),
        });
    }
    Ok(())
}

/// The congestion controls the kernel offers to sockets.
pub fn available_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn check_congestion_available(name: &str) -> Result<(), NetemError> {
    let available = available_congestion();
    if available.split_whitespace().any(|c| c == name) {
        Ok(())
    } else {
        Err(NetemError::Congestion {
            name: name.to_string(),
            available,
        })
    }
}
