//! A trial's threads started: sinks, measured applications over their variant's transport,
//! floor probe, cross traffic; and the host settings of its variants.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::ChannelConfig;
use lowtide_netem::{Dumbbell, Host};
use lowtide_traffic::runner::{run_schedule, Target};
use lowtide_traffic::schedule::Plan;
use lowtide_traffic::Stop;

use super::threads::{traffic_err, Sinks};
use super::trial::TrialThreads;
use super::{Measured, Task, FLOOR_PORT, GRACE};
use crate::pipe::quic::Credentials;
use crate::pipe::Transport;
use crate::scenario::{
    ApplicationKind, Checked, NetPath, Scenario, Variant, VariantTransport, STREAM_PORT,
};
use crate::stream::{self};
use crate::{conference, floor, ladder_flow, live_video, video, LabError};

/// lowtide's channel settings of a variant's two ends (sender, receiver) in this trial: the
/// variant's ([`Variant::transport`]) with what the trial decides: the topology's congestion
/// control where the variant names none, the conference's fairness, the sender's addresses
/// on the variant's paths, the trial's TLS files. Defaults for a QUIC or TFRC variant.
fn channel_configs(
    s: &Scenario,
    v: &Variant,
    tx_host: &Host,
    tls_files: Option<&crate::tls::TlsFiles>,
) -> Result<(ChannelConfig, ChannelConfig), LabError> {
    let mut cfg = match v.transport() {
        VariantTransport::Lowtide(cfg) => *cfg,
        VariantTransport::Quic(_) | VariantTransport::Tfrc(_) => ChannelConfig::default(),
    };
    cfg.congestion
        .get_or_insert_with(|| s.topology.hosts.congestion.clone());
    if s.application_of(v) == ApplicationKind::Conference {
        cfg.transport.fairness = s.application.conference.fairness;
    }
    let mut rcfg = cfg.clone();
    cfg.local_addrs = local_addrs(v, tx_host)?;
    if let (true, Some(files)) = (v.tls, tls_files) {
        cfg.tls = Some(files.client());
        rcfg.tls = Some(files.server());
    }
    Ok((cfg, rcfg))
}

/// The transport of a variant's two ends (sender, receiver): lowtide's channel as
/// configured for the trial, QUIC with a certificate made for the trial, or TFRC.
fn transports(
    v: &Variant,
    cfg: &ChannelConfig,
    rcfg: &ChannelConfig,
) -> Result<(Transport, Transport), LabError> {
    Ok(match v.transport() {
        VariantTransport::Quic(q) => {
            let creds = Credentials::generate()?;
            (
                Transport::Quic(q.clone(), creds.clone()),
                Transport::Quic(q, creds),
            )
        }
        VariantTransport::Tfrc(t) => (Transport::Tfrc(t), Transport::Tfrc(t)),
        VariantTransport::Lowtide(_) => (
            Transport::Lowtide(Box::new(cfg.clone())),
            Transport::Lowtide(Box::new(rcfg.clone())),
        ),
    })
}

