//! The layered video source of Hsiao, Kung and Tan, "Streaming Video over TCP with
//! Receiver-based Delay Control", Section 4.3 (parameters from Section 5.1), as pure logic:
//! time comes in as `now`, the send-buffer occupancy as a number of packets.
//!
//! The paper's rule:
//! - the video has layers of equal rate B (20 KB/s); with segments of X bytes the source runs
//!   once every period X/B (50 ms) and, at layer N, puts N segments into the TCP send buffer,
//!   one from each layer;
//! - what it may put in is bounded by the send buffer's size (the sender's maximum window,
//!   40 packets) minus its occupancy; the rest of that period's data is skipped (once in the
//!   buffer, data cannot be cancelled);
//! - a layer is added when every occupancy observed over an interval (15 s) is at most
//!   T_add (0 packets);
//! - a layer is dropped at once when an observed occupancy exceeds T_drop (20 packets); while
//!   the buffer stays above it (a retransmission timeout) every observation drops another,
//!   down to zero layers.
//!
//! Where we differ:
//! - the paper says "lower than T_add" with T_add = 0, which nothing meets; we read it as
//!   "at most" T_add (an empty buffer), as the issue states it;
//! - the observation interval for adding restarts after every add and every drop (the paper's
//!   Fig. 4 adds layers "one at a time");
//! - occupancy is observed when the source runs (once per period), not continuously; a
//!   driver may call [`LayeredSource::observe`] more often;
//! - the paper does not say where a stream starts; [`SourceConfig::initial_layers`] (1 in
//!   our scenarios), and a cap [`SourceConfig::max_layers`] (the layers the video has).

use std::time::{Duration, Instant};

use serde::Serialize;

/// The source's parameters (Section 5.1's values by default).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// X: bytes one segment counts for (the paper's 1000-byte packets).
    pub segment_bytes: u32,
    /// B: the rate of one layer, bytes/s.
    pub layer_bytes_per_s: f64,
    /// The send buffer's size, packets (the sender's maximum window).
    pub buffer_packets: u32,
    /// T_add, packets.
    pub add_at_most: u32,
    /// T_drop, packets.
    pub drop_above: u32,
    /// How long every observation must stay at or below T_add before a layer is added.
    pub add_after: Duration,
    pub initial_layers: u32,
    pub max_layers: u32,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            segment_bytes: 1000,
            layer_bytes_per_s: 20_000.0,
            buffer_packets: 40,
            add_at_most: 0,
            drop_above: 20,
            add_after: Duration::from_secs(15),
            initial_layers: 1,
            max_layers: 16,
        }
    }
}

/// A parameter outside what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{field}` = {value}: allowed is {allowed}")]
pub struct SourceConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

fn check(
    ok: bool,
    field: &'static str,
    value: impl ToString,
    allowed: &'static str,
) -> Result<(), SourceConfigError> {
    if ok {
        Ok(())
    } else {
        Err(SourceConfigError {
            field,
            value: value.to_string(),
            allowed,
        })
    }
}

impl SourceConfig {
    pub fn check(&self) -> Result<(), SourceConfigError> {
        check(
            (100..=65_536).contains(&self.segment_bytes),
            "segment_bytes",
            self.segment_bytes,
            "100 to 65536",
        )?;
        check(
            (100.0..=1e9).contains(&self.layer_bytes_per_s),
            "layer_bytes_per_s",
            self.layer_bytes_per_s,
            "100 to 1e9",
        )?;
        let period = f64::from(self.segment_bytes) / self.layer_bytes_per_s;
        check(
            (0.001..=10.0).contains(&period),
            "segment_bytes / layer_bytes_per_s",
            format!("{period} s"),
            "a period of 1 ms to 10 s",
        )?;
        check(
            (1..=100_000).contains(&self.buffer_packets),
            "buffer_packets",
            self.buffer_packets,
            "1 to 100000",
        )?;
        check(
            self.add_at_most < self.drop_above,
            "add_at_most",
            self.add_at_most,
            "below drop_above",
        )?;
        check(
            self.drop_above < self.buffer_packets,
            "drop_above",
            self.drop_above,
            "below buffer_packets",
        )?;
        check(
            self.add_after >= Duration::from_millis(10)
                && self.add_after <= Duration::from_secs(3600),
            "add_after",
            format!("{:?}", self.add_after),
            "10 ms to 1 hour",
        )?;
        check(
            (1..=1000).contains(&self.max_layers),
            "max_layers",
            self.max_layers,
            "1 to 1000",
        )?;
        check(
            self.initial_layers <= self.max_layers,
            "initial_layers",
            self.initial_layers,
            "0 up to max_layers",
        )
    }

