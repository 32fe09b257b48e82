//! The elements' CSV logs (`lowtidestamp location=`, `lowtidemeter location=`,
//! `lowtidesink rate-log=`/`unit-log=`): a header, then lines flushed one at a time, so a
//! process killed by a signal loses no line it wrote; and their clock, the wall clock
//! (CLOCK_REALTIME), which hosts (and network namespaces) share.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Instant;

/// Wall-clock now, microseconds since the Unix epoch.
pub fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// `instant` on the wall clock, microseconds since the Unix epoch.
pub fn wall_us_of(instant: Instant) -> u64 {
    let (wall, now) = (wall_clock_us(), Instant::now());
    if instant <= now {
        wall.saturating_sub(now.duration_since(instant).as_micros() as u64)
    } else {
        wall.saturating_add(instant.duration_since(now).as_micros() as u64)
    }
}

/// An open log.
#[derive(Debug)]
pub struct CsvLog(BufWriter<File>);

impl CsvLog {
    /// Creates `path` with its `header` line; the error names the element and the file.
    pub fn create(element: &str, path: &str, header: &str) -> Result<Self, gst::ErrorMessage> {
        let open = || -> std::io::Result<BufWriter<File>> {
            let mut w = BufWriter::new(File::create(path)?);
            writeln!(w, "{header}")?;
            w.flush()?;
            Ok(w)
        };
        open().map(CsvLog).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                ("{}: writing {}: {}", element, path, e)
            )
        })
    }

    /// The log at `path` if one is asked for.
    pub fn maybe(
        element: &str,
        path: Option<&str>,
        header: &str,
    ) -> Result<Option<Self>, gst::ErrorMessage> {
        path.map(|p| Self::create(element, p, header)).transpose()
    }

    /// Writes one line (with its newline) and flushes it.
    pub fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.0.write_all(line.as_bytes())?;
        self.0.flush()
    }
}
