//! `lowtide serve`: live video to browsers, each viewer's socket at low tide
//! (`lowtide_serve`); `lowtide watch`: a light viewer that times and checks a stream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use lowtide::ControllerConfig;
use lowtide_serve::client::{self, WatchOptions, WatchTls};
use lowtide_serve::hub::HubConfig;
use lowtide_serve::transport::TlsFiles;
use lowtide_serve::viewer::queue::QueueConfig;
use lowtide_serve::viewer::ViewerConfig;
use lowtide_serve::{source, ServeConfig, Server};

#[derive(Args)]
pub struct ServeArgs {
    /// Where viewers connect: the player page, /streams, /metrics, the WebSockets.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve HTTPS and WSS with this certificate chain (PEM, leaf first): browsers give
    /// WebCodecs only to secure contexts, so viewers on other machines need it.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Where publishers connect (`lowtide send --input - --publish PATH --to ADDR`).
    #[arg(long, default_value = "127.0.0.1:7000")]
    ingest: SocketAddr,
    /// The token publishers must present (default: $LOWTIDE_PUBLISH_TOKEN, else a random
    /// one, printed at start).
    #[arg(long, env = "LOWTIDE_PUBLISH_TOKEN", hide_env_values = true)]
    publish_token: Option<String>,
    /// Pull a stream from another `lowtide serve` and serve it again (this server is an edge
    /// of that origin): lowtide://HOST:PORT/PATH, PORT being the origin's --ingest port.
    /// Repeat for several streams. Pulled again after the origin's stream ends or fails.
    #[arg(long, value_name = "URL")]
    upstream: Vec<String>,
    /// The relay token of the --upstream servers (their --relay-token).
    #[arg(
        long,
        env = "LOWTIDE_UPSTREAM_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    upstream_token: String,
    /// The token edges must present to pull streams from this server with --upstream
    /// (default: none, anyone who reaches --ingest may pull, as anyone may watch).
    #[arg(
        long,
        env = "LOWTIDE_RELAY_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    relay_token: String,
    /// Publish a local encoder's output: `test` (a GStreamer test pattern with a running
    /// clock) or a shell command writing H.264 Annex-B to its standard output.
    #[arg(long)]
    source: Option<String>,
    /// The stream path of --source.
    #[arg(long, default_value = "test", requires = "source")]
    source_path: String,
    /// The test pattern's size and bit rate.
    #[arg(long, default_value = "1280x720")]
    source_size: String,
    #[arg(long, default_value_t = 2000)]
    source_kbps: u32,
    /// The latency controller on each viewer's socket: min-buf:A,B | notsent-lowat:BYTES | tcp.
    #[arg(long, default_value = "min-buf:1,3")]
    controller: String,
    /// The congestion control of the viewers' sockets (e.g. bbr; default: the system's).
    #[arg(long)]
    congestion: Option<String>,
    /// A plain WebSocket server for comparison: no controller, no deadlines, a 64 MiB queue
    /// per viewer (what servers that write frames as fast as the socket takes them do).
    #[arg(long, conflicts_with = "controller")]
    plain: bool,
    /// A unit not sent to a viewer within this long after it reached the server is dropped,
    /// with what depends on it.
    #[arg(long, default_value_t = 300)]
    latency_ms: u64,
    /// Bytes of units a viewer's queue holds at most, KiB.
    #[arg(long, default_value_t = 4096)]
    max_queue_kib: usize,
    #[arg(long, default_value_t = 4096)]
    max_viewers: usize,
    #[arg(long, default_value_t = 64)]
    viewers_per_address: usize,
    /// A viewer whose socket takes nothing for this long while it has units waiting is dropped.
    #[arg(long, default_value_t = 10.0)]
    stall_s: f64,
    /// Keyframe requests to a publisher at most this often, ms (0: never ask).
    #[arg(long, default_value_t = 1000)]
    keyframe_interval_ms: u64,
    /// Write every frame viewers report shown to this CSV.
    #[arg(long)]
    shown_log: Option<PathBuf>,
    /// Stop after this many seconds (default: until Ctrl-C, or until --source ends).
    #[arg(long)]
    duration_s: Option<f64>,
}

fn size(s: &str) -> anyhow::Result<(u32, u32)> {
    let (w, h) = s
        .split_once('x')
        .with_context(|| format!("--source-size {s:?}: expected WIDTHxHEIGHT"))?;
    Ok((w.parse()?, h.parse()?))
}