    /// X/B: how often the source runs.
    pub fn period(&self) -> Duration {
        Duration::from_secs_f64(f64::from(self.segment_bytes) / self.layer_bytes_per_s)
    }
}

/// Why the layer count changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Every observation over the interval was at most T_add.
    Added,
    /// An observation exceeded T_drop.
    Dropped,
}

/// What to do in one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// Segments to write now (one per layer, as many as the buffer has room for).
    pub segments: u32,
    /// Segments of this period's layers skipped for lack of room.
    pub skipped: u32,
    /// The layer count after this period's observation.
    pub layers: u32,
    pub change: Option<Change>,
}

/// Counters of a source's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SourceCounters {
    pub periods: u64,
    pub observations: u64,
    pub adds: u64,
    pub drops: u64,
    pub segments: u64,
    /// Segments not written because the buffer was full.
    pub skipped: u64,
}

/// The source's state.
#[derive(Debug, Clone)]
pub struct LayeredSource {
    cfg: SourceConfig,
    layers: u32,
    /// Since when every observation has been at most T_add (None: the last one was above).
    quiet_since: Option<Instant>,
    next_period: Instant,
    counters: SourceCounters,
}

impl LayeredSource {
    /// A source whose first period is due at `now`.
    pub fn new(cfg: SourceConfig, now: Instant) -> Result<Self, SourceConfigError> {
        cfg.check()?;
        Ok(LayeredSource {
            layers: cfg.initial_layers,
            cfg,
            quiet_since: Some(now),
            next_period: now,
            counters: SourceCounters::default(),
        })
    }

    pub fn config(&self) -> &SourceConfig {
        &self.cfg
    }

    pub fn layers(&self) -> u32 {
        self.layers
    }

    pub fn counters(&self) -> SourceCounters {
        self.counters
    }

    /// When the next period is due.
    pub fn next_period(&self) -> Instant {
        self.next_period
    }

    /// One observation of the send buffer's occupancy (packets) at `now`; adds or drops a
    /// layer as the rule says.
    pub fn observe(&mut self, now: Instant, occupancy: u32) -> Option<Change> {
        self.counters.observations += 1;
        if occupancy > self.cfg.drop_above {
            self.quiet_since = None;
            if self.layers > 0 {
                self.layers -= 1;
                self.counters.drops += 1;
                return Some(Change::Dropped);
            }
            return None;
        }
        if occupancy > self.cfg.add_at_most {
            self.quiet_since = None;
            return None;
        }
        let since = *self.quiet_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= self.cfg.add_after
            && self.layers < self.cfg.max_layers
        {
            self.layers += 1;
            self.counters.adds += 1;
            // The next add needs a whole interval of its own.
            self.quiet_since = Some(now);
            return Some(Change::Added);
        }
        None
    }

