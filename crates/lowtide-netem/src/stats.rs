//! Per-link measurements: packets and bytes in and out, drops, marks and spares by reason, queue
//! occupancy and sojourn time as a time series, and the emulator's lateness against its own
//! schedule. Written by the emulator's cells, read by reports at any time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::aqm::{AnsweringFlows, AnsweringReport, Reason};
use crate::ecn;

/// At most this many samples per series are kept (about 12 MB for the queue series); later
/// samples are counted in `samples_skipped` so a report says it is truncated.
const MAX_SAMPLES: usize = 1_000_000;

/// One dequeue at the bottleneck.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct QueueSample {
    /// Microseconds since the network started.
    pub t_us: u64,
    /// Packets and bytes left in the queue after this dequeue.
    pub packets: u32,
    pub bytes: u32,
    /// How long the dequeued packet waited, in microseconds.
    pub sojourn_us: u32,
}

/// A delivery is logged with its time when it is this late (`LinkStats::late_deliveries`).
pub const LATE_DELIVERY: Duration = Duration::from_millis(1);

/// A packet that left the link more than [`LATE_DELIVERY`] after its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LateDelivery {
    /// Microseconds since the network started, and how late.
    pub t_us: u64,
    pub late_us: u32,
}

/// A TCP segment the link dropped (`LinkStats::dropped_segments`): with the flow's ports and
/// sequence number a trace can tell a retransmission dropped again from a first loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DroppedSegment {
    /// Microseconds since the network started.
    pub t_us: u64,
    pub reason: &'static str,
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    /// Payload bytes (0: a pure ACK or control segment).
    pub payload: u16,
}

pub struct LinkStats {
    start: Instant,
    arrived_packets: AtomicU64,
    arrived_bytes: AtomicU64,
    delivered_packets: AtomicU64,
    delivered_bytes: AtomicU64,
    max_frame: AtomicU64,
    drops: [AtomicU64; Reason::ALL.len()],
    marks: [AtomicU64; Reason::ALL.len()],
    spares: [AtomicU64; Reason::ALL.len()],
    holds: [AtomicU64; Reason::ALL.len()],
    queue: Mutex<Vec<QueueSample>>,
    lateness_us: Mutex<Vec<u32>>,
    /// Deliveries later than [`LATE_DELIVERY`], with their time: when the emulator stalled.
    late_deliveries: Mutex<Vec<LateDelivery>>,
    /// The TCP segments dropped, with their time.
    dropped_segments: Mutex<Vec<DroppedSegment>>,
    /// Exact RDC: the delays written into packets, and packets that could not carry one.
    stamps_us: Mutex<Vec<u32>>,
    stamp_skipped: AtomicU64,
    /// RDC: how long held packets were to wait in the delay line.
    holds_us: Mutex<Vec<u32>>,
    /// RDC: the cell's table of answering flows, read when a report is made.
    answering: Mutex<Option<Arc<Mutex<AnsweringFlows>>>>,
    samples_skipped: AtomicU64,
}

