//! A live-video variant's two processes in their hosts: started, watched, stopped, read.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowtide_traffic::Stop;

use super::pipeline::{controller_property, receiver_args, sender_args, Files};
use super::record::{self, FrameLine, RateLine, StampLine, UnitLine};
use super::LiveTransport;
use crate::procs::{in_path, Proc};
use crate::runner::{Measured, Task, GRACE};
use crate::scenario::{ApplicationKind, Scenario, Variant};
use crate::LabError;

/// What the sender's process left: one line per stamped unit, lowtide's rate feedback and
/// unit fates (none for the baseline), and the trial's start on the wall clock.
#[derive(Debug, Default)]
pub(crate) struct LiveSent {
    pub stamps: Vec<StampLine>,
    pub rate: Vec<RateLine>,
    pub units: Vec<UnitLine>,
    pub start_wall_us: i64,
}

/// What the receiver's process left: one line per decoded frame, and the errors and warnings
/// GStreamer printed (the decoder's among them).
#[derive(Debug, Default)]
pub(crate) struct LiveSeen {
    pub frames: Vec<FrameLine>,
    pub bus_problems: Vec<String>,
}

/// A folder for the processes' files, removed when both ends are done with it.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    /// A new folder for variant `index`'s files, named by `what`, this process and now.
    pub(super) fn create(what: &str, index: usize) -> Result<Arc<Self>, LabError> {
        let dir = std::env::temp_dir().join(format!(
            "lowtide-{what}-{}-{}-{index}",
            std::process::id(),
            crate::clock::wall_us(Instant::now())
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
        Ok(Arc::new(Scratch(dir)))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The folder holding `libgstlowtide.so`: `$LOWTIDE_GST_PLUGIN_PATH`, else beside this
/// program or one folder up (a test binary in `target/*/deps`).
pub(super) fn plugin_dir() -> Result<PathBuf, LabError> {
    if let Some(p) = std::env::var_os("LOWTIDE_GST_PLUGIN_PATH") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| LabError::io("finding this program", e))?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .find(|d| d.join("libgstlowtide.so").is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            LabError::io(
                "finding the GStreamer plugin libgstlowtide.so",
                format!(
                    "not beside {}: build it with `cargo build --release -p lowtide-gst` (same profile as lowtide; run.sh does), or set LOWTIDE_GST_PLUGIN_PATH to its folder",
                    exe.display()
                ),
            )
        })
}

/// What a live-video trial needs from this machine, checked before any namespace exists.
pub fn preflight() -> Result<(), LabError> {
    in_path("gst-launch-1.0", "gstreamer1.0-tools")?;
    plugin_dir().map(drop)
}

/// Starts a live-video variant's processes, or `None` when the variant runs another application.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    s: &Scenario,
    v: &Variant,
    index: usize,
    port: u16,
    (tx_host, rx_host): (&lowtide_netem::Host, &lowtide_netem::Host),
    start: Instant,
    end: Instant,
    stop: &Stop,
) -> Result<Option<Measured>, LabError> {
    if s.application_of(v) != ApplicationKind::LiveVideo {
        return Ok(None);
    }
    let live = v.live.unwrap_or_default();
    let app = &s.application.live;
    let controller = match live.transport {
        LiveTransport::Lowtide => controller_property(&v.controller)
            .map_err(|e| LabError::io(format!("variant {:?}", v.name), e))?,
        LiveTransport::Serve | LiveTransport::ServePlain => {
            let hosts = (tx_host, rx_host);
            return super::serve::start(s, v, live, index, port, hosts, start, end, stop).map(Some);
        }
        LiveTransport::Tcpserversink => String::new(),
    };
    let gst = in_path("gst-launch-1.0", "gstreamer1.0-tools")?;
    let plugins = plugin_dir()?;
    let scratch = Scratch::create("live", index)?;
    let files = Files {
        dir: scratch.0.clone(),
    };
    let (to, listen) = match live.transport {
        LiveTransport::Lowtide | LiveTransport::Serve | LiveTransport::ServePlain => (
            SocketAddr::from((rx_host.addr(), port)),
            SocketAddr::from(([0, 0, 0, 0], port)),
        ),
        LiveTransport::Tcpserversink => (
            SocketAddr::from(([0, 0, 0, 0], port)),
            SocketAddr::from((tx_host.addr(), port)),
        ),
    };
    let command = |host: &lowtide_netem::Host, args: Vec<String>| {
        let mut cmd = host.command(&gst.to_string_lossy());
        cmd.args(args).env("GST_PLUGIN_PATH", &plugins);
        cmd
    };
    let tx_cmd = command(tx_host, sender_args(app, &live, &controller, to, &files));
    let rx_cmd = command(rx_host, receiver_args(app, &live, listen, &files));
    // The listening end starts at once, the connecting end at the trial's start.
    let (tx_at, rx_at) = match live.transport {
        LiveTransport::Lowtide | LiveTransport::Serve | LiveTransport::ServePlain => {
            (start, Instant::now())
        }
        LiveTransport::Tcpserversink => (Instant::now(), start),
    };
    let start_wall_us = crate::clock::wall_us(start);
    let receive_end = end + GRACE;
    let (tx_files, tx_scratch, tstop) = (files.clone(), scratch.clone(), stop.clone());
    let (rx_files, rstop) = (files, stop.clone());
    Ok(Some(Measured::Live {
        tx: Task::spawn(tx_host, "live-video sender", move || {
            let _keep = tx_scratch;
            watch("sender", tx_cmd, &tx_files.dir, tx_at, end, None, &tstop)?;
            Ok(LiveSent {
                stamps: record::read_stamps(&tx_files.stamps())?,
                rate: record::read_rate(&tx_files.rate())?,
                units: record::read_units(&tx_files.units())?,
                start_wall_us,
            })
        })?,
        rx: Task::spawn(rx_host, "live-video receiver", move || {
            let _keep = scratch;
            let problems = watch(
                "receiver",
                rx_cmd,
                &rx_files.dir,
                rx_at,
                receive_end,
                Some(end),
                &rstop,
            )?;
            Ok(LiveSeen {
                frames: record::read_frames(&rx_files.frames())?,
                bus_problems: problems,
            })
        })?,
    }))
}

