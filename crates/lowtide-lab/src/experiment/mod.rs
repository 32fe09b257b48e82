//! Experiments: the kinds of scenario file the lab runs, each behind one interface and found by
//! the file's first line, `kind = "..."`.
//!
//! | kind | module | what a variant is |
//! | --- | --- | --- |
//! | `streams` | [`crate::streams`] | a transport (plain TCP, a lowtide controller, QUIC, TFRC) carrying one measured application (latency stream, layered video, conference, bit-rate ladder, live video), side by side with the others or one after another: Goel et al., Paceline, DBAT, TFRC, the demo |
//! | `rdc` | [`crate::rdc`] | a bottleneck AQM with or without the RDC agent in the receivers, for bulk or layered-video flows (Hsiao, Kung and Tan) |
//! | `bwss` | [`crate::bwss`] | a receiver with or without BWSS steering its real programs (Mehra) |
//!
//! ```toml
//! kind = "rdc"
//! name = "rdc-fig3"
//! [rdc]
//! duration_s = 60.0
//! # ...
//! ```
//!
//! [`registry::resolve`] reads `kind` before anything else parses the file. A file without it
//! still runs: its kind is inferred once, from the tables it has, as the lab told kinds apart
//! before they had names (`[rdc]`: `rdc`; `[bwss]`: `bwss`; neither: `streams`), and
//! [`registry::Resolved::warning`] asks for the line. (`kind` at the top level is the
//! experiment's; `[application] kind` and a traffic flow's `kind` are theirs.)
//!
//! ## The steps
//!
//! - [`Experiment::prepare`] parses and checks the file, then the command line's
//!   [`RunRequest`]: every error comes before a namespace exists;
//! - [`Prepared::run`] runs the trials, summarises them, renders the run folder's report and
//!   judges the goals, and hands back a [`Finished`]: the summary as a table, where the report
//!   is, and the exit code the goals give;
//! - [`Experiment::report`] (`lowtide lab report DIR`) summarises, renders and judges again from
//!   a run folder's records.
//!
//! Summary, report and goals are one call after the trials because each kind's runner writes
//! its run folder as its last step, also when a trial failed part-way (the partial report
//! needs the summary of what was measured); inside each kind they are functions of their own.
//!
//! ## Why a trait
//!
//! A list of trait objects ([`registry::EXPERIMENTS`]) rather than an enum of kinds with a
//! `match` in every step: with the enum, a new kind adds an arm to each step's `match`, all
//! outside its folder; with the trait it is one `impl` inside its folder and one line in the
//! list. What differs between kinds (the scenario's type, the summary's, the flags taken)
//! stays behind `Box<dyn Prepared>`, so `lowtide lab run` treats every kind alike.
//!
//! ## Adding an experiment
//!
//! 1. A folder `src/NAME/`, as `rdc/` and `bwss/` are: the scenario file as a serde struct with
//!    `deny_unknown_fields`, a table `[NAME]` of its own, and the top-level `kind` field the
//!    whole file is parsed with (`pub kind: Option<String>`, checked by the registry), checked
//!    as [`crate::scenario`] checks (errors name the field, the value and what is allowed);
//!    the run, its summary, its report.
//! 2. In it, `experiment.rs`: a unit struct implementing [`Experiment`] (its kind, its section,
//!    `prepare`; `report` if its runs can be recomputed) and the [`Prepared`] it returns.
//! 3. One line in [`registry::EXPERIMENTS`].
//! 4. Its scenario files in `scenarios/`, each starting with `kind = "NAME"`; the registry's
//!    test parses every shipped file.

pub mod registry;
mod request;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use request::{Flag, RunRequest};

use crate::LabError;

/// One kind of experiment. Implemented by a unit struct in the kind's folder and listed in
/// [`registry::EXPERIMENTS`].
pub trait Experiment: Sync + std::fmt::Debug {
    /// Its name in a scenario file: `kind = "..."`.
    fn kind(&self) -> &'static str;

    /// The top-level table every scenario of this kind has and no other kind's has (`[rdc]`),
    /// which tells the kind of a file without `kind`; `None` for the one kind whose files have
    /// none of the others' tables.
    fn section(&self) -> Option<&'static str>;

