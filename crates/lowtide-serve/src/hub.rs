//! The published streams and their viewers: a publisher's units go from here into every
//! viewer's own queue ([`crate::viewer::queue`]), and a new viewer joins at the stream's last
//! keyframe.
//!
//! The hub only hands out shared pointers: a unit's bytes exist once whatever the number of
//! viewers, and a viewer's memory is its queue of pointers, bounded by its queue's byte limit
//! and deadline. Locks are held for a push or a join, never across I/O.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lowtide_media::encoded::{FrameKind, UnitInfo};
use tokio::sync::Notify;

use crate::viewer::queue::{QueueConfig, ViewerQueue};
use crate::viewer::ViewerStats;

/// One access unit as the server holds it.
#[derive(Debug)]
pub struct HubUnit {
    pub info: UnitInfo,
    pub has_parameter_sets: bool,
    /// The in-band capture stamp, µs since the Unix epoch; 0 when the unit carries none.
    pub capture_us: u64,
    /// When the unit reached the server, µs since the Unix epoch.
    pub ingest_us: u64,
    pub ingest_at: Instant,
    /// The access unit (Annex-B).
    pub data: Vec<u8>,
}

/// A viewer as the hub and the metrics see it.
#[derive(Debug)]
pub struct ViewerSlot {
    pub id: u64,
    pub addr: IpAddr,
    pub queue: Mutex<ViewerQueue>,
    /// Woken when a unit is queued or the stream ends.
    pub notify: Notify,
    pub stats: Mutex<ViewerStats>,
}

/// Why a publisher is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    #[error("stream path {0:?} is already being published")]
    Taken(String),
    #[error("codec {0:?} cannot be served to browsers (H.264 and H.265 can)")]
    Codec(lowtide_media::encoded::Codec),
}

/// Why a viewer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    #[error("no stream is published at {0:?}")]
    NoStream(String),
    #[error("{0} viewers already watch from this address")]
    PerAddress(usize),
    #[error("the server has its maximum of {0} viewers")]
    Full(usize),
}

/// The hub's limits.
#[derive(Debug, Clone, Copy)]
pub struct HubConfig {
    pub queue: QueueConfig,
    /// The join's catch-up (the group of pictures so far) is offered while under this.
    pub max_catch_up_bytes: usize,
    pub max_viewers: usize,
    pub max_viewers_per_address: usize,
    /// A publisher is asked for a keyframe at most this often (0: never).
    pub keyframe_request_interval: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            queue: QueueConfig::default(),
            max_catch_up_bytes: 1 << 20,
            max_viewers: 4096,
            max_viewers_per_address: 64,
            keyframe_request_interval: Duration::from_secs(1),
        }
    }
}

/// A published stream.
#[derive(Debug)]
pub struct Stream {
    pub path: String,
    pub codec: lowtide_media::encoded::Codec,
    /// [`crate::viewer_wire::codec_byte`].
    pub codec_byte: u8,
    state: Mutex<StreamState>,
    ended: AtomicBool,
    pub units_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub upstream_lost: AtomicU64,
    pub keyframe_requests: AtomicU64,
    /// Keyframe requests for the publisher (its ingest task forwards them).
    keyframe_wanted: Notify,
}

#[derive(Debug, Default)]
struct StreamState {
    params: Option<Arc<HubUnit>>,
    /// The last keyframe and the references after it (what a joiner needs), or empty when
    /// that is over the catch-up bound.
    gop: Vec<Arc<HubUnit>>,
    gop_bytes: usize,
    last_index: Option<u64>,
    viewers: Vec<Arc<ViewerSlot>>,
    last_request: Option<Instant>,
}

impl Stream {
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The viewers now.
    pub fn viewers(&self) -> Vec<Arc<ViewerSlot>> {
        self.lock().viewers.clone()
    }

    /// Waits for a viewer's keyframe request (the ingest task sends it to the publisher).
    pub async fn keyframe_wanted(&self) {
        self.keyframe_wanted.notified().await
    }