pub fn serve(a: ServeArgs) -> anyhow::Result<i32> {
    let (controller, queue) = if a.plain {
        let q = QueueConfig {
            latency: Duration::from_secs(24 * 3600),
            max_bytes: 64 << 20,
        };
        (ControllerConfig::Unlimited, q)
    } else {
        let q = QueueConfig {
            latency: Duration::from_millis(a.latency_ms),
            max_bytes: a.max_queue_kib << 10,
        };
        (crate::media::parse_controller(&a.controller)?, q)
    };
    let token = a.publish_token.clone().unwrap_or_else(|| {
        use rand::Rng;
        let t: u128 = rand::thread_rng().gen();
        format!("{t:032x}")
    });
    let source_cmd = match a.source.as_deref() {
        Some("test") => {
            let (w, h) = size(&a.source_size)?;
            Some(source::test_pattern_command(w, h, a.source_kbps, None))
        }
        other => other.map(str::to_owned),
    };
    let upstreams = a
        .upstream
        .iter()
        .map(|u| lowtide_serve::relay::Upstream::parse(u, &a.upstream_token))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = ServeConfig {
        http: a.listen,
        tls: a
            .tls_cert
            .as_ref()
            .zip(a.tls_key.as_ref())
            .map(|(c, k)| TlsFiles::new(c, k)),
        ingest: a.ingest,
        publish_token: token.clone(),
        relay_token: a.relay_token.clone(),
        pull: lowtide_serve::relay::PullServing {
            budget: Duration::from_millis(a.latency_ms),
            keyframe_request_interval: Duration::from_millis(a.keyframe_interval_ms),
            ..Default::default()
        },
        upstreams: upstreams.clone(),
        hub: HubConfig {
            queue,
            max_viewers: a.max_viewers,
            max_viewers_per_address: a.viewers_per_address,
            keyframe_request_interval: Duration::from_millis(a.keyframe_interval_ms),
            ..HubConfig::default()
        },
        viewer: ViewerConfig {
            controller,
            congestion: a.congestion.clone(),
            stall_timeout: Duration::from_secs_f64(a.stall_s),
            ..ViewerConfig::default()
        },
        shown_log: a.shown_log.clone(),
        ..ServeConfig::default()
    };
    lowtide::current_thread_runtime()?.block_on(async move {
        let server = Server::start(cfg).await?;
        let http = server.http_addr();
        let scheme = server.scheme();
        eprintln!(
            "lowtide serve: viewers at {scheme}://{http}/ ({}), metrics at {scheme}://{http}/metrics",
            if a.plain {
                "plain WebSocket, no controller".to_owned()
            } else {
                format!("{} per viewer, {} ms budget", a.controller, a.latency_ms)
            }
        );
        eprintln!(
            "  publish: ... | lowtide send --to {} --input - --publish PATH{}",
            server.ingest_addr(),
            if a.publish_token.is_some() {
                " (token from LOWTIDE_PUBLISH_TOKEN or --token)".to_owned()
            } else {
                format!(" --token {token}")
            }
        );
        for u in &upstreams {
            eprintln!(
                "  pulling lowtide://{}/{} at {scheme}://{http}/watch/{}",
                u.addr, u.path, u.path
            );
        }
        let src = source_cmd.map(|cmd| {
            eprintln!("  --source at {scheme}://{http}/watch/{}: {cmd}", a.source_path);
            let hub = server.hub().clone();
            let path = a.source_path.clone();
            tokio::spawn(async move { source::run(hub, &path, &cmd).await })
        });
        let until = async {
            match a.duration_s {
                Some(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
                None => std::future::pending().await,
            }
        };
        let source_done = async {
            match src {
                Some(t) => t.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => eprintln!("lowtide serve: interrupted"),
            () = until => {}
            r = source_done => match r {
                Ok(Ok(())) => eprintln!("lowtide serve: the source ended"),
                Ok(Err(e)) => anyhow::bail!("--source: {e}"),
                Err(e) => anyhow::bail!("--source task: {e}"),
            },
        }
        Ok(0)
    })
}

#[derive(Args)]
pub struct WatchArgs {
    /// The server's viewer address (`lowtide serve --listen`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    server: SocketAddr,
    /// The stream path.
    #[arg(long, default_value = "test")]
    path: String,
    /// Watch this long at most (the stream's end ends it earlier).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print one JSON object instead of a line.
    #[arg(long)]
    json: bool,
    /// Watch over TLS (a server with --tls-cert), trusting the CA certificate(s) in this PEM
    /// file (a self-signed server's own certificate will do).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the --server address).
    #[arg(long, requires = "tls_ca")]
    tls_name: Option<String>,
}

pub fn watch(a: WatchArgs) -> anyhow::Result<i32> {
    let opts = WatchOptions {
        duration: Duration::from_secs_f64(a.seconds),
        ..WatchOptions::default()
    };
    let tls = match &a.tls_ca {
        Some(ca) => {
            let name = a.tls_name.clone().unwrap_or(a.server.ip().to_string());
            Some(WatchTls::from_ca_file(ca, &name).context("--tls-ca")?)
        }
        None => None,
    };
    let r = lowtide::current_thread_runtime()?
        .block_on(async {
            match &tls {
                Some(t) => client::watch_tls(a.server, &a.path, opts, t).await,
                None => client::watch(a.server, &a.path, opts).await,
            }
        })
        .with_context(|| format!("watching {}", a.path))?;
    let lat: Vec<f64> = r
        .units
        .iter()
        .filter(|u| u.capture_us != 0 && !u.catch_up)
        .map(|u| (u.received_us as f64 - u.capture_us as f64) / 1000.0)
        .collect();
    // The catch-up was captured before the viewer joined: its age is not the stream's latency.
    let catch_up = r.units.iter().filter(|u| u.catch_up).count();
    let q = |p: f64| lowtide_serve::viewer::quantile(&lat, p);
    let fmt = |v: Option<f64>| v.map_or("no data".into(), |v| format!("{v:.1} ms"));
    let dropped: u64 = r.dropped.iter().sum();
    if a.json {
        let j = serde_json::json!({
            "path": r.path,
            "units": r.units.len(),
            "undecodable": r.undecodable(),
            "dropped": r.dropped,
            "ended": r.ended,
            "capture_to_arrival_ms_p50": q(0.5),
            "capture_to_arrival_ms_p99": q(0.99),
            "samples": lat.len(),
            "catch_up_units": catch_up,
        });
        println!("{j}");
    } else {
        println!(
            "lowtide watch {}: {} units ({} undecodable), {dropped} dropped by the server, capture to arrival p50 {} p99 {} over {} stamped units after the {catch_up} catch-up units{}",
            r.path,
            r.units.len(),
            r.undecodable(),
            fmt(q(0.5)),
            fmt(q(0.99)),
            lat.len(),
            if r.ended { ", stream ended" } else { "" }
        );
    }
    Ok(if r.undecodable() == 0 { 0 } else { 1 })
}