    /// Runs the period due at or before `now`: observes `occupancy`, then says how many
    /// segments to write. `None` when no period is due yet. A driver that fell behind runs
    /// one period per call (the next one is due a period after this one was).
    pub fn poll(&mut self, now: Instant, occupancy: u32) -> Option<Period> {
        if now < self.next_period {
            return None;
        }
        let period = self.cfg.period();
        self.next_period += period;
        // A driver far behind (stopped for longer than a period) does not write a backlog.
        if self.next_period + period < now {
            self.next_period = now + period;
        }
        self.counters.periods += 1;
        let change = self.observe(now, occupancy);
        let room = self.cfg.buffer_packets.saturating_sub(occupancy);
        let segments = self.layers.min(room);
        let skipped = self.layers - segments;
        self.counters.segments += u64::from(segments);
        self.counters.skipped += u64::from(skipped);
        Some(Period {
            segments,
            skipped,
            layers: self.layers,
            change,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn the_period_is_segment_over_layer_rate() {
        assert_eq!(SourceConfig::default().period(), ms(50));
    }

    #[test]
    fn a_layer_is_added_after_fifteen_seconds_of_an_empty_buffer() {
        let t0 = Instant::now();
        let mut s = LayeredSource::new(SourceConfig::default(), t0).unwrap();
        let mut t = t0;
        let mut added_at = vec![];
        while t < t0 + Duration::from_secs(46) {
            if let Some(p) = s.poll(t, 0) {
                if p.change == Some(Change::Added) {
                    added_at.push((t - t0).as_millis());
                }
                assert_eq!(p.segments, p.layers);
            }
            t += ms(10);
        }
        // One at a time, each after a whole interval of its own.
        assert_eq!(added_at, vec![15_000, 30_000, 45_000]);
        assert_eq!(s.layers(), 4);
        // 46 s at one period per 50 ms.
        assert_eq!(s.counters().periods, 920);
    }

    #[test]
    fn one_busy_observation_restarts_the_add_interval() {
        let t0 = Instant::now();
        let mut s = LayeredSource::new(SourceConfig::default(), t0).unwrap();
        assert_eq!(s.observe(t0 + ms(14_000), 1), None);
        assert_eq!(s.observe(t0 + ms(15_000), 0), None);
        assert_eq!(s.observe(t0 + ms(29_999), 0), None);
        assert_eq!(s.observe(t0 + ms(30_000), 0), Some(Change::Added));
        assert_eq!(s.layers(), 2);
    }

    #[test]
    fn every_observation_above_t_drop_drops_one_layer_down_to_zero() {
        let t0 = Instant::now();
        let cfg = SourceConfig {
            initial_layers: 3,
            ..SourceConfig::default()
        };
        let mut s = LayeredSource::new(cfg, t0).unwrap();
        // At T_drop: no drop.
        assert_eq!(s.observe(t0, 20), None);
        assert_eq!(s.layers(), 3);
        for (k, left) in [2, 1, 0].into_iter().enumerate() {
            assert_eq!(s.observe(t0 + ms(k as u64), 21), Some(Change::Dropped));
            assert_eq!(s.layers(), left);
        }
        assert_eq!(s.observe(t0 + ms(5), 35), None, "no layer left to drop");
        assert_eq!(s.counters().drops, 3);
        // Back to an empty buffer: a layer again only 15 s after the first quiet observation.
        assert_eq!(s.observe(t0 + ms(1_000), 0), None);
        assert_eq!(s.observe(t0 + ms(15_999), 0), None);
        assert_eq!(s.observe(t0 + ms(16_000), 0), Some(Change::Added));
    }

    #[test]
    fn writes_are_bounded_by_the_room_in_the_buffer() {
        let t0 = Instant::now();
        let cfg = SourceConfig {
            initial_layers: 8,
            buffer_packets: 40,
            drop_above: 39,
            ..SourceConfig::default()
        };
        let mut s = LayeredSource::new(cfg, t0).unwrap();
        let p = s.poll(t0, 35).unwrap();
        assert_eq!((p.segments, p.skipped, p.layers), (5, 3, 8));
        assert_eq!(s.poll(t0 + ms(49), 0), None, "the next period is 50 ms on");
        let p = s.poll(t0 + ms(50), 0).unwrap();
        assert_eq!((p.segments, p.skipped), (8, 0));
        assert_eq!(s.counters().skipped, 3);
        assert_eq!(s.counters().segments, 13);
    }

    #[test]
    fn a_driver_far_behind_writes_no_backlog() {
        let t0 = Instant::now();
        let mut s = LayeredSource::new(SourceConfig::default(), t0).unwrap();
        s.poll(t0, 0).unwrap();
        // Asleep for a second: one period now, the next a period later.
        s.poll(t0 + ms(1_000), 0).unwrap();
        assert_eq!(s.next_period(), t0 + ms(1_050));
        assert_eq!(s.poll(t0 + ms(1_010), 0), None);
    }

    #[test]
    fn a_stream_under_a_rate_limit_settles_at_the_layers_it_fits() {
        // A toy buffer drained at 3.5 layers' worth: the source climbs to 4, the buffer
        // grows past T_drop, it falls back to 3, and so on; it never sits above 4.
        let t0 = Instant::now();
        let mut s = LayeredSource::new(SourceConfig::default(), t0).unwrap();
        let mut buffer = 0.0f64;
        let mut t = t0;
        let mut max = 0;
        while t < t0 + Duration::from_secs(300) {
            let occ = buffer.ceil() as u32;
            if let Some(p) = s.poll(t, occ) {
                buffer += f64::from(p.segments);
                max = max.max(p.layers);
            }
            buffer = (buffer - 3.5 * 0.010 / 0.050).max(0.0);
            t += ms(10);
        }
        assert_eq!(max, 4);
        assert!(s.counters().drops >= 1);
        assert!((3..=4).contains(&s.layers()), "{}", s.layers());
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let t0 = Instant::now();
        let e = LayeredSource::new(
            SourceConfig {
                drop_above: 40,
                ..SourceConfig::default()
            },
            t0,
        )
        .unwrap_err();
        assert_eq!(e.field, "drop_above");
        let e = SourceConfig {
            initial_layers: 17,
            ..SourceConfig::default()
        }
        .check()
        .unwrap_err();
        assert!(e.to_string().contains("initial_layers") && e.to_string().contains("17"));
    }
}
