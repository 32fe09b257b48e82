//! Capacity traces in mahimahi's format (Netravali et al., "Mahimahi: Accurate Record-and-Replay
//! for HTTP", USENIX ATC 2015, §3; the file format of `mm-link`): one line per delivery
//! opportunity, each a whole number of milliseconds since the trace's start at which one
//! packet of up to [`OPPORTUNITY_BYTES`] may leave. Repeated timestamps are several
//! opportunities in the same millisecond; a stretch without lines is a stretch without
//! capacity (cellular traces have gaps of tens to hundreds of ms, and whole empty seconds);
//! the trace repeats with its last timestamp as its period.
//!
//! A file is checked when the topology is checked: an empty file, an empty or non-numeric
//! line, a timestamp smaller than the one before it, or a last timestamp of 0 is an error that
//! names the file, the line and the value. How the emulator replays a trace is in
//! [`crate::link::trace_replay`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Bytes of IP packet one delivery opportunity carries. mahimahi's `PACKET_SIZE` is 1504: the
/// largest packet it reads from its TUN device, a 1500-byte IP packet plus the 4-byte
/// packet-information header. Our links carry IP packets without that header, so the same
/// 1500-byte IP packet uses exactly one opportunity in both.
pub const OPPORTUNITY_BYTES: usize = 1500;

/// At most this many opportunities per trace (80 MB of timestamps): a 100 Mbit/s trace of
/// 16 minutes. Longer files are refused rather than read into memory without bound.
pub const MAX_OPPORTUNITIES: usize = 10_000_000;

/// A checked trace: timestamps in ms, never decreasing, the last one above 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    times_ms: Vec<u64>,
}

/// Why a trace cannot be used. `file` names the file (or what the text came from).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    #[error("cannot read the trace {file}: {reason}")]
    Read { file: String, reason: String },
    #[error("the trace {file} is empty: it needs at least one line (a delivery opportunity)")]
    Empty { file: String },
    #[error("the trace {file}, line {line}: {value:?} is not a whole number of milliseconds")]
    NotANumber {
        file: String,
        line: usize,
        value: String,
    },
    #[error("the trace {file}, line {line}: {value} is before the line above ({previous}); timestamps may repeat but never decrease")]
    Decreasing {
        file: String,
        line: usize,
        value: u64,
        previous: u64,
    },
    #[error("the trace {file} ends at 0 ms: its last timestamp is its period and must be above 0")]
    ZeroLength { file: String },
    #[error("the trace {file} has more than {MAX_OPPORTUNITIES} lines")]
    TooLong { file: String },
}

impl Trace {
    /// Parses the text of a trace; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, TraceError> {
        let mut times_ms = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let value = raw.trim();
            let line = i + 1;
            let t: u64 = value.parse().map_err(|_| TraceError::NotANumber {
                file: source.to_string(),
                line,
                value: value.to_string(),
            })?;
            if let Some(&previous) = times_ms.last() {
                if t < previous {
                    return Err(TraceError::Decreasing {
                        file: source.to_string(),
                        line,
                        value: t,
                        previous,
                    });
                }
            }
            if times_ms.len() == MAX_OPPORTUNITIES {
                return Err(TraceError::TooLong {
                    file: source.to_string(),
                });
            }
            times_ms.push(t);
        }
        Self::from_times(times_ms, source)
    }

    /// A trace from timestamps already in memory (tests, generated traces).
    pub fn from_times(times_ms: Vec<u64>, source: &str) -> Result<Self, TraceError> {
        let source = source.to_string();
        match times_ms.last() {
            None => return Err(TraceError::Empty { file: source }),
            Some(0) => return Err(TraceError::ZeroLength { file: source }),
            Some(_) => {}
        }
        if let Some(w) = times_ms.windows(2).position(|w| w[1] < w[0]) {
            return Err(TraceError::Decreasing {
                file: source,
                line: w + 2,
                value: times_ms[w + 1],
                previous: times_ms[w],
            });
        }
        if times_ms.len() > MAX_OPPORTUNITIES {
            return Err(TraceError::TooLong { file: source });
        }
        Ok(Self { times_ms })
    }

    /// Reads and checks a trace file. Files are cached by path, size and modification time:
    /// the topology's checks, its BDP and the emulator all read the same trace.
    pub fn load(path: &Path) -> Result<Arc<Trace>, TraceError> {
        let source = path.display().to_string();
        let read_err = |e: std::io::Error| TraceError::Read {
            file: source.clone(),
            reason: e.to_string(),
        };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        let key = (path.to_path_buf(), meta.len(), meta.modified().ok());
        if let Some(hit) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(hit);
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let trace = Arc::new(Trace::parse(&text, &source)?);
        if let Ok(mut c) = cache().lock() {
            // A handful of traces per process; forget them all rather than grow without bound.
            if c.len() >= 64 {
                c.clear();
            }
            c.insert(key, trace.clone());
        }
        Ok(trace)
    }

    /// The delivery opportunities of one period, ms from the period's start.
    pub fn times_ms(&self) -> &[u64] {
        &self.times_ms
    }

    /// The trace repeats after this many ms: its last timestamp.
    pub fn period_ms(&self) -> u64 {
        // `from_times` guarantees a last element above 0.
        self.times_ms.last().copied().unwrap_or(1)
    }

    /// Delivery opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.times_ms.len()
    }

    /// The mean capacity in bit/s of IP packets over one period.
    pub fn mean_rate_bps(&self) -> f64 {
        self.opportunities() as f64 * OPPORTUNITY_BYTES as f64 * 8.0
            / (self.period_ms() as f64 / 1000.0)
    }

    /// Delivery opportunities at trace times in `[from_ms, to_ms)` (the trace looping).
    pub fn opportunities_between(&self, from_ms: u64, to_ms: u64) -> u64 {
        self.opportunities_before(to_ms) - self.opportunities_before(from_ms.min(to_ms))
    }

    /// Opportunities at trace times below `t_ms`, counting from time 0. Loop `k` holds the
    /// times `k·period + t` for every line `t`, so its last lines and the next loop's first
    /// may fall on the same millisecond.
    fn opportunities_before(&self, t_ms: u64) -> u64 {
        let period = self.period_ms();
        let (q, r) = (t_ms / period, t_ms % period);
        let below = |x: u64| self.times_ms.partition_point(|&t| t < x) as u64;
        let mut count = below(r);
        if q >= 1 {
            // Loops before q - 1 lie wholly below t; loop q - 1 ends at q·period ≤ t.
            count += (q - 1) * self.opportunities() as u64 + below(period + r);
        }
        count
    }
}

