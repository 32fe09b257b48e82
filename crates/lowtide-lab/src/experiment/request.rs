//! What `lowtide lab run` asks of a scenario besides its text: the same flags for every kind;
//! a kind refuses the ones it does not take.

use std::path::{Path, PathBuf};

use super::PlanError;

/// Where run folders go when `--out` does not say.
const OUT_ROOT: &str = "out/lab";

/// The command line's request. `--variant` is not here: it selects from the file's text before
/// the kind is read, the same way for every kind.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The scenario file: errors and the headline name it, and relative paths in it (traces)
    /// are relative to its folder.
    pub file: PathBuf,
    /// The scenario's `--quick` form.
    pub quick: bool,
    /// `--runs`: runs (or trials) of every variant.
    pub runs: Option<u32>,
    /// `--out`: the run folder.
    pub out: Option<PathBuf>,
    pub queue_bdp: Vec<f64>,
    pub cc: Vec<String>,
    pub window_frames: Option<u32>,
    pub threshold_ms: Vec<f64>,
    pub pcap: bool,
    /// A goal not met makes the exit code 1 (not `--no-fail-on-goals`).
    pub fail_on_goals: bool,
}

/// The flags some kinds do not take (`--quick`, `--variant`, `--out` and
/// `--no-fail-on-goals` every kind takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    Runs,
    QueueBdp,
    Cc,
    WindowFrames,
    ThresholdMs,
    Pcap,
}

impl Flag {
    pub const ALL: [Flag; 6] = [
        Flag::Runs,
        Flag::QueueBdp,
        Flag::Cc,
        Flag::WindowFrames,
        Flag::ThresholdMs,
        Flag::Pcap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flag::Runs => "--runs",
            Flag::QueueBdp => "--queue-bdp",
            Flag::Cc => "--cc",
            Flag::WindowFrames => "--window-frames",
            Flag::ThresholdMs => "--threshold-ms",
            Flag::Pcap => "--pcap",
        }
    }
}

impl RunRequest {
    /// The folder relative paths in the scenario are relative to.
    pub fn folder(&self) -> &Path {
        self.file.parent().unwrap_or(Path::new("."))
    }

    /// `--out`, or `out/lab/STEM`, with `-quick` for the quick form.
    pub fn out_dir(&self, stem: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            PathBuf::from(OUT_ROOT).join(format!("{stem}{}", self.quick_suffix("-quick")))
        })
    }

    /// The usual headline: `NAME (--quick) from FILE`.
    pub fn headline(&self, name: &str) -> String {
        format!(
            "{name}{} from {}",
            self.quick_suffix(" (--quick)"),
            self.file.display()
        )
    }

    /// `suffix` for the quick form, else nothing.
    pub fn quick_suffix(&self, suffix: &'static str) -> &'static str {
        if self.quick {
            suffix
        } else {
            ""
        }
    }

    fn given(&self, flag: Flag) -> bool {
        match flag {
            Flag::Runs => self.runs.is_some(),
            Flag::QueueBdp => !self.queue_bdp.is_empty(),
            Flag::Cc => !self.cc.is_empty(),
            Flag::WindowFrames => self.window_frames.is_some(),
            Flag::ThresholdMs => !self.threshold_ms.is_empty(),
            Flag::Pcap => self.pcap,
        }
    }

    /// An error when a flag in `refused` was given: it names them, the kind (`what`, e.g.
    /// "an RDC scenario") and the flags it does take.
    pub fn refuse(&self, what: &str, refused: &[Flag]) -> Result<(), PlanError> {
        let given: Vec<&str> = refused
            .iter()
            .filter(|f| self.given(**f))
            .map(|f| f.name())
            .collect();
        if given.is_empty() {
            return Ok(());
        }
        let takes: Vec<&str> = std::iter::once("--quick")
            .chain(
                Flag::ALL
                    .iter()
                    .filter(|f| !refused.contains(f))
                    .map(|f| f.name()),
            )
            .chain(["--variant", "--out", "--no-fail-on-goals"])
            .collect();
        Err(PlanError::Flag(format!(
            "{} {} not apply to {what}: it takes only {}",
            and_list(&given),
            if given.len() == 1 { "does" } else { "do" },
            and_list(&takes)
        )))
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}
