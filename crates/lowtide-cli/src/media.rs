//! `lowtide send` / `lowtide recv`: stream layered video (a real encoder trace or a synthetic
//! source) between two hosts with priority-progress streaming, printing live statistics. The
//! lab uses the same session code. With `--input` / `--output` they carry real encoded video
//! from and to a pipe instead ([`crate::pipe`]).
//!
//! Clock alignment between two machines: the sender starts its stream 0.5 s after it
//! connects; the receiver takes its accept time plus 0.5 s as the start, so its latencies are
//! off by about one one-way delay (in the lab both ends share one clock and are exact).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use lowtide::{ChannelConfig, ControllerConfig, TlsConfig};
use lowtide_media::encoded::input::InputFormat;
use lowtide_media::server::{self, ServeOptions, SessionEnd};
use lowtide_media::session::send_video;
use lowtide_media::video::{SyntheticModel, Video};

const START_DELAY: Duration = Duration::from_millis(500);

#[derive(Args)]
pub struct SendArgs {
    /// The receiver's address (where `lowtide recv` listens).
    #[arg(long)]
    to: SocketAddr,
    /// A layered trace CSV (see traces/); without it, a synthetic 4-layer source.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Seconds of synthetic video (a trace plays once, whole).
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
    /// Frames per adaptation window.
    #[arg(long, default_value_t = 4)]
    window: u32,
    /// tcp | min-buf:A,B | notsent-lowat:BYTES | pace-a:B
    #[arg(long, default_value = "min-buf:1,3")]
    controller: String,
    /// Congestion control of the socket.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Send an encoded stream read from standard input (`-`) instead of layered video:
    /// H.264/H.265 Annex-B or IVF (VP8, VP9, AV1), e.g. from `ffmpeg ... -f h264 -`.
    #[arg(long, conflicts_with = "trace")]
    input: Option<String>,
    /// With --input: h264, h265 or ivf (default: detected from the first bytes).
    #[arg(long, requires = "input")]
    format: Option<InputFormat>,
    /// With --input: a unit's deadline is its capture time (when its bytes were read) plus
    /// this; parameter sets have none.
    #[arg(long, default_value_t = 200)]
    latency_ms: u64,
    /// With --input: units other than parameter sets are dropped (and what depends on them)
    /// while lowtide holds this many MiB.
    #[arg(long, default_value_t = 64)]
    max_queued_mib: u64,
    /// With --input: publish to `lowtide serve` (its --ingest address is --to) under this
    /// stream path; viewers watch it at http://SERVER/watch/PATH.
    #[arg(long, requires = "input")]
    publish: Option<String>,
    /// With --publish: the server's publish token (default: $LOWTIDE_PUBLISH_TOKEN).
    #[arg(
        long,
        requires = "publish",
        env = "LOWTIDE_PUBLISH_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// TLS 1.3 on the channel: the receiver (server) presents `--tls-cert` with `--tls-key`, the
/// sender (client) trusts `--tls-ca`. All PEM files.
#[derive(Args)]
pub struct TlsArgs {
    /// Receiver: its certificate chain (PEM).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// Receiver: the certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// Sender: the CA certificate(s) the receiver's certificate must chain to (PEM); turns TLS on.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Sender: the name the receiver's certificate must carry (default: the --to address).
    #[arg(long, requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl TlsArgs {
    fn client(&self) -> anyhow::Result<Option<TlsConfig>> {
        if self.tls_cert.is_some() || self.tls_key.is_some() {
            anyhow::bail!(
                "--tls-cert/--tls-key are for `lowtide recv` (the server); \
                 the sender takes --tls-ca (client certificates are not supported)"
            );
        }
        Ok(self
            .tls_ca
            .as_ref()
            .map(|ca| TlsConfig::client(ca, self.tls_server_name.clone())))
    }

    fn server(&self) -> anyhow::Result<Option<TlsConfig>> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (_, _, Some(_)) => anyhow::bail!(
                "--tls-ca is for `lowtide send` (the client); the receiver takes --tls-cert and --tls-key"
            ),
            (Some(cert), Some(key), None) => Ok(Some(TlsConfig::server(cert, key))),
            (None, None, None) => Ok(None),
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        }
    }
}

