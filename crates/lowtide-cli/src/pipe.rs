//! `lowtide send --input -` / `lowtide recv --output -`: real encoded video (H.264/H.265
//! Annex-B, VP8/VP9/AV1 in IVF) from a pipe, through lowtide, to a pipe
//! (`lowtide_media::pipe`; design in `docs/video.md`). Everything this mode prints goes to
//! stderr: stdout carries the video.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use lowtide::ChannelConfig;
use lowtide_media::encoded::input::InputFormat;
use lowtide_media::encoded::sender::SenderConfig;
use lowtide_media::encoded::wire::{self, StreamStart, WireMessage};
use lowtide_media::encoded::{Codec, DropCounters, KeyframeRequest, RequestReason};
use lowtide_media::pipe::{self, ReceiveOptions, SendOptions};

/// What `send --input` needs beyond the channel's configuration.
pub struct PipeSend {
    pub to: SocketAddr,
    pub input: String,
    pub format: Option<InputFormat>,
    pub latency: Duration,
    pub max_queued_bytes: u64,
    pub describe: String,
    pub publish: Option<pipe::Publish>,
}

fn provenance(what: &str, describe: &str) {
    let args: Vec<String> = std::env::args().collect();
    eprintln!(
        "lowtide {what} {} ({describe}): {}",
        env!("CARGO_PKG_VERSION"),
        args.join(" ")
    );
}

fn stdin_only(name: &str, flag: &str) -> anyhow::Result<()> {
    if name != "-" {
        anyhow::bail!(
            "{flag} {name}: only - (standard {}) is supported; redirect a file with {}",
            if flag == "--input" { "input" } else { "output" },
            if flag == "--input" {
                "< FILE"
            } else {
                "> FILE"
            }
        );
    }
    Ok(())
}

fn drops_line(d: &DropCounters) -> String {
    let parts = [
        ("expired", d.expired),
        ("cancelled", d.cancelled),
        ("dependency-broken", d.dependency_broken),
        ("queue-full", d.queue_full),
        ("lost", d.lost),
        ("waiting-for-keyframe", d.waiting_for_keyframe),
        ("out-of-order", d.out_of_order),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

/// Streams stdin; exit code 0 when every unit was delivered or dropped by rule.
pub fn send(p: PipeSend, cfg: ChannelConfig) -> anyhow::Result<i32> {
    stdin_only(&p.input, "--input")?;
    provenance("send", &p.describe);
    let opts = SendOptions {
        format: p.format,
        sender: SenderConfig {
            latency: p.latency,
            max_queued_bytes: p.max_queued_bytes,
            ..SenderConfig::default()
        },
        publish: p.publish.clone(),
        ..SendOptions::default()
    };
    lowtide::current_thread_runtime()?.block_on(async move {
        // The error names the call and the address (`connect(ADDR)`).
        let ch = lowtide::connect(p.to, cfg).await?;
        let result = pipe::send_encoded(&ch, tokio::io::stdin(), opts).await;
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                ch.close(1, "sender failed").await;
                // Typed, so `advice` sees what it is (a transport error, an unreadable input).
                return Err(e.into());
            }
        };
        ch.close(0, "stream over").await;
        let c = report.counters;
        let dropped = report.drops.total();
        let format = report.format.map_or("unknown".into(), |f| f.to_string());
        let codec = report.codec.map_or("unknown".into(), |c| format!("{c:?}"));
        eprintln!(
            "lowtide send: {} units ({format}, {codec}): {} sent, {} written, {}; dropped {dropped}: {}",
            c.units,
            c.sent,
            c.written,
            if report.all_acked {
                "all acknowledged"
            } else {
                "NOT all acknowledged"
            },
            drops_line(&report.drops),
        );
        Ok(if report.all_acked { 0 } else { 1 })
    })
}

/// What `recv --output` needs beyond the channel's configuration.
pub struct PipeRecv {
    pub listen: SocketAddr,
    pub output: String,
    pub format: Option<InputFormat>,
    pub first_message: Duration,
    pub describe: String,
}

fn matches_format(f: InputFormat, s: &StreamStart) -> bool {
    match f {
        InputFormat::H264 => s.codec == Codec::H264,
        InputFormat::H265 => s.codec == Codec::H265,
        _ => s.ivf.is_some(),
    }
}

fn log_request(started: Instant, r: &KeyframeRequest) {
    let why = match r.reason {
        RequestReason::NoKeyframeYet => "the stream has not shown a keyframe yet".to_string(),
        RequestReason::ReferenceLost { index } => format!("reference unit {index} was lost"),
        _ => "the stream is broken".to_string(),
    };
    eprintln!(
        "[{:>6.1} s] keyframe request: {why}, {} units dropped since; a pipe has no encoder to \
         ask, so output resumes at the encoder's next keyframe",
        started.elapsed().as_secs_f64(),
        r.dropped_since
    );
}

/// Receives one encoded-video sender and writes its stream to stdout.
pub fn recv(p: PipeRecv, cfg: ChannelConfig) -> anyhow::Result<i32> {
    stdin_only(&p.output, "--output")?;
    provenance("recv", &p.describe);
    lowtide::current_thread_runtime()?.block_on(async move {
        // The error names the call and the address (`bind(ADDR)`).
        let listener = lowtide::listen(p.listen, cfg).await?;
        eprintln!(
            "lowtide recv: listening on {} for one encoded-video sender",
            listener.local_addr()?
        );
        let started = Instant::now();
        loop {
            let ch = match listener.accept().await {
                Ok(ch) => ch,
                Err(e) => {
                    eprintln!("accepting a connection failed: {e}; waiting on");
                    continue;
                }
            };
            let peer = ch.peer_addr();
            let first = tokio::time::timeout(p.first_message, ch.recv()).await;
            let start = match &first {
                Ok(Some(m)) => match wire::decode(&m.data) {
                    Ok(WireMessage::Start(s)) => Some(s),
                    _ => None,
                },
                _ => None,
            };
            let (Some(start), Ok(Some(first))) = (start, first) else {
                eprintln!(
                    "peer {peer}: no encoded-video start message within {:?}; dropped, waiting on",
                    p.first_message
                );
                ch.close(1, "not an encoded-video sender").await;
                continue;
            };
            if let Some(f) = p.format {
                if !matches_format(f, &start) {
                    ch.close(1, "unexpected format").await;
                    anyhow::bail!(
                        "peer {peer} sends {:?}{}, not the --format {f} asked for",
                        start.codec,
                        if start.ivf.is_some() { " in IVF" } else { "" }
                    );
                }
            }
            eprintln!(
                "peer {peer}: {:?}{} stream",
                start.codec,
                if start.ivf.is_some() { " in IVF" } else { "" }
            );
            let result = pipe::receive_encoded(
                &ch,
                Some(first),
                tokio::io::stdout(),
                ReceiveOptions::default(),
                |r| log_request(started, &r),
            )
            .await;
            ch.close(0, "session over").await;
            let report = result.context("receiving")?;
            let c = report.counters;
            eprintln!(
                "lowtide recv: {} units received, {} written, {} announced dropped by the sender; \
                 the gate dropped {}: {}; keyframe requests {}{}",
                c.received,
                c.written,
                c.announced_dropped,
                report.drops.total(),
                drops_line(&report.drops),
                c.keyframe_requests,
                if report.ended {
                    ""
                } else {
                    "; the channel ended before the stream's end"
                },
            );
            return Ok(if report.ended { 0 } else { 1 });
        }
    })
}