    /// A viewer's chain broke: ask the publisher for a keyframe, at most once per `interval`.
    pub fn want_keyframe(&self, now: Instant, interval: Duration) {
        if interval.is_zero() {
            return;
        }
        let mut s = self.lock();
        if s.last_request.is_some_and(|t| now < t + interval) {
            return;
        }
        s.last_request = Some(now);
        drop(s);
        self.keyframe_requests.fetch_add(1, Ordering::Relaxed);
        self.keyframe_wanted.notify_one();
    }
}

/// The published streams.
#[derive(Debug, Default)]
pub struct Hub {
    cfg: HubConfig,
    streams: Mutex<HashMap<String, Arc<Stream>>>,
    next_viewer: AtomicU64,
}

impl Hub {
    pub fn new(cfg: HubConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    fn streams(&self) -> MutexGuard<'_, HashMap<String, Arc<Stream>>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The streams now.
    pub fn list(&self) -> Vec<Arc<Stream>> {
        let mut v: Vec<_> = self.streams().values().cloned().collect();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }

    pub fn get(&self, path: &str) -> Option<Arc<Stream>> {
        self.streams().get(path).cloned()
    }

    /// A publisher starts `path`.
    pub fn publish(
        &self,
        path: &str,
        codec: lowtide_media::encoded::Codec,
    ) -> Result<Arc<Stream>, PublishError> {
        let codec_byte = crate::viewer_wire::codec_byte(codec).ok_or(PublishError::Codec(codec))?;
        let mut streams = self.streams();
        if streams.contains_key(path) {
            return Err(PublishError::Taken(path.into()));
        }
        let s = Arc::new(Stream {
            path: path.into(),
            codec,
            codec_byte,
            state: Mutex::default(),
            ended: AtomicBool::new(false),
            units_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            upstream_lost: AtomicU64::new(0),
            keyframe_requests: AtomicU64::new(0),
            keyframe_wanted: Notify::new(),
        });
        streams.insert(path.into(), s.clone());
        Ok(s)
    }

    /// A unit of `stream` arrived: into the catch-up and every viewer's queue.
    pub fn push(&self, stream: &Stream, unit: HubUnit) {
        let unit = Arc::new(unit);
        stream.units_in.fetch_add(1, Ordering::Relaxed);
        stream
            .bytes_in
            .fetch_add(unit.data.len() as u64, Ordering::Relaxed);
        let viewers = {
            let mut s = stream.lock();
            let gap = s
                .last_index
                .map_or(0, |l| unit.info.index.saturating_sub(l.saturating_add(1)));
            s.last_index = Some(unit.info.index);
            let gap = u32::try_from(gap).unwrap_or(u32::MAX);
            if gap > 0 {
                stream
                    .upstream_lost
                    .fetch_add(u64::from(gap), Ordering::Relaxed);
            }
            match unit.info.kind {
                FrameKind::ParameterSets => s.params = Some(unit.clone()),
                FrameKind::Keyframe => {
                    s.gop = vec![unit.clone()];
                    s.gop_bytes = unit.data.len();
                }
                // A gap breaks the catch-up as it breaks a viewer: nothing to join on.
                _ if gap > 0 => {
                    s.gop.clear();
                    s.gop_bytes = usize::MAX;
                }
                FrameKind::Reference => {
                    if !s.gop.is_empty() {
                        s.gop_bytes = s.gop_bytes.saturating_add(unit.data.len());
                        if s.gop_bytes > self.cfg.max_catch_up_bytes {
                            s.gop.clear();
                        } else {
                            s.gop.push(unit.clone());
                        }
                    }
                }
                FrameKind::NonReference => {}
            }
            if gap > 0 {
                for v in &s.viewers {
                    lock(&v.queue).upstream_lost(gap);
                }
            }
            s.viewers.clone()
        };
        for v in viewers {
            lock(&v.queue).push(unit.clone(), false);
            v.notify.notify_one();
        }
    }

    /// The publisher of `stream` is gone: its viewers send what they hold, then the end.
    pub fn end(&self, stream: &Arc<Stream>) {
        stream.ended.store(true, Ordering::Release);
        let mut streams = self.streams();
        if streams
            .get(&stream.path)
            .is_some_and(|s| Arc::ptr_eq(s, stream))
        {
            streams.remove(&stream.path);
        }
        drop(streams);
        for v in stream.viewers() {
            v.notify.notify_one();
        }
    }

    /// A viewer from `addr` joins `path`: its queue starts with the parameter sets and the
    /// current group of pictures when that is within the catch-up bound, else it waits for
    /// the next keyframe (and the publisher is asked for one).
    pub fn join(
        &self,
        path: &str,
        addr: IpAddr,
        now: Instant,
    ) -> Result<(Arc<Stream>, Arc<ViewerSlot>), JoinError> {
        let streams = self.streams();
        let stream = streams
            .get(path)
            .cloned()
            .ok_or_else(|| JoinError::NoStream(path.into()))?;
        let all = streams
            .values()
            .map(|s| s.lock().viewers.len())
            .sum::<usize>();
        if all >= self.cfg.max_viewers {
            return Err(JoinError::Full(self.cfg.max_viewers));
        }
        let from_addr = streams
            .values()
            .flat_map(|s| s.lock().viewers.clone())
            .filter(|v| v.addr == addr)
            .count();
        if from_addr >= self.cfg.max_viewers_per_address {
            return Err(JoinError::PerAddress(from_addr));
        }
        drop(streams);
        let slot = Arc::new(ViewerSlot {
            id: self.next_viewer.fetch_add(1, Ordering::Relaxed) + 1,
            addr,
            queue: Mutex::new(ViewerQueue::new(self.cfg.queue)),
            notify: Notify::new(),
            stats: Mutex::default(),
        });
        let mut s = stream.lock();
        let catch_up = !s.gop.is_empty();
        {
            let mut q = lock(&slot.queue);
            if catch_up {
                if let Some(p) = &s.params {
                    q.push(p.clone(), true);
                }
                for u in &s.gop {
                    q.push(u.clone(), true);
                }
            }
        }
        s.viewers.push(slot.clone());
        drop(s);
        if !catch_up {
            stream.want_keyframe(now, self.cfg.keyframe_request_interval);
        }
        Ok((stream, slot))
    }

    /// A viewer left.
    pub fn leave(&self, stream: &Stream, viewer: &ViewerSlot) {
        stream.lock().viewers.retain(|v| v.id != viewer.id);
    }
}

/// A poisoned lock still holds consistent counters: take it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowtide_media::encoded::Codec;
    use std::net::Ipv4Addr;

