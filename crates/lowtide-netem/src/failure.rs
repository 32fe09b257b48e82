//! When the emulator fails mid-run: which link, which cell, why. A failed cell never takes
//! the process down: [`crate::cells::guard`] catches its panic or error, records the first
//! failure here, and parks the cell; [`crate::Dumbbell::failure`] hands it to whoever runs
//! the experiment, who ends the run with an error and keeps what was measured.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One direction of the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Senders to receivers.
    Forward,
    /// Receivers to senders.
    Reverse,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reverse => "reverse",
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where in the emulator something failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The link the cell serves; `None` for the emulator as a whole (its thread).
    pub link: Option<Direction>,
    /// The cell, in words: "rate", "propagation delay", "exit", "router",
    /// "interface of sender 1 (reading)".
    pub cell: String,
}

impl Site {
    pub fn new(link: Direction, cell: impl Into<String>) -> Self {
        Self {
            link: Some(link),
            cell: cell.into(),
        }
    }
}

/// The emulator stopped working: where and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", self.describe())]
pub struct EmulatorFailure {
    pub site: Site,
    /// The panic message or the error, as the cell gave it.
    pub cause: String,
}

impl EmulatorFailure {
    fn describe(&self) -> String {
        match self.site.link {
            Some(link) => format!(
                "the emulator's {link} link failed in its {} cell: {}",
                self.site.cell, self.cause
            ),
            None => format!("the emulator failed ({}): {}", self.site.cell, self.cause),
        }
    }
}

/// The first failure of a run; later ones are logged only (they usually follow from it).
#[derive(Debug, Default)]
pub struct FailureSlot(OnceLock<EmulatorFailure>);

impl FailureSlot {
    pub fn record(&self, site: &Site, cause: impl Into<String>) {
        let failure = EmulatorFailure {
            site: site.clone(),
            cause: cause.into(),
        };
        tracing::error!("{failure}");
        let _ = self.0.set(failure);
    }

    pub fn get(&self) -> Option<&EmulatorFailure> {
        self.0.get()
    }
}

/// The emulator's worker has not run for this long: it is stuck (or the machine stopped it).
pub const STUCK_AFTER: Duration = Duration::from_secs(2);

/// A cheap, cloneable view of a running network's health, for any thread: the failure slot,
/// the worker's heartbeat and whether its thread still runs. [`crate::Dumbbell::failure`]
/// reads the same.
#[derive(Debug, Clone)]
pub struct FailureWatch {
    pub(crate) failures: Arc<FailureSlot>,
    /// Milliseconds since `start` at the worker's last heartbeat (every 100 ms).
    pub(crate) heartbeat_ms: Arc<AtomicU64>,
    pub(crate) start: Instant,
    /// The emulator's thread has ended.
    pub(crate) thread_ended: Arc<AtomicBool>,
    /// The network is being torn down on purpose: nothing after this is a failure.
    pub(crate) stopping: Arc<AtomicBool>,
}

impl FailureWatch {
    pub(crate) fn new(start: Instant) -> Self {
        Self {
            failures: Arc::default(),
            heartbeat_ms: Arc::default(),
            start,
            thread_ended: Arc::default(),
            stopping: Arc::default(),
        }
    }

    /// The emulator's first failure, if it has failed: a cell that panicked or erred (which
    /// link, which cell, why), its thread gone, or its worker not run for [`STUCK_AFTER`].
    pub fn failure(&self) -> Option<EmulatorFailure> {
        if let Some(f) = self.failures.get() {
            return Some(f.clone());
        }
        if self.stopping.load(Ordering::Relaxed) {
            return None;
        }
        let worker = |cause: String| {
            Some(EmulatorFailure {
                site: Site {
                    link: None,
                    cell: "worker thread".into(),
                },
                cause,
            })
        };
        if self.thread_ended.load(Ordering::Relaxed) {
            return worker("the emulator's thread has ended".into());
        }
        let beat = Duration::from_millis(self.heartbeat_ms.load(Ordering::Relaxed));
        let silent = self.start.elapsed().saturating_sub(beat);
        if silent > STUCK_AFTER {
            return worker(format!(
                "it has not run for {:.1} s (stuck, or the machine stopped it)",
                silent.as_secs_f64()
            ));
        }
        None
    }
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}