    /// Parses and checks `text`, a scenario of this kind, and the command line's `request`
    /// (flags this kind does not take are an error); nothing runs.
    fn prepare(&self, text: &str, request: &RunRequest) -> Result<Box<dyn Prepared>, PlanError>;

    /// `lowtide lab report DIR`: the summary recomputed from a run folder's records, the
    /// report rendered again, the goals judged again. A kind whose runs cannot be recomputed
    /// says so.
    fn report(&self, dir: &Path) -> Result<Finished, LabError> {
        Err(LabError::io(
            format!("{} is a run of kind \"{}\"", dir.display(), self.kind()),
            "`lab report` cannot recompute it: its report is written by `lab run` alone",
        ))
    }
}

/// A scenario checked with the command line's request: ready to run.
pub trait Prepared {
    /// What `lowtide lab run` prints after `lowtide lab: ` before the trials start: the
    /// scenario's name, whether it is the `--quick` form, and where it came from.
    fn headline(&self) -> String;

    /// Runs the trials, summarises them, writes the run folder with its report and judges the
    /// goals; `progress` hears what is going on.
    fn run(self: Box<Self>, progress: &mut dyn FnMut(&str)) -> Result<Finished, Stopped>;
}

/// A run that ended, or a run folder recomputed: what `lowtide lab` prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// For standard output: the summary as a table (with a sweep's frame-rate goal), then where
    /// the report is.
    pub text: String,
    /// For standard error, after `text`: why the exit code is not 0.
    pub notes: Vec<String>,
    /// 0 when every goal was met and every measurement worked; 1 when a goal was not met (and
    /// the request fails on goals) or a measurement failed; 2 when a variant's trial failed
    /// and the run went on with the others (RDC).
    pub exit_code: i32,
}

/// A run that stopped: what to print before the error, and the error.
#[derive(Debug)]
pub struct Stopped {
    /// For standard output: what was measured before the run stopped and where its partial
    /// report is; empty when there is none.
    pub text: String,
    pub error: RunError,
}

impl Stopped {
    /// Stopped by `error` with nothing to show.
    pub fn new(error: impl Into<RunError>) -> Self {
        Stopped {
            text: String::new(),
            error: error.into(),
        }
    }

    /// Stopped by `error`; when the run failed part-way ([`LabError::Partial`]), `measured`
    /// gives what its run folder kept (its summary as a table, or nothing), and the text names
    /// the partial report.
    pub fn after(error: LabError, measured: impl FnOnce(&Path) -> String) -> Self {
        match error {
            LabError::Partial { error, dir } => Stopped {
                text: format!(
                    "{}partial report: {}\n",
                    measured(&dir),
                    dir.join(crate::render::REPORT).display()
                ),
                error: RunError::Failed(error),
            },
            e => Stopped::new(e),
        }
    }
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A trial failed part-way; the run folder has what was measured before, and the text
    /// before this error names its partial report (so the error does not again).
    #[error("the run failed: {0}")]
    Failed(Box<LabError>),
    #[error(transparent)]
    Lab(Box<LabError>),
}

// Boxed so a `Result<Finished, Stopped>` stays small whatever `LabError` grows to.
impl From<LabError> for RunError {
    fn from(error: LabError) -> Self {
        RunError::Lab(Box::new(error))
    }
}

/// A scenario or a request that cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The kind's own checks refused the file; `error` names the field, the value and what
    /// is allowed. (Shown in the message, so not a `source()` too: a chain printer says it
    /// once.)
    #[error("checking scenario {}: {error}", file.display())]
    Scenario {
        file: std::path::PathBuf,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A flag this kind does not take, or a value outside what it allows.
    #[error("{0}")]
    Flag(String),
    /// A flag's value that made the scenario fail its checks (`--quick`'s form, `--runs`).
    #[error("{flag}: {error}")]
    FlagValue {
        flag: &'static str,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl PlanError {
    /// The kind's check of the request's file failed with `error`.
    pub fn scenario(
        request: &RunRequest,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        PlanError::Scenario {
            file: request.file.clone(),
            error: Box::new(error),
        }
    }
}
