//! Programs a trial runs in its hosts, and their guard: every one is stopped and reaped when
//! its guard drops, so also on an error or a panic; `Host::command` adds `PR_SET_PDEATHSIG`,
//! so none outlives the lab process either.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::LabError;

/// How long a program may take to end after SIGTERM before it gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// A running program: SIGTERM, then SIGKILL after `TERM_GRACE`, and reaped, when dropped.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr in `dir/NAME.out` and `dir/NAME.err`.
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Result<Proc, LabError> {
        let file = |ext: &str| {
            let p = dir.join(format!("{name}.{ext}"));
            std::fs::File::create(&p)
                .map_err(|e| LabError::io(format!("creating {}", p.display()), e))
        };
        cmd.stdin(Stdio::null())
            .stdout(file("out")?)
            .stderr(file("err")?);
        let child = cmd
            .spawn()
            .map_err(|e| LabError::io(format!("starting {name}"), e))?;
        Ok(Proc {
            name: name.to_string(),
            child: Some(child),
            status: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its exit status if it has ended (reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = &mut self.child {
                self.status = c.try_wait().ok().flatten();
            }
        }
        self.status
    }

    /// SIGINT (a program's orderly end: `gst-launch-1.0 -e` sends end-of-stream), wait up to
    /// `grace`, then [`Proc::stop`]; returns the exit status.
    pub fn interrupt(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let (Some(child), None) = (&self.child, self.status) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGINT);
            }
            let until = Instant::now() + grace;
            while Instant::now() < until {
                if let Some(s) = self.exited() {
                    return Some(s);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.stop()
    }

    /// SIGTERM, wait up to `TERM_GRACE`, then SIGKILL; returns the exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return self.status;
        };
        if self.status.is_none() {
            // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let until = Instant::now() + TERM_GRACE;
            while Instant::now() < until {
                if let Ok(Some(s)) = child.try_wait() {
                    self.status = Some(s);
                    return self.status;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            self.status = child.wait().ok();
        }
        self.status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `program` in `PATH`, or an error that says which Debian package has it.
pub(crate) fn in_path(program: &str, package: &str) -> Result<PathBuf, LabError> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            LabError::io(
                format!("finding {program}"),
                format!(
                    "not in PATH: install it (`bash run.sh test` does: apt-get install {package})"
                ),
            )
        })
}