/// Runs a process from `at` until `until`, then ends it with SIGINT (gst-launch's `-e`: an
/// end of stream, so lowtidesink tells its receiver the stream ended). It may end by itself
/// only after `may_end_after` (a receiver whose sender has gone, whatever its exit status:
/// tcpclientsrc sees a closed connection, not an end of stream); earlier, or at all for the
/// sender, is a failure that quotes its last words. Returns the errors and warnings it
/// printed.
fn watch(
    name: &str,
    cmd: std::process::Command,
    dir: &Path,
    at: Instant,
    until: Instant,
    may_end_after: Option<Instant>,
    stop: &Stop,
) -> Result<Vec<String>, LabError> {
    if !stop.sleep_until(at) && stop.flag_is_set() {
        return Err(LabError::Stopped);
    }
    let mut proc = Proc::spawn(name, cmd, dir)?;
    let err_file = dir.join(format!("{name}.err"));
    // The trial sets its stop flag when it ends too (at the receivers' end): from then on
    // the flag is the end, not a failure elsewhere.
    let ends_normally_after = may_end_after.unwrap_or(until);
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        if stop.flag_is_set() {
            if now >= ends_normally_after {
                break;
            }
            proc.stop();
            return Err(LabError::Stopped);
        }
        if let Some(status) = proc.exited() {
            if may_end_after.is_some_and(|t| now >= t) {
                break;
            }
            return Err(LabError::io(
                format!("the live-video {name} (gst-launch-1.0)"),
                format!("it ended early ({status}): {}", last_lines(&err_file, 6)),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    proc.interrupt(Duration::from_secs(2));
    let text = std::fs::read_to_string(&err_file).unwrap_or_default();
    Ok(text
        .lines()
        .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING"))
        .map(str::to_string)
        .collect())
}

fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join(" | ");
    if tail.is_empty() {
        "it printed nothing".into()
    } else {
        tail
    }
}