impl LinkStats {
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            arrived_packets: AtomicU64::new(0),
            arrived_bytes: AtomicU64::new(0),
            delivered_packets: AtomicU64::new(0),
            delivered_bytes: AtomicU64::new(0),
            max_frame: AtomicU64::new(0),
            drops: Default::default(),
            marks: Default::default(),
            spares: Default::default(),
            holds: Default::default(),
            queue: Mutex::new(Vec::new()),
            lateness_us: Mutex::new(Vec::new()),
            late_deliveries: Mutex::new(Vec::new()),
            dropped_segments: Mutex::new(Vec::new()),
            stamps_us: Mutex::new(Vec::new()),
            stamp_skipped: AtomicU64::new(0),
            holds_us: Mutex::new(Vec::new()),
            answering: Mutex::new(None),
            samples_skipped: AtomicU64::new(0),
        }
    }

    /// RDC: the law put a packet in the delay line for `delay`.
    pub fn held(&self, reason: Reason, delay: Duration) {
        self.holds[reason.index()].fetch_add(1, Relaxed);
        let us = delay.as_micros().min(u32::MAX as u128) as u32;
        push_bounded(&self.holds_us, us, &self.samples_skipped);
    }

    /// RDC: reports include this table's counters.
    pub fn attach_answering(&self, table: Arc<Mutex<AnsweringFlows>>) {
        if let Ok(mut slot) = self.answering.lock() {
            *slot = Some(table);
        }
    }

    /// The origin of [`QueueSample::t_us`]: when the network started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Microseconds from the network's start to `now`: every logged event's `t_us`.
    fn since_start_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_micros() as u64
    }

    pub fn arrived(&self, bytes: usize) {
        self.arrived_packets.fetch_add(1, Relaxed);
        self.arrived_bytes.fetch_add(bytes as u64, Relaxed);
        self.max_frame.fetch_max(bytes as u64, Relaxed);
    }

    pub fn dropped(&self, reason: Reason) {
        self.drops[reason.index()].fetch_add(1, Relaxed);
    }

    /// A drop of `frame` at `now`: counted, and logged with its flow and sequence number
    /// when it is a TCP segment.
    pub fn dropped_frame(&self, reason: Reason, frame: &[u8], now: Instant) {
        self.dropped(reason);
        let (Some(tcp), Some((seq, payload))) = (ecn::tcp_flow(frame), ecn::tcp_seq(frame)) else {
            return;
        };
        let segment = DroppedSegment {
            t_us: self.since_start_us(now),
            reason: reason.as_str(),
            src_port: tcp.key.src.port(),
            dst_port: tcp.key.dst.port(),
            seq,
            payload,
        };
        push_bounded(&self.dropped_segments, segment, &self.samples_skipped);
    }

    /// The TCP segments dropped so far, in order.
    pub fn dropped_segments(&self) -> Vec<DroppedSegment> {
        copy_of(&self.dropped_segments)
    }

    pub fn marked(&self, reason: Reason) {
        self.marks[reason.index()].fetch_add(1, Relaxed);
    }

    /// The law passed a packet it would have dropped (it could not be marked).
    pub fn spared(&self, reason: Reason) {
        self.spares[reason.index()].fetch_add(1, Relaxed);
    }

    pub fn dequeued(&self, now: Instant, packets: usize, bytes: usize, sojourn: Duration) {
        let sample = QueueSample {
            t_us: self.since_start_us(now),
            packets: packets as u32,
            bytes: bytes as u32,
            sojourn_us: sojourn.as_micros().min(u32::MAX as u128) as u32,
        };
        push_bounded(&self.queue, sample, &self.samples_skipped);
    }

    /// Exact RDC wrote `delay` into a packet.
    pub fn stamped(&self, delay: Duration) {
        let us = delay.as_micros().min(u32::MAX as u128) as u32;
        push_bounded(&self.stamps_us, us, &self.samples_skipped);
    }

    /// Exact RDC could not write into a packet (not an atomic IPv4 datagram).
    pub fn stamp_skipped(&self) {
        self.stamp_skipped.fetch_add(1, Relaxed);
    }

    /// A packet left the link at `now`; it was due to leave at `due`.
    pub fn delivered(&self, bytes: usize, now: Instant, due: Instant) {
        self.delivered_packets.fetch_add(1, Relaxed);
        self.delivered_bytes.fetch_add(bytes as u64, Relaxed);
        let late = now
            .saturating_duration_since(due)
            .as_micros()
            .min(u32::MAX as u128) as u32;
        push_bounded(&self.lateness_us, late, &self.samples_skipped);
        if late > LATE_DELIVERY.as_micros() as u32 {
            let t_us = self.since_start_us(now);
            let event = LateDelivery {
                t_us,
                late_us: late,
            };
            push_bounded(&self.late_deliveries, event, &self.samples_skipped);
        }
    }

    /// The deliveries later than [`LATE_DELIVERY`] so far, in order.
    pub fn late_deliveries(&self) -> Vec<LateDelivery> {
        copy_of(&self.late_deliveries)
    }

    /// A copy of the queue time series.
    pub fn queue_samples(&self) -> Vec<QueueSample> {
        copy_of(&self.queue)
    }

    /// Forgets everything measured so far (e.g. after a warm-up).
    pub fn reset(&self) {
        for c in [
            &self.arrived_packets,
            &self.arrived_bytes,
            &self.delivered_packets,
            &self.delivered_bytes,
            &self.max_frame,
            &self.stamp_skipped,
            &self.samples_skipped,
        ] {
            c.store(0, Relaxed);
        }
        for c in self
            .drops
            .iter()
            .chain(&self.marks)
            .chain(&self.spares)
            .chain(&self.holds)
        {
            c.store(0, Relaxed);
        }
        clear(&self.queue);
        for series in [&self.lateness_us, &self.stamps_us, &self.holds_us] {
            clear(series);
        }
        clear(&self.late_deliveries);
        clear(&self.dropped_segments);
    }

    pub fn report(&self) -> LinkReport {
        let by_reason = |counters: &[AtomicU64]| -> BTreeMap<&'static str, u64> {
            Reason::ALL
                .iter()
                .map(|r| (r.as_str(), counters[r.index()].load(Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        let samples = self.queue_samples();
        let mut sojourn: Vec<u32> = samples.iter().map(|s| s.sojourn_us).collect();
        let mut lateness = copy_of(&self.lateness_us);
        let mut stamps = copy_of(&self.stamps_us);
        let mut holds = copy_of(&self.holds_us);
        let answering = self.answering.lock().ok().and_then(|slot| {
            let table = slot.as_ref()?;
            let table = table.lock().unwrap_or_else(|p| p.into_inner());
            Some(table.report())
        });
        LinkReport {
            arrived_packets: self.arrived_packets.load(Relaxed),
            arrived_bytes: self.arrived_bytes.load(Relaxed),
            delivered_packets: self.delivered_packets.load(Relaxed),
            delivered_bytes: self.delivered_bytes.load(Relaxed),
            largest_frame_bytes: self.max_frame.load(Relaxed),
            drops: by_reason(&self.drops),
            marks: by_reason(&self.marks),
            spares: by_reason(&self.spares),
            holds: by_reason(&self.holds),
            max_queue_packets: samples.iter().map(|s| s.packets).max().unwrap_or(0),
            sojourn_ms: Percentiles::of_micros(&mut sojourn),
            lateness_ms: Percentiles::of_micros(&mut lateness),
            rdc_delay_ms: Percentiles::of_micros(&mut stamps),
            rdc_unstamped: self.stamp_skipped.load(Relaxed),
            rdc_hold_ms: Percentiles::of_micros(&mut holds),
            rdc_answering: answering,
            samples_skipped: self.samples_skipped.load(Relaxed),
        }
    }
}

/// A copy of a logged series (empty if a writer panicked holding it).
fn copy_of<T: Clone>(series: &Mutex<Vec<T>>) -> Vec<T> {
    series.lock().map(|l| l.clone()).unwrap_or_default()
}

fn clear<T>(series: &Mutex<Vec<T>>) {
    if let Ok(mut l) = series.lock() {
        l.clear();
    }
}

fn push_bounded<T>(series: &Mutex<Vec<T>>, item: T, skipped: &AtomicU64) {
    if let Ok(mut s) = series.lock() {
        if s.len() < MAX_SAMPLES {
            s.push(item);
            return;
        }
    }
    skipped.fetch_add(1, Relaxed);
}

/// What a link did, for reports and checks.
#[derive(Debug, Clone, Serialize)]
pub struct LinkReport {
    pub arrived_packets: u64,
    pub arrived_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    /// The largest frame seen; above 1514 means segmentation offload leaked into the link.
    pub largest_frame_bytes: u64,
    pub drops: BTreeMap<&'static str, u64>,
    pub marks: BTreeMap<&'static str, u64>,
    /// Packets the law passed where it would have dropped them (1-bit RDC's `not_ect`).
    pub spares: BTreeMap<&'static str, u64>,
    /// Packets the law put in the delay line, by why (RDC: flows that do not answer).
    pub holds: BTreeMap<&'static str, u64>,
    pub max_queue_packets: u32,
    pub sojourn_ms: Percentiles,
    /// How late packets left the link against the emulator's own schedule.
    pub lateness_ms: Percentiles,
    /// Exact RDC: the delays written into packets (count 0 on other links).
    pub rdc_delay_ms: Percentiles,
    /// Exact RDC: packets that could not carry a delay (not atomic IPv4 datagrams).
    pub rdc_unstamped: u64,
    /// RDC: how long held packets were to wait (count 0: nothing held).
    pub rdc_hold_ms: Percentiles,
    /// RDC with a table of answering flows: its counters (None on other links).
    pub rdc_answering: Option<AnsweringReport>,
    pub samples_skipped: u64,
}

impl LinkReport {
    pub fn total_drops(&self) -> u64 {
        self.drops.values().sum()
    }
    pub fn total_marks(&self) -> u64 {
        self.marks.values().sum()
    }
}

/// Percentiles of a sample set, with its size: `count == 0` means no data (every other field
/// is then 0 and means nothing; check the count before comparing with a bound).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
pub struct Percentiles {
    pub count: usize,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// Percentiles (in ms) of samples in microseconds; sorts the slice.
    pub fn of_micros(samples: &mut [u32]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let us = lowtide_proto::quantile::of_sorted(samples, q).expect("not empty");
            f64::from(us) / 1000.0
        };
        Self {
            count: samples.len(),
            min: at(0.0),
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_tcp_segments_are_logged_with_flow_and_sequence() {
        let start = Instant::now();
        let s = LinkStats::new(start);
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend([
            0x45, 0, 0x04, 0x10, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 1, 1, 1, 10, 2, 1, 1,
        ]);
        let mut tcp = [0u8; 20];
        tcp[0..4].copy_from_slice(&[0x9c, 0x40, 0x13, 0x88]); // 40000 -> 5000
        tcp[4..8].copy_from_slice(&42u32.to_be_bytes());
        tcp[12] = 0x50;
        f.extend(tcp);
        s.dropped_frame(Reason::QueueFull, &f, start + Duration::from_millis(3));
        s.dropped_frame(Reason::QueueFull, &f[..20], start);
        assert_eq!(
            s.dropped_segments(),
            vec![DroppedSegment {
                t_us: 3000,
                reason: Reason::QueueFull.as_str(),
                src_port: 40000,
                dst_port: 5000,
                seq: 42,
                payload: 1000,
            }]
        );
        assert_eq!(
            s.report().total_drops(),
            2,
            "a frame that is not TCP still counts"
        );
        s.reset();
        assert!(s.dropped_segments().is_empty());
    }

    #[test]
    fn report_counts_by_reason_and_summarises_series() {
        let start = Instant::now();
        let s = LinkStats::new(start);
        for _ in 0..3 {
            s.arrived(1514);
        }
        s.dropped(Reason::QueueFull);
        s.marked(Reason::RedEarly);
        s.marked(Reason::RedEarly);
        for i in 0..100u64 {
            s.dequeued(start, 1, 1500, Duration::from_micros(i * 100));
            s.delivered(1500, start + Duration::from_micros(i), start);
        }
        let r = s.report();
        assert_eq!(r.arrived_packets, 3);
        assert_eq!(r.drops.get("queue_full"), Some(&1));
        assert_eq!(r.total_marks(), 2);
        assert_eq!(r.sojourn_ms.max, 9.9);
        assert_eq!(r.lateness_ms.count, 100);
        assert!(s.late_deliveries().is_empty(), "none was over 1 ms late");
        s.delivered(1500, start + Duration::from_micros(2500), start);
        let late = s.late_deliveries();
        assert_eq!((late.len(), late[0].t_us, late[0].late_us), (1, 2500, 2500));
        s.reset();
        assert_eq!(s.report().arrived_packets, 0);
    }
}
