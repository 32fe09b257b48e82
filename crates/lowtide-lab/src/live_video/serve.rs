//! A serve variant's two ends: `lowtide serve` in the sender's namespace with the variant's
//! encoder as its source, headless Chromium in the receiver's watching the player page.
//!
//! The server runs in the sender host's thread (its own tokio runtime); the encoder is the
//! same `gst-launch-1.0` pipeline as the other transports' up to `lowtidestamp` (one line per
//! stamped unit in `stamps.csv`), writing to its stdout. At the trial's end the stream ends
//! (viewers get the end message) and the server serves for the grace period more. The
//! browser reports each frame it drew; those reports, in the server's shown log, are the
//! receiver's frames (decoded = drawn, so the browser's decode and paint are in the latency).
//! The page's decoder errors and a page that is not live at the end are its problems.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use lowtide::proto::ControllerConfig;
use lowtide_serve::hub::HubConfig;
use lowtide_serve::viewer::queue::QueueConfig;
use lowtide_serve::viewer::ViewerConfig;
use lowtide_serve::{source, ServeConfig, Server};
use lowtide_traffic::Stop;

use super::pipeline::{sender_args, Files};
use super::record::{self, FrameLine};
use super::run::{plugin_dir, Scratch};
use super::{LiveSeen, LiveSent, LiveTransport, LiveVariant};
use crate::chromium::Chromium;
use crate::procs::in_path;
use crate::runner::{Measured, Task, GRACE};
use crate::scenario::{Scenario, Variant};
use crate::LabError;

/// The stream's path on the server.
const PATH: &str = "live";

/// The browser's window.
const WINDOW: (u32, u32) = (960, 600);

