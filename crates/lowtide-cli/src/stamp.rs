//! `lowtide stamp`: the capture instant in band, for latency measured the same way over any
//! transport (`lowtide_media::encoded::stamp`).
//!
//! ```text
//! ffmpeg ... -f h264 - | lowtide stamp | <any transport> | lowtide stamp --measure lat.csv | ffmpeg -i - ...
//! ```
//!
//! Stamping gives every H.264/H.265 unit with a picture an SEI message with the wall-clock
//! time its first bytes arrived; measuring passes the stream through byte for byte and writes
//! one line per stamped unit: its stamp, when its first bytes arrived here, and the difference.
//! Both ends see a unit when the next NAL unit begins (an Annex-B stream has no end marker),
//! so that lag is the same at both and cancels. Both ends must share a clock: one host, or
//! hosts synchronised by PTP or NTP (whose error then adds to the figure).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use lowtide_lab::summary::LatencySummary;
use lowtide_media::encoded::input::{InputFormat, UnitReader};
use lowtide_media::encoded::ivf::write_ivf_frame;
use lowtide_media::encoded::{stamp, Codec};
use lowtide_media::wall_clock::now_us as wall_us;

#[derive(Args)]
pub struct StampArgs {
    /// h264, h265 or ivf (AV1 in IVF; default: detected from the first bytes). VP8 and VP9
    /// have no place for user data and are refused.
    #[arg(long)]
    format: Option<InputFormat>,
    /// Do not stamp: read the stamps, pass the stream through unchanged, and write a CSV line
    /// per stamped unit to this file (index, stamp and arrival in µs since the Unix epoch,
    /// latency in ms).
    #[arg(long)]
    measure: Option<PathBuf>,
    /// Largest access unit accepted, MiB.
    #[arg(long, default_value_t = 16)]
    max_unit_mib: usize,
}

/// Wall-clock µs of `at`, an instant in the past, from one reading of both clocks.
fn unix_us(at: Instant, now: Instant, wall_now_us: u64) -> u64 {
    wall_now_us.saturating_sub(now.saturating_duration_since(at).as_micros() as u64)
}

pub fn run(args: StampArgs) -> anyhow::Result<i32> {
    let mut reader = UnitReader::new(args.format, args.max_unit_mib << 20);
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut log = match &args.measure {
        Some(p) => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            );
            writeln!(f, "index,stamp_us,arrival_us,latency_ms")?;
            Some(f)
        }
        None => None,
    };
    let mut latencies = Vec::new();
    let (mut units, mut stamped) = (0u64, 0u64);
    let mut wrote_ivf_header = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading standard input"),
        };
        let got = if n == 0 {
            reader.finish()
        } else {
            reader.push(&buf[..n], Instant::now())
        }
        .context("reading the encoded stream on standard input")?;
        if let Some(codec) = reader.codec() {
            if !matches!(codec, Codec::H264 | Codec::H265 | Codec::Av1) {
                bail!("{codec:?} has no place for user data to carry a stamp: H.264, H.265 and AV1 are stamped");
            }
        }
        // IVF (AV1): the file header once, then each frame with its (new) size.
        let ivf = reader.ivf_header();
        if let (Some(h), false, None) = (ivf, wrote_ivf_header, &log) {
            output
                .write_all(&h.to_bytes())
                .context("writing standard output")?;
            wrote_ivf_header = true;
        }
        let (now, wall) = (Instant::now(), wall_us());
        if log.is_some() {
            // Measuring: the bytes go on as they came, whatever the units.
            output
                .write_all(&buf[..n])
                .context("writing standard output")?;
        }
        for mut u in got {
            units += 1;
            let at = unix_us(u.capture, now, wall);
            match &mut log {
                Some(f) => {
                    if let Some(s) = stamp::read(&u) {
                        stamped += 1;
                        let ms = (at as f64 - s as f64) / 1000.0;
                        latencies.push(ms);
                        writeln!(f, "{},{s},{at},{ms:.3}", u.index)?;
                    }
                }
                None => {
                    stamped += u64::from(stamp::stamp(&mut u, at));
                    let bytes = if ivf.is_some() {
                        let mut framed = Vec::with_capacity(12 + u.data.len());
                        write_ivf_frame(&mut framed, u.pts.unwrap_or(0), &u.data);
                        framed
                    } else {
                        std::mem::take(&mut u.data)
                    };
                    output
                        .write_all(&bytes)
                        .context("writing standard output")?;
                }
            }
        }
        output.flush().context("writing standard output")?;
        if n == 0 {
            break;
        }
    }
    if let Some(mut f) = log {
        f.flush()?;
        // The lab's percentiles (`LatencySummary`): one convention, "no data" without samples.
        let s = LatencySummary::of(&latencies);
        let latency = if s.count == 0 {
            "latency: no data".to_owned()
        } else {
            format!(
                "latency in ms: p50 {}, p99 {}, max {}",
                s.show("p50", 1),
                s.show("p99", 1),
                s.show("max", 1)
            )
        };
        eprintln!("lowtide stamp: {stamped} of {units} units stamped; {latency}");
    } else {
        eprintln!("lowtide stamp: {stamped} of {units} units stamped");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_instant_becomes_wall_clock_time_by_its_age() {
        let now = Instant::now();
        let earlier = now - Duration::from_millis(30);
        assert_eq!(unix_us(earlier, now, 1_000_000), 970_000);
        assert_eq!(unix_us(now, now, 5), 5);
    }
}
