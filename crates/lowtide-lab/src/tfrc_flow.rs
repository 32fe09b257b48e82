//! lab flows over TFRC (`lowtide-tfrc`, RFC 5348) instead of lowtide over TCP: the session's
//! two ends, and the latency stream over TFRC, which the TCP-friendliness scenario runs as a
//! bulk flow beside a cubic one (the stream writes whenever the send buffer has room, one
//! message per data packet: 1448 bytes or what one packet carries, if less).
//!
//! The TFRC driver never blocks a writer: a full send buffer refuses the message
//! (`BufferFull`). The stream then waits `FULL_WAIT` and tries again, so it keeps the
//! buffer full as a bulk sender does; every refusal is a retry, not a loss (the message was
//! never sent).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide_tfrc::driver::Session;
use lowtide_tfrc::{Message, SendError, TfrcConfig};
use lowtide_traffic::Stop;
use tokio::net::UdpSocket;

use crate::runner::{Measured, Task};
use crate::scenario::Variant;
use crate::stream::{self, stopped, Received, StreamSent};
use crate::LabError;

/// How long a writer facing a full send buffer waits before it tries again.
const FULL_WAIT: Duration = Duration::from_millis(2);

fn tfrc_err(what: &str) -> impl FnOnce(lowtide_tfrc::driver::Error) -> LabError + '_ {
    move |e| LabError::io(what, e)
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

/// The latency stream over TFRC: a 1448-byte stamped message whenever the send buffer takes
/// one, from `start` to `end`; blocking, for a sender host thread.
pub fn send_stream(
    dst: SocketAddr,
    cfg: TfrcConfig,
    start: Instant,
    end: Instant,
    receive_end: Instant,
    stop: Stop,
) -> Result<StreamSent, LabError> {
    stream::runtime()?.block_on(async move {
        let s = connect(dst, cfg).await?;
        tokio::time::sleep_until(start.into()).await;
        // a bulk sender fills its packets: a message that does not fit one would leave as a
        // full packet and a tiny one
        let size = stream::MESSAGE_BYTES.min(s.with_endpoint(|ep| ep.single_packet_payload()));
        let mut payload = vec![0x5a; size];
        let mut sent_s = vec![];
        while Instant::now() < end && !stop.is_stopped() {
            let now = Instant::now();
            stream::stamp(&mut payload, now, sent_s.len() as u64);
            match s.send(Message::new(payload.clone())) {
                Ok(_) => sent_s.push(now.saturating_duration_since(start).as_secs_f64()),
                Err(SendError::BufferFull { .. }) => tokio::time::sleep(FULL_WAIT).await,
                Err(e) => return Err(LabError::io("sending over TFRC", e)),
            }
        }
        finish(&s, receive_end, &stop).await;
        Ok(StreamSent {
            sent_s,
            ..StreamSent::default()
        })
    })
}

/// Accepts the TFRC stream on `addr` and reads until `end`; blocking, for a receiver host.
pub fn receive_stream(
    addr: SocketAddr,
    cfg: TfrcConfig,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<Received, LabError> {
    stream::runtime()?.block_on(async move {
        let s = accept(addr, cfg, end, &stop).await?;
        let mut out = Received::default();
        let end_t = tokio::time::Instant::from_std(end);
        loop {
            let m = tokio::select! {
                m = s.recv() => m,
                _ = tokio::time::sleep_until(end_t) => None,
                _ = stopped(&stop) => None,
            };
            let Some(m) = m else { break };
            if let Some(x) = stream::stamped_sample(&m.data, m.arrived, start) {
                out.bytes += m.data.len() as u64;
                out.messages.push(x);
            }
        }
        Ok(out)
    })
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

/// Starts a TFRC latency stream's two ends; `None` when `v` is not one.
pub(crate) fn start(
    v: &Variant,
    addr: SocketAddr,
    (tx_host, rx_host): (&lowtide_netem::Host, &lowtide_netem::Host),
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<Option<Measured>, LabError> {
    let Some(cfg) = v.tfrc else { return Ok(None) };
    let receive_end = end + crate::runner::GRACE;
    let (rstop, tstop) = (stop.clone(), stop.clone());
    Ok(Some(Measured::Stream {
        rx: Task::spawn(rx_host, "TFRC stream receiver", move || {
            receive_stream(addr, cfg, start, receive_end, rstop)
        })?,
        tx: Task::spawn(tx_host, "TFRC stream sender", move || {
            send_stream(addr, cfg, start, end, receive_end, tstop)
        })?,
    }))
}