#[derive(Args)]
pub struct RecvArgs {
    /// Where to listen.
    #[arg(long, default_value = "0.0.0.0:7000")]
    listen: SocketAddr,
    /// Frames per adaptation window (as the sender's).
    #[arg(long, default_value_t = 4)]
    window: u32,
    /// Latency tolerance: a frame is shown at its capture time plus this.
    #[arg(long, default_value_t = 500)]
    tolerance_ms: u64,
    /// End a session this long after its stream started.
    #[arg(long, default_value_t = 120.0)]
    max_seconds: f64,
    /// Exit after this many sessions that delivered video (default: serve until killed).
    #[arg(long)]
    sessions: Option<u32>,
    /// A peer that sends no valid message within this many seconds is dropped.
    #[arg(long, default_value_t = 10.0)]
    first_message_s: f64,
    /// Receive one encoded-video sender (`lowtide send --input`) and write its stream to
    /// standard output (`-`), decodable by ffmpeg or ffplay, then exit.
    #[arg(long)]
    output: Option<String>,
    /// With --output: the format expected, h264, h265 or ivf (default: whatever the sender
    /// sends; H.264/H.265 come out as Annex-B, VP8/VP9/AV1 as IVF).
    #[arg(long, requires = "output")]
    format: Option<InputFormat>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// Sessions served at once; a further peer waits in the listen backlog.
const MAX_SESSIONS: usize = 16;

/// Parses `tcp`, `min-buf:1,3`, `notsent-lowat:4344`, `pace-a:3` (`ControllerConfig`'s
/// `FromStr`, shared with the GStreamer sink's `controller` property).
pub fn parse_controller(s: &str) -> anyhow::Result<ControllerConfig> {
    s.parse::<ControllerConfig>().map_err(anyhow::Error::msg)
}

pub fn send(args: SendArgs) -> anyhow::Result<i32> {
    if let Some(input) = args.input.clone() {
        let mut cfg = ChannelConfig::with_controller(parse_controller(&args.controller)?);
        cfg.congestion = Some(args.cc.clone());
        cfg.tls = args.tls.client()?;
        let describe = format!(
            "to {}, latency budget {} ms, controller {}, {}{}",
            args.to,
            args.latency_ms,
            args.controller,
            args.cc,
            if cfg.tls.is_some() { ", TLS 1.3" } else { "" }
        );
        let p = crate::pipe::PipeSend {
            to: args.to,
            input,
            format: args.format,
            latency: Duration::from_millis(args.latency_ms),
            max_queued_bytes: args.max_queued_mib.saturating_mul(1 << 20),
            describe,
            publish: args.publish.map(|path| lowtide_media::pipe::Publish {
                path,
                token: args.token.unwrap_or_default(),
            }),
        };
        return crate::pipe::send(p, cfg);
    }
    let video = match &args.trace {
        Some(path) => Video::from_csv(path, 30.0)?,
        None => SyntheticModel::default().generate(args.seconds)?,
    };
    let mut cfg = ChannelConfig::with_controller(parse_controller(&args.controller)?);
    cfg.congestion = Some(args.cc.clone());
    cfg.tls = args.tls.client()?;
    let rates: Vec<String> = video
        .layer_rates_bps()
        .iter()
        .map(|r| format!("{:.0}", r / 1e3))
        .collect();
    println!(
        "sending {} frames, {} layers ({} kbit/s), windows of {} frames, controller {}, {}{}",
        video.frames.len(),
        video.layer_count(),
        rates.join(" + "),
        args.window,
        args.controller,
        args.cc,
        if cfg.tls.is_some() { ", TLS 1.3" } else { "" }
    );
    lowtide::current_thread_runtime()?.block_on(async move {
        // The error names the call and the address (`connect(ADDR)`).
        let ch = lowtide::connect(args.to, cfg).await?;
        let start = Instant::now() + START_DELAY;
        let report = send_video(&ch, &video, args.window, start, |w, ledger| {
            if w % 30 == 0 && w > 0 {
                eprintln!(
                    "[{:>6.1} s] window {w}: {:.1}% dropped so far, {:.2} Mbit/s written",
                    start.elapsed().as_secs_f64(),
                    ledger.dropped_share() * 100.0,
                    ledger.bytes_written() as f64 * 8.0
                        / start.elapsed().as_secs_f64().max(1e-3)
                        / 1e6
                );
            }
        })
        .await?;
        ch.flush().await.context("delivering the last windows")?;
        ch.close(0, "stream over").await;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(0)
    })
}

/// Serves one sender after another (several at once); a bad peer is logged and dropped.
pub fn recv(args: RecvArgs) -> anyhow::Result<i32> {
    let cfg = ChannelConfig {
        tls: args.tls.server()?,
        ..ChannelConfig::default()
    };
    if let Some(output) = args.output.clone() {
        let p = crate::pipe::PipeRecv {
            listen: args.listen,
            output,
            format: args.format,
            first_message: Duration::from_secs_f64(args.first_message_s.max(0.1)),
            describe: format!(
                "on {}{}",
                args.listen,
                if cfg.tls.is_some() { ", TLS 1.3" } else { "" }
            ),
        };
        return crate::pipe::recv(p, cfg);
    }
    lowtide::current_thread_runtime()?.block_on(async move {
        // The error names the call and the address (`bind(ADDR)`).
        let listener = lowtide::listen(args.listen, cfg).await?;
        println!("waiting for senders on {}", args.listen);
        let tolerance = Duration::from_millis(args.tolerance_ms);
        let opts = ServeOptions {
            fps: 30.0,
            window_frames: args.window,
            tolerance,
            max_session: Duration::from_secs_f64(args.max_seconds),
            first_message: Duration::from_secs_f64(args.first_message_s.max(0.1)),
            max_sessions: MAX_SESSIONS,
            sessions: args.sessions,
            start_delay: START_DELAY,
        };
        let started = Instant::now();
        server::serve(
            listener,
            opts,
            move |peer, end| print_session(peer, end, tolerance),
            move |peer, p| {
                eprintln!(
                    "[{:>6.1} s] {peer}: {} windows received",
                    started.elapsed().as_secs_f64(),
                    p.windows_seen()
                )
            },
        )
        .await
        .context("serving")?;
        Ok(0)
    })
}

fn print_session(peer: std::net::SocketAddr, end: &SessionEnd, tolerance: Duration) {
    match end {
        SessionEnd::Dropped { why } => eprintln!("peer {peer}: {why}; dropped, serving on"),
        SessionEnd::Received { stats, error } => {
            if let Some(e) = error {
                eprintln!("peer {peer}: the channel failed: {e}");
            }
            let pct = |x: Option<f64>| x.map_or("no data".into(), |x| format!("{:.1}%", x * 100.0));
            println!(
                "peer {peer}: {} windows transmitted; whole within {} ms: {}; frames shown per second {:.1}; mean layers {}",
                stats.transmitted_windows,
                tolerance.as_millis(),
                pct(stats.windows_within(tolerance.as_secs_f64())),
                stats.fps,
                stats.mean_layers.map_or("no data".into(), |m| format!("{m:.2}")),
            );
        }
    }
}