type CacheKey = (PathBuf, u64, Option<SystemTime>);

fn cache() -> &'static Mutex<HashMap<CacheKey, Arc<Trace>>> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<CacheKey, Arc<Trace>>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_ms_is_12_mbit() {
        let text: String = (1..=1000).map(|t| format!("{t}\n")).collect();
        let t = Trace::parse(&text, "t").unwrap();
        assert_eq!(t.period_ms(), 1000);
        assert!((t.mean_rate_bps() - 12e6).abs() < 1e-6);
    }

    #[test]
    fn repeated_timestamps_and_gaps_are_normal() {
        let t = Trace::parse("0\n0\n0\n500\n1000\n1000\n", "t").unwrap();
        assert_eq!(t.opportunities(), 6);
        assert_eq!(t.period_ms(), 1000);
        // [0, 1000) holds the three at 0 and the one at 500; [1000, 2000) the two at 1000
        // ending the first period, the next period's three at 0 (also 1000 ms) and its 500.
        assert_eq!(t.opportunities_between(0, 1000), 4);
        assert_eq!(t.opportunities_between(1000, 2000), 6);
        assert_eq!(t.opportunities_between(0, 2000), 10);
        assert_eq!(t.opportunities_between(600, 600), 0);
    }

    #[test]
    fn bad_files_name_line_and_value() {
        let e = Trace::parse("1\n2\nx3\n", "cell.mahi")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cell.mahi") && e.contains("line 3") && e.contains("\"x3\""),
            "{e}"
        );
        let e = Trace::parse("5\n7\n6\n", "cell.mahi")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 3") && e.contains('6') && e.contains("(7)"),
            "{e}"
        );
        let e = Trace::parse("", "cell.mahi").unwrap_err().to_string();
        assert!(e.contains("cell.mahi") && e.contains("empty"), "{e}");
        let e = Trace::parse("1\n\n2\n", "cell.mahi")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("\"\""), "{e}");
        let e = Trace::parse("0\n0\n", "cell.mahi").unwrap_err().to_string();
        assert!(e.contains("0 ms"), "{e}");
        let e = Trace::parse("-4\n", "cell.mahi").unwrap_err().to_string();
        assert!(e.contains("\"-4\""), "{e}");
        // Windows line ends are fine.
        assert_eq!(Trace::parse("1\r\n2\r\n", "t").unwrap().opportunities(), 2);
    }

    #[test]
    fn load_reads_and_caches_and_names_missing_files() {
        let dir = std::env::temp_dir().join(format!("lowtide-trace-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.mahi");
        std::fs::write(&path, "1\n2\n").unwrap();
        let a = Trace::load(&path).unwrap();
        assert!(Arc::ptr_eq(&a, &Trace::load(&path).unwrap()));
        std::fs::write(&path, "1\n2\n3\n").unwrap();
        assert_eq!(Trace::load(&path).unwrap().opportunities(), 3);
        let e = Trace::load(&dir.join("missing.mahi"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.mahi"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_shipped_link_traces_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/links");
        // The periods traces/links/README.md states.
        let periods = [
            ("cellular-steady", 180_000),
            ("cellular-collapse", 180_000),
            ("cellular-outage", 180_000),
            ("cellular-ramp", 180_000),
            ("step-6-1.5-6", 60_000),
            ("step-6-1.5-6-short", 30_000),
        ];
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "mahi") {
                let t = Trace::load(&path).unwrap();
                let stem = path.file_stem().unwrap().to_string_lossy();
                let period = periods
                    .iter()
                    .find(|(name, _)| *name == stem)
                    .unwrap_or_else(|| panic!("{} is not in the list", path.display()))
                    .1;
                assert_eq!(t.period_ms(), period, "{}", path.display());
                assert!(t.mean_rate_bps() > 4e6, "{}", path.display());
                n += 1;
            }
        }
        assert_eq!(n, periods.len());
    }
}