/// Starts a serve variant's two ends.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    s: &Scenario,
    v: &Variant,
    live: LiveVariant,
    index: usize,
    port: u16,
    (tx_host, rx_host): (&lowtide_netem::Host, &lowtide_netem::Host),
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<Measured, LabError> {
    let app = &s.application.live;
    let gst = in_path("gst-launch-1.0", "gstreamer1.0-tools")?;
    let plugins = plugin_dir()?;
    let chromium = Chromium::find()?;
    let scratch = Scratch::create("serve", index)?;
    let dir = scratch.0.clone();
    let files = Files { dir: dir.clone() };
    let shown_log = dir.join("shown.csv");
    let mut encoder = std::process::Command::new(&gst);
    encoder
        .args(sender_args(
            app,
            &live,
            "",
            SocketAddr::from(([0; 4], 0)),
            &files,
        ))
        .env("GST_PLUGIN_PATH", &plugins);
    let encoder_err = std::fs::File::create(dir.join("encoder.err"))
        .map_err(|e| LabError::io("creating the encoder's log", e))?;
    encoder.stderr(encoder_err);
    let plain = live.transport == LiveTransport::ServePlain;
    let cfg = ServeConfig {
        http: SocketAddr::from(([0, 0, 0, 0], port)),
        // No publisher comes (the encoder is the server's source); a namespace's loopback
        // is down, so the listener takes the host's address.
        ingest: SocketAddr::from((tx_host.addr(), 0)),
        publish_token: format!("lab-{}", std::process::id()),
        hub: HubConfig {
            queue: if plain {
                QueueConfig {
                    latency: Duration::from_secs(24 * 3600),
                    max_bytes: 64 << 20,
                }
            } else {
                QueueConfig {
                    latency: Duration::from_millis(u64::from(app.latency_ms)),
                    ..QueueConfig::default()
                }
            },
            ..HubConfig::default()
        },
        viewer: ViewerConfig {
            controller: if plain {
                ControllerConfig::Unlimited
            } else {
                v.controller
            },
            congestion: v.congestion.clone(),
            ..ViewerConfig::default()
        },
        shown_log: Some(shown_log.clone()),
        ..ServeConfig::default()
    };
    let url = format!("http://{}:{port}/watch/{PATH}", tx_host.addr());
    // WebCodecs is for secure contexts only: over plain HTTP from another host the page
    // must be declared one (a deployment serves HTTPS instead).
    let origin = format!("http://{}:{port}", tx_host.addr());
    let browser = chromium
        .viewer_with(
            rx_host.command(&chromium.binary().to_string_lossy()),
            &url,
            WINDOW,
            &dir.join("chromium.log"),
        )?
        .arg(format!(
            "--unsafely-treat-insecure-origin-as-secure={origin}"
        ));
    let start_wall_us = crate::clock::wall_us(start);
    let (tstop, tfiles, tscratch) = (stop.clone(), files.clone(), scratch.clone());
    let tx = Task::spawn(tx_host, "lowtide serve", move || {
        let _keep = tscratch;
        serve(cfg, encoder, start, end, &tstop, &tfiles.dir)?;
        Ok(LiveSent {
            stamps: record::read_stamps(&tfiles.stamps())?,
            rate: vec![],
            units: vec![],
            start_wall_us,
        })
    })?;
    let rstop = stop.clone();
    let rx = Task::spawn(rx_host, "browser viewer", move || {
        let _keep = scratch;
        // The server listens from the trial's set-up on; the page opens at its start.
        if !rstop.sleep_until(start) && rstop.flag_is_set() {
            return Err(LabError::Stopped);
        }
        let (mut viewer, mut devtools) = browser.spawn_with_devtools()?;
        let page = devtools.page()?;
        let until = end + GRACE;
        while Instant::now() < until {
            if rstop.flag_is_set() && Instant::now() < end {
                return Err(LabError::Stopped);
            }
            if let Some(status) = viewer.exited() {
                return Err(LabError::io(
                    "the browser viewer (chromium)",
                    format!("it exited early ({status}); its log is chromium.log"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let status = devtools.evaluate(&page, "({...window.lowtidePlayer})")?;
        viewer.stop();
        let mut problems = vec![];
        let errors = status["decoderErrors"].as_u64().unwrap_or(0);
        if errors > 0 {
            problems.push(format!(
                "ERROR: the browser's decoder failed {errors} times"
            ));
        }
        Ok(LiveSeen {
            frames: read_shown(&shown_log)?,
            bus_problems: problems,
        })
    })?;
    Ok(Measured::Live { tx, rx })
}

/// Runs the server with `encoder` as its source from `start` to `end`, then ends the stream
/// and serves for the grace period (the viewer's queue drains, the page gets the end).
fn serve(
    cfg: ServeConfig,
    encoder: std::process::Command,
    start: Instant,
    end: Instant,
    stop: &Stop,
    dir: &Path,
) -> Result<(), LabError> {
    let rt = lowtide::current_thread_runtime()
        .map_err(|e| LabError::io("a runtime for lowtide serve", e))?;
    rt.block_on(async {
        let server = Server::start(cfg)
            .await
            .map_err(|e| LabError::io("starting lowtide serve", e))?;
        tokio::time::sleep_until(start.into()).await;
        let hub = server.hub().clone();
        let source = source::run_command(hub, PATH, encoder);
        let stopped = async {
            while !stop.flag_is_set() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::select! {
            r = source => {
                let why = match r {
                    Ok(()) => "it ended early".to_string(),
                    Err(e) => e.to_string(),
                };
                let err = std::fs::read_to_string(dir.join("encoder.err")).unwrap_or_default();
                return Err(LabError::io("the encoder of lowtide serve (gst-launch-1.0)", format!("{why}: {}", err.trim())));
            }
            () = tokio::time::sleep_until(end.into()) => {}
            () = stopped => if Instant::now() < end {
                return Err(LabError::Stopped);
            },
        }
        // The source's future is gone (its process killed): the stream ends for the viewers.
        if let Some(s) = server.hub().get(PATH) {
            server.hub().end(&s);
        }
        tokio::time::sleep(GRACE).await;
        Ok(())
    })
}

/// The server's shown log as the receiver's frames: drawn = decoded, the join's catch-up
/// frames left out (their latency is the join's).
fn read_shown(path: &Path) -> Result<Vec<FrameLine>, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::io(format!("reading {}", path.display()), e))?;
    let mut frames = vec![];
    for (i, line) in text.lines().enumerate().skip(1) {
        // viewer,addr,index,capture_us,ingest_us,sent_us,decoded_us,shown_us,catch_up
        let f: Vec<&str> = line.split(',').collect();
        let n = |k: usize| -> Result<i64, LabError> {
            f.get(k).and_then(|v| v.parse().ok()).ok_or_else(|| {
                LabError::io(
                    format!("{} line {}", path.display(), i + 1),
                    format!("field {k} of {line:?} is not a number"),
                )
            })
        };
        if n(8)? == 1 {
            continue;
        }
        let capture = n(3)?;
        frames.push(FrameLine {
            stamp_us: (capture != 0).then_some(capture),
            decoded_us: n(7)?,
            corrupted: false,
        });
    }
    Ok(frames)
}
