//! A stream published by the server itself from a local encoder process (`lowtide serve
//! --source`): the process writes H.264 Annex-B to its standard output, the server splits
//! it into access units ([`UnitReader`]), stamps each with the instant it read it (the
//! in-band stamp of `lowtidestamp`, so capture-to-shown latency counts from the encoder's
//! output, not from the camera) and pushes it to the hub like a publisher's units.
//!
//! `test` is a live GStreamer test pattern with a running clock drawn on it, encoded for
//! latency (x264 `zerolatency`, baseline profile, a keyframe every second); any other
//! source is a shell command, e.g. `ffmpeg -f v4l2 -i /dev/video0 -c:v libx264 -tune
//! zerolatency -f h264 -`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use lowtide_media::encoded::input::{InputFormat, UnitReader};
use lowtide_media::encoded::receiver::OutputUnit;
use lowtide_media::encoded::wire::UnitHeader;
use lowtide_media::encoded::{stamp, AccessUnit, Codec, DEFAULT_MAX_NAL};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::hub::{Hub, PublishError, Stream};
use crate::wall_us;

/// The `test` source's command: a live pattern at 30 frames/s (`frames` of them, or without
/// end), x264 at `kbps`.
pub fn test_pattern_command(width: u32, height: u32, kbps: u32, frames: Option<u32>) -> String {
    let n = frames.map_or(String::new(), |n| format!(" num-buffers={n}"));
    format!(
        "gst-launch-1.0 -q videotestsrc is-live=true pattern=ball{n} \
         ! video/x-raw,width={width},height={height},framerate=30/1 \
         ! timeoverlay font-desc=\"Sans 36\" \
         ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate={kbps} \
         ! video/x-h264,profile=constrained-baseline,stream-format=byte-stream,alignment=au \
         ! fdsink fd=1"
    )
}

/// Why a local source stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("starting the source {cmd:?}: {error}{hint}", hint = spawn_hint(.error))]
    Spawn { cmd: String, error: std::io::Error },
    #[error("reading the source: {0}")]
    Read(std::io::Error),
    #[error("the source's output is not H.264 Annex-B: {0}")]
    Input(lowtide_media::encoded::input::InputError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error("the source exited ({0}){hint}; its errors are above", hint = exit_hint(.0))]
    Exited(std::process::ExitStatus),
}

/// What to do when the source's program cannot be started.
fn spawn_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => ": is it installed and on PATH?",
        std::io::ErrorKind::PermissionDenied => ": is it executable?",
        _ => "",
    }
}

/// Exit status 127 is the shell's "command not found" (POSIX `sh`, "Command Search and
/// Execution").
fn exit_hint(status: &std::process::ExitStatus) -> &'static str {
    if status.code() == Some(127) {
        ": a program it runs was not found; install it (ffmpeg: apt-get install ffmpeg, \
         gst-launch-1.0: apt-get install gstreamer1.0-tools)"
    } else {
        ""
    }
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<lowtide_media::encoded::input::InputError> for SourceError {
    fn from(e: lowtide_media::encoded::input::InputError) -> Self {
        SourceError::Input(e)
    }
}

/// Runs `cmd` (a shell command) and publishes its output at `path` until it exits.
pub async fn run(hub: Arc<Hub>, path: &str, cmd: &str) -> Result<(), SourceError> {
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(cmd);
    run_command(hub, path, sh).await
}

/// [`run`] for a command built by the caller (no shell; the lab sets its environment).
pub async fn run_command(
    hub: Arc<Hub>,
    path: &str,
    cmd: std::process::Command,
) -> Result<(), SourceError> {
    let shown = format!("{cmd:?}");
    let mut child = Command::from(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| SourceError::Spawn { cmd: shown, error })?;
    let mut out = child.stdout.take().expect("stdout is piped");
    let stream = hub.publish(path, Codec::H264)?;
    let result = pump(&hub, &stream, &mut out).await;
    hub.end(&stream);
    let _ = child.start_kill();
    let status = child.wait().await.map_err(SourceError::Read)?;
    result?;
    if status.success() {
        Ok(())
    } else {
        Err(SourceError::Exited(status))
    }
}

async fn pump(
    hub: &Hub,
    stream: &Stream,
    out: &mut tokio::process::ChildStdout,
) -> Result<(), SourceError> {
    let mut reader = UnitReader::new(Some(InputFormat::H264), DEFAULT_MAX_NAL);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = out.read(&mut buf).await.map_err(SourceError::Read)?;
        let units = if n == 0 {
            reader.finish()?
        } else {
            reader.push(&buf[..n], Instant::now())?
        };
        for u in units {
            hub.push(stream, unit(u));
        }
        if n == 0 {
            return Ok(());
        }
    }
}

fn unit(mut u: AccessUnit) -> crate::hub::HubUnit {
    if stamp::read(&u).is_none() {
        stamp::stamp(&mut u, wall_us());
    }
    let header = UnitHeader {
        codec: u.codec,
        info: u.info(),
        has_parameter_sets: u.has_parameter_sets,
        capture_us: 0,
        pts: u.pts,
    };
    crate::ingest::hub_unit(
        OutputUnit {
            header,
            data: u.data,
        },
        u.codec,
    )
}
