//! One direction of one path as emulator cells: the bottleneck queue with its AQM, the rate
//! cell draining it (with the link's outages), the propagation delay, the exit tap and the
//! router to the destination hosts.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use rattan_core::cells::router::{RouterCell, RoutingEntry, SimpleRoutingTable};
use rattan_core::cells::StdPacket;

use super::{Core, RunOptions};
use crate::aqm::{Aqm, Codel, Drd, DropTail, Rdc, Red};
use crate::cells::delay::DelayCell;
use crate::cells::guard::{Guarded, Watch};
use crate::cells::rate::{Capacity, RateCell};
use crate::config::{AqmConfig, LinkConfig};
use crate::error::NetemError;
use crate::failure::{Direction, FailureSlot, Site};
use crate::link::Outages;
use crate::queue::{LinkQueue, LinkQueueLimits};
use crate::stats::LinkStats;
use crate::tap::LinkTap;
use crate::trace::Trace;

fn aqm_for(
    link: &LinkConfig,
    name: &str,
    rtt: Duration,
    seed: u64,
) -> Result<Box<dyn Aqm>, NetemError> {
    let (min, max, hard) = link.aqm_thresholds(name, rtt)?;
    Ok(match &link.aqm {
        AqmConfig::DropTail => Box::new(DropTail),
        AqmConfig::Red {
            max_p,
            weight,
            gentle,
            ecn,
            mark_p,
            ..
        } => Box::new(
            Red::new(
                min,
                max,
                *max_p,
                *weight,
                *gentle,
                *ecn,
                link.nominal_rate_bps(),
                seed,
            )
            .with_mark_p(*mark_p),
        ),
        AqmConfig::Drd { ecn, .. } => Box::new(Drd::new(min, max, hard, *ecn, seed)),
        AqmConfig::Rdc(rdc) => Box::new(Rdc::new(rdc, link.nominal_rate_bps(), seed)),
        AqmConfig::Codel {
            target_ms,
            interval_ms,
            ecn,
        } => Box::new(Codel::new(
            Duration::from_secs_f64(target_ms / 1000.0),
            Duration::from_secs_f64(interval_ms / 1000.0),
            *ecn,
        )),
    })
}

/// What a direction's cells share.
pub(super) struct LinkParts {
    pub(super) direction: Direction,
    /// "" for path A, "path B " for path B: the start of the cells' names in failures.
    pub(super) label: &'static str,
    pub(super) tail: crate::timer::WakeTail,
    pub(super) fault: Arc<AtomicBool>,
    pub(super) failures: Arc<FailureSlot>,
    pub(super) outages: Outages,
}

/// One direction of one path: its link, the cells that feed it and where it delivers.
pub(super) struct LinkPlan {
    pub(super) direction: Direction,
    /// The cells' id prefix (`forward`, `reverse_b`, ...) and the pcap file's name.
    pub(super) name: String,
    pub(super) label: &'static str,
    pub(super) link: LinkConfig,
    /// The path's base RTT, for queue limits and thresholds in BDPs.
    pub(super) rtt: Duration,
    pub(super) stats: Arc<LinkStats>,
    /// Cells whose output enters this link.
    pub(super) entries: Vec<String>,
    /// Destination host address and the cell that hands it its packets.
    pub(super) exits: Vec<(Ipv4Addr, String)>,
    pub(super) fault: Arc<AtomicBool>,
    pub(super) seed: u64,
}