/// The names of an application's two threads (sender, receiver) over transport `t`, from
/// `names` for lowtide, QUIC and TFRC in that order.
fn thread_names(t: &Transport, names: [[&'static str; 2]; 3]) -> [&'static str; 2] {
    names[match t {
        Transport::Lowtide(_) => 0,
        Transport::Quic(..) => 1,
        Transport::Tfrc(_) => 2,
    }]
}

/// The sender's address on each of the variant's network paths, in its order.
fn local_addrs(v: &Variant, host: &Host) -> Result<Vec<std::net::IpAddr>, LabError> {
    v.paths
        .iter()
        .map(|p| match p {
            NetPath::A => Ok(host.addr().into()),
            NetPath::B => host.path_b_addr().map(Into::into).ok_or_else(|| {
                LabError::io(
                    format!("variant {}: path B", v.name),
                    "the network has no second path ([topology.path_b])",
                )
            }),
        })
        .collect()
}

/// Starts every thread of a trial: sinks, measured streams, floor probe, cross traffic.
pub(super) fn start_trial(
    checked: &Checked,
    net: &Dumbbell,
    variants: &[usize],
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<TrialThreads, LabError> {
    let s = &checked.scenario;
    // Sinks on every host: receivers take forward cross traffic, senders reverse.
    let mut sinks = Sinks::default();
    let forward_targets = sinks.start(
        net.receivers(),
        !checked.forward_plan.flows.is_empty(),
        stop,
    )?;
    let reverse_targets =
        sinks.start(net.senders(), !checked.reverse_plan.flows.is_empty(), stop)?;

    let rx_host = net.receiver(s.application.receiver);
    let app = &s.application.video;
    let wants_video = variants
        .iter()
        .any(|&i| s.application_of(&s.variants[i]) == ApplicationKind::LayeredVideo);
    let clip = wants_video
        .then(|| app.video(s.run.duration_s))
        .transpose()
        .map_err(|e| LabError::io("building the video", e))?;
    let receive_end = end + GRACE;
    let mut measured = vec![];
    let tls_files = variants
        .iter()
        .any(|&i| s.variants[i].tls)
        .then(|| crate::tls::TlsFiles::generate(rx_host.addr().into()))
        .transpose()?;
    for &i in variants {
        let v = &s.variants[i];
        let addr = SocketAddr::from((rx_host.addr(), STREAM_PORT + i as u16));
        let one_segment = v.one_segment_messages;
        let tx_host = net.sender(v.sender);
        let (rstop, tstop) = (stop.clone(), stop.clone());
        let (cfg, rcfg) = channel_configs(s, v, tx_host, tls_files.as_ref())?;
        let hosts = (tx_host, rx_host);
        if let Some(m) = ladder_flow::start(s, v, i, &cfg, addr, hosts, start, end, stop)? {
            measured.push((i, m));
            continue;
        }
        let port = STREAM_PORT + i as u16;
        if let Some(m) = live_video::start(s, v, i, port, hosts, start, end, stop)? {
            measured.push((i, m));
            continue;
        }
        measured.push((
            i,
            match s.application_of(v) {
                ApplicationKind::LatencyStream => {
                    let (tx_t, rx_t) = transports(v, &cfg, &rcfg)?;
                    let [tx_name, rx_name] = thread_names(
                        &tx_t,
                        [
                            ["stream sender", "stream receiver"],
                            ["QUIC stream sender", "QUIC stream receiver"],
                            ["TFRC stream sender", "TFRC stream receiver"],
                        ],
                    );
                    Measured::Stream {
                        rx: Task::spawn(rx_host, rx_name, move || {
                            stream::receive(addr, rx_t, start, receive_end, rstop)
                        })?,
                        tx: Task::spawn(tx_host, tx_name, move || {
                            stream::send(addr, tx_t, one_segment, start, end, receive_end, tstop)
                        })?,
                    }
                }
                ApplicationKind::LayeredVideo => {
                    let clip = clip
                        .clone()
                        .ok_or_else(|| LabError::io("building the video", "no clip"))?;
                    let tolerance = Duration::from_secs_f64(app.tolerance_ms / 1e3);
                    let frames = app.window_frames;
                    Measured::Video {
                        rx: Task::spawn(rx_host, "video receiver", move || {
                            video::receive(addr, rcfg, frames, tolerance, start, receive_end, rstop)
                        })?,
                        tx: Task::spawn(tx_host, "video sender", move || {
                            video::send(addr, cfg, clip, frames, start, receive_end, tstop)
                        })?,
                    }
                }
                ApplicationKind::BitrateLadder | ApplicationKind::LiveVideo => {
                    return Err(LabError::io(
                        "starting the variant",
                        "ladder_flow::start or live_video::start did not take it (a bug)",
                    ))
                }
                ApplicationKind::Conference => {
                    let videos = s.conference_videos(v);
                    let frames = videos[0].frames_in(s.run.duration_s);
                    let rvideos = videos.clone();
                    let (tx_t, rx_t) = transports(v, &cfg, &rcfg)?;
                    let [tx_name, rx_name] = thread_names(
                        &tx_t,
                        [
                            ["conference sender", "conference receiver"],
                            ["QUIC conference sender", "QUIC conference receiver"],
                            ["TFRC conference sender", "TFRC conference receiver"],
                        ],
                    );
                    Measured::Conference {
                        rx: Task::spawn(rx_host, rx_name, move || {
                            conference::receive(
                                addr,
                                rx_t,
                                rvideos,
                                frames,
                                start,
                                receive_end,
                                rstop,
                            )
                        })?,
                        tx: Task::spawn(tx_host, tx_name, move || {
                            conference::send(addr, tx_t, videos, start, end, receive_end, tstop)
                        })?,
                    }
                }
            },
        ));
    }
    let floor_addr = SocketAddr::from((rx_host.addr(), FLOOR_PORT));
    let fstop = stop.clone();
    let floor_rx = Task::spawn(rx_host, "floor-probe sink", move || {
        floor::receive(floor_addr, start, receive_end, fstop)
    })?;
    let fstop = stop.clone();
    let floor_tx = Task::spawn(net.sender(0), "floor-probe sender", move || {
        floor::send(floor_addr, start, end, fstop)
    })?;

    let schedule = |host: &lowtide_netem::Host, plan: &Plan, targets: Vec<Target>| {
        let plan = plan.clone();
        let flag = stop.flag().clone();
        Task::spawn(host, "cross traffic", move || {
            std::thread::sleep(start.saturating_duration_since(Instant::now()));
            run_schedule(&plan, &targets, flag).map_err(traffic_err)
        })
    };
    let mut cross = vec![];
    if !checked.forward_plan.flows.is_empty() {
        cross.push(schedule(
            net.sender(0),
            &checked.forward_plan,
            forward_targets,
        )?);
    }
    let reverse_host = s.reverse_traffic.host.unwrap_or(s.topology.receivers - 1);
    if !checked.reverse_plan.flows.is_empty() {
        cross.push(schedule(
            net.receiver(reverse_host),
            &checked.reverse_plan,
            reverse_targets,
        )?);
    }
    Ok(TrialThreads {
        sinks,
        measured,
        floor_tx,
        floor_rx,
        cross,
        clip,
        _tls_files: tls_files,
    })
}

/// ECN is a host setting (`net.ipv4.tcp_ecn`): a variant that differs from the topology's
/// default sets its sender host, and receivers then accept ECN when asked (`2`).
pub(super) fn set_ecn(s: &Scenario, net: &Dumbbell, variants: &[usize]) -> Result<(), LabError> {
    let mut any = false;
    for &i in variants {
        let v = &s.variants[i];
        let ecn = s.ecn_of(v);
        any |= ecn;
        if ecn != s.topology.hosts.ecn {
            net.sender(v.sender)
                .sysctl("net.ipv4.tcp_ecn", if ecn { "1" } else { "0" })?;
        }
    }
    if any && !s.topology.hosts.ecn {
        for r in net.receivers() {
            r.sysctl("net.ipv4.tcp_ecn", "2")?;
        }
    }
    Ok(())
}

/// A variant's `sender_sysctls` on its sender host (the scenario check keeps them off hosts
/// that send cross traffic, and off hosts shared side by side with other values).
/// MPTCP variants: every host accepts two subflows, and the sender's path B address is an
/// endpoint of the in-kernel path manager (`ip mptcp endpoint ... subflow [backup]`), so each
/// MPTCP connection from path A adds a subflow on path B.
pub(super) fn set_mptcp(s: &Scenario, net: &Dumbbell, variants: &[usize]) -> Result<(), LabError> {
    let mut done = vec![];
    for &i in variants {
        let v = &s.variants[i];
        let Some(mode) = v.mptcp else { continue };
        if done.contains(&v.sender) {
            continue;
        }
        done.push(v.sender);
        let limits = [
            "mptcp",
            "limits",
            "set",
            "subflows",
            "2",
            "add_addr_accepted",
            "2",
        ];
        let tx = net.sender(v.sender);
        for host in [tx, net.receiver(s.application.receiver)] {
            host.ip(&limits)?;
        }
        let (Some(addr), Some(dev)) = (tx.path_b_addr(), tx.path_b_device()) else {
            return Err(LabError::io(
                format!("variant {}: MPTCP", v.name),
                "the network has no second path ([topology.path_b])",
            ));
        };
        let addr = addr.to_string();
        let mut endpoint = vec!["mptcp", "endpoint", "add", &addr, "dev", dev, "subflow"];
        if mode == crate::scenario::MptcpMode::Backup {
            endpoint.push("backup");
        }
        tx.ip(&endpoint)?;
    }
    Ok(())
}

pub(super) fn set_sender_sysctls(
    s: &Scenario,
    net: &Dumbbell,
    variants: &[usize],
) -> Result<(), LabError> {
    for &i in variants {
        let v = &s.variants[i];
        for (key, value) in &v.sender_sysctls {
            net.sender(v.sender).sysctl(key, value)?;
        }
    }
    Ok(())
}
