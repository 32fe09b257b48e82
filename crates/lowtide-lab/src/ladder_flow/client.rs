//! The client: plays the media into a playout buffer and reports once per interval.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowtide::Channel;
use lowtide_media::ladder::playout_buffer::{PlayState, PlayoutBuffer};
use lowtide_tfrc::driver::Session;
use lowtide_traffic::Stop;
use tokio::net::UdpSocket;

use super::wire::encode_report;
use super::{LadderApp, LadderSeen, LadderTransport};
use crate::results::files::round_us;
use crate::stream::{self, stopped};
use crate::LabError;

/// The client's side of the media connection.
enum ClientLink {
    Lowtide(Channel),
    Tfrc(Session),
}

impl ClientLink {
    async fn recv(&self) -> Option<(bytes::Bytes, Instant)> {
        match self {
            ClientLink::Lowtide(ch) => ch.recv().await.map(|m| (m.data, m.received_at)),
            ClientLink::Tfrc(s) => s.recv().await.map(|m| (m.data, m.arrived)),
        }
    }
}

/// The client: accepts the media on `addr`, plays it into a playout buffer and reports to
/// `report_to` every `app.report_ms` until `end`; blocking, for a receiver host thread.
pub fn play(
    addr: SocketAddr,
    report_to: SocketAddr,
    transport: LadderTransport,
    app: LadderApp,
    start: Instant,
    end: Instant,
    stop: Stop,
) -> Result<LadderSeen, LabError> {
    stream::runtime()?.block_on(async move {
        // Over lowtide the listener stays open for the run: a failover variant's backup
        // connections and duplicate lane are accepted on it.
        let (link, first, _listener) = match transport {
            LadderTransport::Lowtide(cfg) => {
                let listener = crate::pipe::lowtide::listen(addr, *cfg).await?;
                let (ch, m) = crate::pipe::lowtide::accept_first(&listener, end, &stop).await?;
                (
                    ClientLink::Lowtide(ch),
                    Some((m.data, m.received_at)),
                    Some(listener),
                )
            }
            LadderTransport::Tfrc(cfg) => (
                ClientLink::Tfrc(crate::pipe::tfrc::accept(addr, cfg, end, &stop).await?),
                None,
                None,
            ),
        };
        let reports = UdpSocket::bind(SocketAddr::from((addr.ip(), 0)))
            .await
            .map_err(|e| LabError::io("binding the client's report socket", e))?;
        let t_s = |t: Instant| round_us(t.saturating_duration_since(start).as_secs_f64());
        let frame = Duration::from_millis(app.frame_ms);
        let now = Instant::now();
        let mut buffer = PlayoutBuffer::new(
            Duration::from_millis(app.startup_ms),
            Duration::from_millis(app.resume_ms),
            now,
        );
        let mut out = LadderSeen::default();
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let report_every = Duration::from_millis(app.report_ms);
        let mut next_report = now + report_every;
        let end_t = tokio::time::Instant::from_std(end);
        let mut pending = first;
        loop {
            let msg = match pending.take() {
                Some(m) => Some(m),
                None => tokio::select! {
                    m = link.recv() => match m { Some(m) => Some(m), None => break },
                    _ = tick.tick() => None,
                    _ = tokio::time::sleep_until(end_t) => break,
                    _ = stopped(&stop) => break,
                },
            };
            let rebuffers = buffer.rebuffers;
            let now = Instant::now();
            if let Some((data, at)) = msg {
                if let Some((seq, sample)) = stream::stamped_sample(&data, at, start) {
                    out.received.bytes += data.len() as u64;
                    out.received.messages.push((seq, sample));
                    out.arrivals.push((t_s(at), data.len() as u32));
                    let was = buffer.state();
                    buffer.on_frame(at, seq, frame, data.len() as u64);
                    if was == PlayState::Starting && buffer.state() == PlayState::Playing {
                        out.play_start_s = Some(t_s(at));
                    }
                }
            } else {
                buffer.advance(now);
            }
            if buffer.rebuffers > rebuffers {
                out.rebuffers_s.push(t_s(now));
            }
            if now >= next_report {
                next_report = now + report_every;
                let r = buffer.report(now);
                // A report the network loses is the server's loss, as over a real path.
                if reports.send_to(&encode_report(&r), report_to).await.is_ok() {
                    out.reports_sent += 1;
                }
            }
        }
        if let ClientLink::Lowtide(ch) = &link {
            out.lane = ch.stats().lane;
        }
        Ok(out)
    })
}