/// Builds a direction's cells: rate (draining `queue`), propagation delay, tap and router.
pub(super) fn build_direction(
    core: &mut Core,
    plan: &LinkPlan,
    queue: LinkQueue<StdPacket>,
    parts: LinkParts,
    options: &RunOptions,
) -> Result<(), NetemError> {
    let name = plan.name.as_str();
    let what = || format!("building the emulator's {name}");
    let failures = parts.failures.clone();
    let (direction, label) = (parts.direction, parts.label);
    let watch =
        |cell: &str| Watch::inside(Site::new(direction, format!("{label}{cell}")), &failures);
    build_link(core, name, &plan.link, queue, parts)?;
    let tap_stats = plan.stats.clone();
    let pcap = options
        .pcap_dir
        .as_ref()
        .map(|d| d.join(format!("{name}.pcap")));
    let (loss, seed) = (plan.link.loss, plan.seed);
    let mut tap_err = None;
    let tap_watch = watch("exit");
    core.build_cell(format!("{name}_tap"), |rt: &tokio::runtime::Handle| {
        let _rt = rt.enter();
        let tap = LinkTap::<StdPacket>::new(loss, seed ^ 0x7a9, tap_stats, pcap.as_deref())
            .map_err(|e| {
                tap_err = Some(e.to_string());
                rattan_core::error::Error::ConfigError(e.to_string())
            })?;
        Ok(Guarded::new(tap, tap_watch))
    })
    .map_err(|e| NetemError::setup(what(), tap_err.clone().unwrap_or(e.to_string())))?;
    let receivers = plan
        .exits
        .iter()
        .map(|(_, cell)| core.get_receiver(cell))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| NetemError::setup(what(), e))?;
    let table = plan
        .exits
        .iter()
        .enumerate()
        .map(|(k, (addr, _))| RoutingEntry::new(ipnet::IpNet::from(IpAddr::V4(*addr)), Some(k)))
        .collect();
    let router_watch = watch("router");
    core.build_cell(
        format!("{name}_router"),
        move |rt: &tokio::runtime::Handle| {
            let _rt = rt.enter();
            let router = RouterCell::<StdPacket, SimpleRoutingTable>::new(receivers, table)?;
            Ok(Guarded::new(router, router_watch))
        },
    )
    .map_err(|e| NetemError::setup(what(), e))?;
    for entry in &plan.entries {
        core.link_cell(entry.clone(), format!("{name}_bw"));
    }
    core.link_cell(format!("{name}_bw"), format!("{name}_delay"));
    core.link_cell(format!("{name}_delay"), format!("{name}_tap"));
    core.link_cell(format!("{name}_tap"), format!("{name}_router"));
    Ok(())
}

/// A direction's bottleneck queue with its AQM.
pub(super) fn bottleneck_queue(
    link: &LinkConfig,
    name: &str,
    rtt: Duration,
    seed: u64,
    stats: &Arc<LinkStats>,
) -> Result<LinkQueue<StdPacket>, NetemError> {
    let (packets, bytes) = link.queue_limit(rtt);
    Ok(LinkQueue::new(
        LinkQueueLimits { packets, bytes },
        aqm_for(link, name, rtt, seed)?,
        stats.clone(),
    ))
}

/// The rate and delay cells of one direction, `{name}_bw` (draining `queue`) and
/// `{name}_delay`.
fn build_link(
    core: &mut Core,
    name: &str,
    link: &LinkConfig,
    queue: LinkQueue<StdPacket>,
    parts: LinkParts,
) -> Result<(), NetemError> {
    let capacity = match &link.trace {
        Some(path) => Capacity::Trace(Trace::load(path).map_err(|error| {
            crate::error::ConfigError::Trace {
                field: format!("{name}.trace"),
                error,
            }
        })?),
        None => Capacity::Constant {
            bps: (link.rate_mbps.unwrap_or(0.0) * 1e6).round() as u64,
        },
    };
    let err =
        |e: rattan_core::error::Error| NetemError::setup(format!("building the {name} link"), e);
    let label = parts.label;
    let site = |cell: &str| {
        Watch::inside(
            Site::new(parts.direction, format!("{label}{cell}")),
            &parts.failures,
        )
    };
    let (rate_watch, tail, fault) = (site("rate"), parts.tail, parts.fault);
    let outages = parts.outages;
    core.build_cell(format!("{name}_bw"), move |rt: &tokio::runtime::Handle| {
        let _rt = rt.enter();
        let cell = RateCell::new(capacity, outages, queue, tail, fault)?;
        Ok(Guarded::new(cell, rate_watch))
    })
    .map_err(err)?;
    let delay = Duration::from_secs_f64(link.delay_ms / 1000.0);
    let delay_watch = site("propagation delay");
    core.build_cell(
        format!("{name}_delay"),
        move |rt: &tokio::runtime::Handle| {
            let _rt = rt.enter();
            Ok(Guarded::new(DelayCell::new(delay, tail)?, delay_watch))
        },
    )
    .map_err(err)?;
    Ok(())
}