    fn unit(index: u64, kind: FrameKind, bytes: usize) -> HubUnit {
        HubUnit {
            info: UnitInfo::new(index, kind),
            has_parameter_sets: kind == FrameKind::ParameterSets,
            capture_us: 0,
            ingest_us: 0,
            ingest_at: Instant::now(),
            data: vec![0; bytes],
        }
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn queued(slot: &ViewerSlot) -> Vec<u64> {
        let now = Instant::now();
        let mut q = lock(&slot.queue);
        std::iter::from_fn(|| q.pop(now, Duration::ZERO))
            .map(|n| n.unit.info.index)
            .collect()
    }

    #[test]
    fn a_joiner_gets_the_parameter_sets_and_the_references_since_the_keyframe() {
        let hub = Hub::new(HubConfig::default());
        let s = hub.publish("cam", Codec::H264).unwrap();
        use FrameKind::*;
        for (i, k) in [ParameterSets, Keyframe, Reference, NonReference, Reference]
            .into_iter()
            .enumerate()
        {
            hub.push(&s, unit(i as u64, k, 100));
        }
        let (_, v) = hub.join("cam", A, Instant::now()).unwrap();
        assert_eq!(queued(&v), [0, 1, 2, 4]);
        hub.push(&s, unit(5, NonReference, 100));
        assert_eq!(queued(&v), [5]);
        assert_eq!(s.keyframe_requests.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_last_index_does_not_overflow_the_gap() {
        // A publisher's indices are its own: the largest one, twice (the receiver and the
        // gate saturate at it), is no gap the second time and no overflow.
        let hub = Hub::new(HubConfig::default());
        let s = hub.publish("cam", Codec::H264).unwrap();
        hub.push(&s, unit(0, FrameKind::Keyframe, 10));
        let (_, v) = hub.join("cam", A, Instant::now()).unwrap();
        hub.push(&s, unit(u64::MAX, FrameKind::Keyframe, 10));
        hub.push(&s, unit(u64::MAX, FrameKind::Keyframe, 10));
        assert_eq!(s.upstream_lost.load(Ordering::Relaxed), u64::from(u32::MAX));
        assert_eq!(queued(&v), [0, u64::MAX, u64::MAX]);
    }

    #[test]
    fn a_group_over_the_bound_makes_the_joiner_wait_and_ask_for_a_keyframe() {
        let hub = Hub::new(HubConfig {
            max_catch_up_bytes: 150,
            ..HubConfig::default()
        });
        let s = hub.publish("cam", Codec::H264).unwrap();
        hub.push(&s, unit(0, FrameKind::Keyframe, 100));
        hub.push(&s, unit(1, FrameKind::Reference, 100));
        let (_, v) = hub.join("cam", A, Instant::now()).unwrap();
        hub.push(&s, unit(2, FrameKind::Reference, 100));
        assert_eq!(queued(&v), Vec::<u64>::new());
        assert_eq!(s.keyframe_requests.load(Ordering::Relaxed), 1);
        hub.push(&s, unit(3, FrameKind::Keyframe, 100));
        assert_eq!(queued(&v), [3]);
    }

    #[test]
    fn paths_limits_and_the_end() {
        let hub = Hub::new(HubConfig {
            max_viewers_per_address: 1,
            ..HubConfig::default()
        });
        assert_eq!(
            hub.join("none", A, Instant::now()).unwrap_err(),
            JoinError::NoStream("none".into())
        );
        let s = hub.publish("cam", Codec::H264).unwrap();
        assert_eq!(
            hub.publish("cam", Codec::H264).unwrap_err(),
            PublishError::Taken("cam".into())
        );
        assert!(matches!(
            hub.publish("vp8", Codec::Vp8),
            Err(PublishError::Codec(_))
        ));
        let (_, v) = hub.join("cam", A, Instant::now()).unwrap();
        assert_eq!(
            hub.join("cam", A, Instant::now()).unwrap_err(),
            JoinError::PerAddress(1)
        );
        hub.leave(&s, &v);
        assert!(hub.join("cam", A, Instant::now()).is_ok());
        hub.end(&s);
        assert!(s.is_ended());
        assert!(hub.get("cam").is_none());
        // The path is free for the next publisher.
        assert!(hub.publish("cam", Codec::H264).is_ok());
    }

    #[test]
    fn keyframe_requests_are_rate_limited_per_stream() {
        let hub = Hub::new(HubConfig::default());
        let s = hub.publish("cam", Codec::H264).unwrap();
        let t0 = Instant::now();
        s.want_keyframe(t0, Duration::from_secs(1));
        s.want_keyframe(t0 + Duration::from_millis(500), Duration::from_secs(1));
        s.want_keyframe(t0 + Duration::from_millis(1000), Duration::from_secs(1));
        assert_eq!(s.keyframe_requests.load(Ordering::Relaxed), 2);
        s.want_keyframe(t0 + Duration::from_secs(5), Duration::ZERO);
        assert_eq!(s.keyframe_requests.load(Ordering::Relaxed), 2);
    }
}
