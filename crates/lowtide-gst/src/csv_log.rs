//! The elements' CSV logs (`lowtidestamp location=`, `lowtidemeter location=`,
//! `lowtidesink rate-log=`/`unit-log=`): a header, then lines flushed one at a time, so a
//! process killed by a signal loses no line it wrote. Their clock is the wall clock
//! (`lowtide_media::wall_clock`), which hosts (and network namespaces) share.

use std::fs::File;
use std::io::{BufWriter, Write};

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
