//! The pipe over TFRC (`lowtide-tfrc`, RFC 5348) over UDP: one message per data packet where it
//! fits. The driver never blocks a writer: a full send buffer refuses the message
//! ([`Offer::Full`]); the caller decides when to try again. Importance evicts less important
//! messages from a full buffer, a deadline drops a message not yet started, and a cancelled
//! or dropped message is reported ([`PipeEvent::Dropped`]); TFRC does not say when a message
//! was written.

use std::net::SocketAddr;
use std::time::Instant;

use lowtide_tfrc::driver::Session;
use lowtide_tfrc::{Event, SendError, TfrcConfig};
use lowtide_traffic::Stop;
use tokio::net::UdpSocket;

use super::{Capabilities, Delivered, MsgId, Offer, PipeEvent};
use crate::stream::stopped;
use crate::LabError;

pub(super) const CAPABILITIES: Capabilities = Capabilities {
    waits_for_room: false,
    deadlines: true,
    cancel: true,
    write_times: false,
};

fn tfrc_err(what: &str) -> impl FnOnce(lowtide_tfrc::driver::Error) -> LabError + '_ {
    move |e| LabError::io(what, e)
}

/// The sending end.
pub struct Sender(Session);

impl Sender {
    pub(super) async fn connect(dst: SocketAddr, cfg: TfrcConfig) -> Result<Self, LabError> {
        Ok(Self(connect(dst, cfg).await?))
    }

    pub(super) fn send(&self, msg: lowtide::Message) -> Result<Offer, LabError> {
        match self.0.send(msg) {
            Ok(id) => Ok(Offer::Taken(MsgId::Tfrc(id))),
            Err(SendError::BufferFull { .. }) => Ok(Offer::Full),
            Err(e) => Err(LabError::io("sending over TFRC", e)),
        }
    }

    pub(super) fn events(&self) -> Vec<PipeEvent> {
        self.0
            .drain_events()
            .into_iter()
            .filter_map(dropped)
            .collect()
    }

    /// The next message's fate, waiting until `until`; `None` then, or when the session ends.
    pub(super) async fn next_event(&self, until: Instant) -> Option<PipeEvent> {
        let until = tokio::time::Instant::from_std(until);
        loop {
            let event = tokio::select! {
                e = self.0.next_event() => e?,
                _ = tokio::time::sleep_until(until) => return None,
            };
            if let Some(e) = dropped(event) {
                return Some(e);
            }
        }
    }

    pub(super) fn cancel(&self, id: MsgId) -> bool {
        match id {
            MsgId::Tfrc(id) => self.0.cancel(id),
            _ => false,
        }
    }

    /// The payload one data packet carries.
    pub(super) fn packet_payload(&self) -> usize {
        self.0.with_endpoint(|ep| ep.single_packet_payload())
    }

    pub(super) async fn finish(self, until: Instant, stop: &Stop) -> Vec<PipeEvent> {
        finish(&self.0, until, stop).await;
        self.events()
    }
}

/// A message's fate among the session's events: TFRC reports only the dropped ones.
fn dropped(e: Event) -> Option<PipeEvent> {
    match e {
        Event::Dropped { id, .. } => Some(PipeEvent::Dropped {
            id: MsgId::Tfrc(id),
        }),
        _ => None,
    }
}

/// The receiving end.
pub struct Receiver(Session);

impl Receiver {
    pub(super) async fn accept(
        addr: SocketAddr,
        cfg: TfrcConfig,
        deadline: Instant,
        stop: &Stop,
    ) -> Result<Self, LabError> {
        Ok(Self(accept(addr, cfg, deadline, stop).await?))
    }

    pub(super) async fn recv(&mut self) -> Option<Delivered> {
        let m = self.0.recv().await?;
        Some(Delivered {
            data: m.data,
            at: m.arrived,
        })
    }
}

/// Opens a session to `dst` from an ephemeral port.
pub(crate) async fn connect(dst: SocketAddr, cfg: TfrcConfig) -> Result<Session, LabError> {
    let local = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0));
    Session::connect(local, dst, cfg)
        .await
        .map_err(tfrc_err("starting the TFRC sender"))
}

/// Binds `addr` and waits (until `deadline` or the stop) for the sender's first datagram.
pub(crate) async fn accept(
    addr: SocketAddr,
    cfg: TfrcConfig,
    deadline: Instant,
    stop: &Stop,
) -> Result<Session, LabError> {
    let sock = UdpSocket::bind(addr)
        .await
        .map_err(|e| LabError::io(format!("binding the TFRC receiver on {addr}"), e))?;
    tokio::select! {
        s = Session::accept_on(sock, cfg) => s.map_err(tfrc_err("accepting the TFRC session")),
        _ = tokio::time::sleep_until(deadline.into()) => {
            Err(LabError::io("accepting the TFRC session", "no sender within the run"))
        }
        _ = stopped(stop) => Err(LabError::Stopped),
    }
}

/// Keeps the session open until `until` (the receiver's end) or the stop, so what is
/// buffered can still arrive, then closes it.
pub(crate) async fn finish(s: &Session, until: Instant, stop: &Stop) {
    tokio::select! {
        _ = tokio::time::sleep_until(until.into()) => {}
        _ = stopped(stop) => {}
    }
    s.close(0);
}

/// `TFRC, fixed buffer 64 KB` / `TFRC-SP, DBAT buffer (320 kbit/s)`: the variant in the tables.
pub fn describe(cfg: Option<&TfrcConfig>) -> String {
    let Some(cfg) = cfg else {
        return "lowtide over TCP".into();
    };
    let tfrc = if cfg.small_packets { "TFRC-SP" } else { "TFRC" };
    match cfg.buffer {
        lowtide_tfrc::BufferConfig::Fixed { bytes } => {
            format!("{tfrc}, fixed buffer {} KB", bytes / 1024)
        }
        lowtide_tfrc::BufferConfig::Dbat(d) => {
            format!("{tfrc}, DBAT buffer ({} kbit/s)", d.bit_rate_kbps)
        }
    }
}
