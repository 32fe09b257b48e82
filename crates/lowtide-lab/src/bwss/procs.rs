//! The programs a BWSS trial runs (the daemon, the ladder server and player, `python3 -m
//! http.server`, `curl`), found before any namespace exists; `crate::procs` runs them.

use std::path::PathBuf;

use crate::procs::in_path;
use crate::LabError;

/// The programs a trial needs, found before any namespace exists.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `lowtide` binary (daemon, `bwss exec`, ladder).
    pub lowtide: PathBuf,
    /// `liblowtide_bwss.so`.
    pub preload: PathBuf,
    pub curl: PathBuf,
    pub python3: PathBuf,
}

impl Tools {
    /// `lowtide`: `$LOWTIDE_BIN`, else this process when it is `lowtide`; the library beside
    /// it (or `$LOWTIDE_BWSS_LIB`); `curl` and `python3` from `PATH`.
    pub fn find() -> Result<Tools, LabError> {
        let lowtide = match std::env::var_os("LOWTIDE_BIN") {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe()
                .ok()
                .filter(|p| p.file_name().is_some_and(|n| n == "lowtide"))
                .ok_or_else(|| {
                    LabError::io(
                        "finding the lowtide binary",
                        "run from `lowtide lab run`, or set LOWTIDE_BIN to target/…/lowtide",
                    )
                })?,
        };
        Tools::with_lowtide(lowtide)
    }

    /// The tools with a given `lowtide` binary.
    pub fn with_lowtide(lowtide: PathBuf) -> Result<Tools, LabError> {
        if !lowtide.is_file() {
            return Err(LabError::io(
                format!("the lowtide binary {}", lowtide.display()),
                "not found (cargo build -p lowtide-cli)",
            ));
        }
        let preload = std::env::var_os("LOWTIDE_BWSS_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| lowtide.with_file_name("liblowtide_bwss.so"));
        if !preload.is_file() {
            return Err(LabError::io(
                format!("the LD_PRELOAD library {}", preload.display()),
                "not found: build it with `cargo build -p lowtide-bwss-preload` (same profile as lowtide), or set LOWTIDE_BWSS_LIB",
            ));
        }
        Ok(Tools {
            lowtide,
            preload,
            curl: in_path("curl", "curl")?,
            python3: in_path("python3", "python3")?,
        })
    }
}
