//! Headless Chromium: a browser that watches `lowtide serve`'s player page as a viewer would,
//! for the serve tests and the lab's browser viewers.
//!
//! - [`Chromium::find`]: the binary (`chromium`, `chromium-browser` or `google-chrome`);
//! - [`Chromium::viewer`] and [`Chromium::viewer_with`]: a headless viewer of a URL as a
//!   [`ViewerCommand`], which the lab may wrap (a host's `ip netns exec`) before it runs;
//! - [`Viewer`]: the running browser, killed with all its processes and its profile removed
//!   when it drops (also on an error or a panic);
//! - [`DevTools`]: the DevTools protocol over `--remote-debugging-pipe`, to read the page
//!   (`window.lowtidePlayer`) and to take screenshots of live video;
//! - [`Chromium::screenshot`]: a PNG of a URL after it has played for a while.
//!
//! Chromium's own `--screenshot` flag does not serve live video: it shoots as soon as the
//! page has loaded, `--timeout` does not delay it, and `--virtual-time-budget` runs the
//! page's clock ahead of the network's, so a WebSocket stream has barely begun. The DevTools
//! protocol shoots when asked.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::LabError;

/// The names the browser goes by, in the order they are looked for in `PATH`.
pub const BINARIES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// How long one DevTools call may take (a screenshot of a large page on a busy machine).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the browser may take to open the page's target after it starts.
const TARGET_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the browser may take to end after SIGTERM before its processes get SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// A Chromium binary.
#[derive(Debug, Clone)]
pub struct Chromium {
    binary: PathBuf,
}

impl Chromium {
    /// The first of [`BINARIES`] in `PATH`, or an error that says how to install it.
    pub fn find() -> Result<Chromium, LabError> {
        let dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .collect();
        Chromium::find_in(&dirs)
    }

    /// The first of [`BINARIES`] in `dirs`, each name tried in every directory before the next.
    pub fn find_in(dirs: &[PathBuf]) -> Result<Chromium, LabError> {
        BINARIES
            .iter()
            .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
            .find(|p| p.is_file())
            .map(|binary| Chromium { binary })
            .ok_or_else(|| {
                LabError::io(
                    "finding a headless browser",
                    format!(
                        "none of {} is in PATH: install Chromium (`apt-get install chromium`; \
                         `bash run.sh test` does)",
                        BINARIES.join(", ")
                    ),
                )
            })
    }

    /// This binary.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// A headless viewer of `url` with a `width`×`height` window, its stderr in `log`.
    pub fn viewer(
        &self,
        url: &str,
        (width, height): (u32, u32),
        log: &Path,
    ) -> Result<ViewerCommand, LabError> {
        self.viewer_with(Command::new(&self.binary), url, (width, height), log)
    }

    /// As [`Chromium::viewer`], the browser's arguments added to `base`: a command that runs
    /// this binary, e.g. a host's `host.command(chromium.binary())` (`ip netns exec`), which
    /// passes the arguments on. The browser gets a fresh profile directory, removed when the
    /// [`Viewer`] drops, and its own process group, so that all its processes can be killed.
    pub fn viewer_with(
        &self,
        base: Command,
        url: &str,
        (width, height): (u32, u32),
        log: &Path,
    ) -> Result<ViewerCommand, LabError> {
        let profile = ProfileDir::new()?;
        let stderr = std::fs::File::create(log)
            .map_err(|e| LabError::io(format!("creating {}", log.display()), e))?;
        let args = headless_args(profile.path(), (width, height));
        Ok(ViewerCommand {
            base,
            args,
            size: (width, height),
            url: url.to_string(),
            stderr,
            profile,
        })
    }

    /// Opens `url` in a headless `width`×`height` window, waits `after`, and writes what the
    /// page shows then to `png`. The browser's stderr goes to `log`.
    pub fn screenshot(
        &self,
        url: &str,
        after: Duration,
        (width, height): (u32, u32),
        png: &Path,
        log: &Path,
    ) -> Result<(), LabError> {
        let (_viewer, mut devtools) = self
            .viewer(url, (width, height), log)?
            .spawn_with_devtools()?;
        let page = devtools.page()?;
        std::thread::sleep(after);
        let bytes = devtools.screenshot_png(&page)?;
        std::fs::write(png, bytes)
            .map_err(|e| LabError::io(format!("writing {}", png.display()), e))
    }
}

/// The browser's arguments before the URL: headless, runnable as root in a container, and
/// never throttled, so that what it shows is what a viewer in front of a screen would see.
pub fn headless_args(profile: &Path, (width, height): (u32, u32)) -> Vec<OsString> {
    let mut user_data_dir = OsString::from("--user-data-dir=");
    user_data_dir.push(profile);
    let mut args: Vec<OsString> = [
        // The new headless mode is the whole browser without a window (WebCodecs included).
        "--headless=new",
        // As root the zygote refuses to start with the sandbox (crbug.com/638180).
        "--no-sandbox",
        // No GPU in a container: software compositing, software decoding.
        "--disable-gpu",
        // Containers' /dev/shm is often 64 MB, too small for the renderer's shared memory.
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-ui-for-media-stream",
        "--no-first-run",
        "--no-default-browser-check",
        "--mute-audio",
        "--hide-scrollbars",
        // A viewer that nobody looks at must still decode and draw at full rate.
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.push(user_data_dir);
    args.push(format!("--window-size={width},{height}").into());
    args
}

static PROFILES: AtomicU64 = AtomicU64::new(0);

/// A fresh directory for the browser's profile, removed when dropped.
#[derive(Debug)]
struct ProfileDir(PathBuf);

impl ProfileDir {
    fn new() -> Result<ProfileDir, LabError> {
        let n = PROFILES.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lowtide-chromium-{}-{n}", std::process::id()));
        // create_dir, not create_dir_all: a leftover directory is not reused.
        std::fs::create_dir(&dir)
            .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
        Ok(ProfileDir(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ProfileDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A headless browser ready to start.
#[derive(Debug)]
pub struct ViewerCommand {
    base: Command,
    args: Vec<OsString>,
    size: (u32, u32),
    url: String,
    stderr: std::fs::File,
    profile: ProfileDir,
}

impl ViewerCommand {
    /// One more browser flag after the defaults: `--ignore-certificate-errors` for a server
    /// with a self-signed certificate, `--unsafely-treat-insecure-origin-as-secure=ORIGIN`
    /// for a page over plain HTTP from another host (WebCodecs is for secure contexts).
    pub fn arg(mut self, flag: impl Into<OsString>) -> Self {
        self.args.push(flag.into());
        self
    }

    /// The whole command: the base's program and arguments, the browser's flags (with
    /// `--remote-debugging-pipe` if `devtools`), the URL last.
    fn into_command(mut self, devtools: bool) -> (Command, ProfileDir, String) {
        self.base.args(&self.args);
        if devtools {
            self.base.arg("--remote-debugging-pipe");
        }
        self.base
            .arg(&self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        // The browser dies with the thread that started it, so none outlives the lab or a
        // test that was killed (dropping the Viewer covers errors and panics).
        unsafe {
            self.base.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        (self.base, self.profile, self.url)
    }

    /// Starts the browser.
    pub fn spawn(self) -> Result<Viewer, LabError> {
        let (command, profile, url) = self.into_command(false);
        Viewer::start(command, profile, &url)
    }

    /// Starts the browser with the DevTools protocol on a pipe (`--remote-debugging-pipe`:
    /// the browser reads commands on fd 3 and writes replies on fd 4).
    pub fn spawn_with_devtools(self) -> Result<(Viewer, DevTools), LabError> {
        let size = self.size;
        let (to_browser_r, to_browser_w) = pipe()?;
        let (from_browser_r, from_browser_w) = pipe()?;
        let (child_in, child_out) = (to_browser_r.as_raw_fd(), from_browser_w.as_raw_fd());
        let (mut command, profile, url) = self.into_command(true);
        // SAFETY: fcntl and dup2 are async-signal-safe and touch only the child's fds.
        unsafe {
            command.pre_exec(move || place_fds(child_in, child_out));
        }
        let viewer = Viewer::start(command, profile, &url)?;
        // The child's ends are the child's now: the reader sees the end of the pipe when
        // the browser exits only if no copy stays open here.
        drop((to_browser_r, from_browser_w));
        let (tx, rx) = mpsc::channel();
        let reader = std::fs::File::from(from_browser_r);
        std::thread::Builder::new()
            .name("chromium-devtools".into())
            .spawn(move || {
                let mut reader = BufReader::new(reader);
                loop {
                    let mut msg = Vec::new();
                    match reader.read_until(0, &mut msg) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if msg.last() == Some(&0) {
                                msg.pop();
                            }
                            if tx.send(serde_json::from_slice::<Value>(&msg)).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .map_err(|e| LabError::io("starting the DevTools reader thread", e))?;
        Ok((
            viewer,
            DevTools {
                to_browser: std::fs::File::from(to_browser_w),
                replies: rx,
                next_id: 1,
                size,
            },
        ))
    }
}

/// In the child before exec: the DevTools pipe's ends as fds 3 and 4, without close-on-exec.
/// Both are first copied above 10, so that placing one cannot overwrite the other.
fn place_fds(child_in: RawFd, child_out: RawFd) -> std::io::Result<()> {
    // SAFETY: plain fd syscalls on fds this process owns.
    unsafe {
        let a = libc::fcntl(child_in, libc::F_DUPFD_CLOEXEC, 10);
        let b = libc::fcntl(child_out, libc::F_DUPFD_CLOEXEC, 10);
        if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LabError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array; each is owned once wrapped.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(LabError::io(
            "creating the DevTools pipe",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A running headless browser: its whole process group is killed, it is reaped and its
/// profile directory removed when it drops.
#[derive(Debug)]
pub struct Viewer {
    child: Option<Child>,
    status: Option<ExitStatus>,
    // Dropped after `drop` has stopped the browser: fields drop after Drop::drop.
    profile: ProfileDir,
}

impl Viewer {
    fn start(mut command: Command, profile: ProfileDir, url: &str) -> Result<Viewer, LabError> {
        let child = command
            .spawn()
            .map_err(|e| LabError::io(format!("starting a headless browser on {url}"), e))?;
        Ok(Viewer {
            child: Some(child),
            status: None,
            profile,
        })
    }

    /// The browser's profile directory (removed when the viewer drops).
    pub fn profile_dir(&self) -> &Path {
        self.profile.path()
    }

    /// The process id of the command that was started (the browser, or its wrapper).
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its exit status if it has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = &mut self.child {
                self.status = c.try_wait().ok().flatten();
            }
        }
        self.status
    }

    /// SIGTERM to all its processes, SIGKILL after a grace period, and reaped.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return self.status;
        };
        let group = child.id() as libc::pid_t;
        // SAFETY: kill(2) on the process group the child leads (process_group(0)); the
        // child is not reaped yet, so the group's id is not reused.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let until = Instant::now() + TERM_GRACE;
        while self.status.is_none() && Instant::now() < until {
            self.status = child.try_wait().ok().flatten();
            std::thread::sleep(Duration::from_millis(20));
        }
        // Also once the main process has ended: a renderer or the GPU process may linger.
        // SAFETY: as above; an empty group is ESRCH, ignored.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        if self.status.is_none() {
            self.status = child.wait().ok();
        }
        self.status
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The DevTools protocol over the browser's pipe: JSON messages, each ended by a NUL byte.
#[derive(Debug)]
pub struct DevTools {
    to_browser: std::fs::File,
    replies: mpsc::Receiver<Result<Value, serde_json::Error>>,
    next_id: u64,
    size: (u32, u32),
}

/// A page of the browser, attached to (its DevTools session).
#[derive(Debug, Clone)]
pub struct Page {
    session: String,
}

impl DevTools {
    /// Calls `method`, in `session` if given, and returns its result.
    pub fn call(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, LabError> {
        let id = self.next_id;
        self.next_id += 1;
        let what = || format!("DevTools {method}");
        self.to_browser
            .write_all(&devtools_message(id, method, params, session))
            .map_err(|e| LabError::io(what(), e))?;
        let until = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let msg = match self.replies.recv_timeout(left) {
                Ok(m) => m.map_err(|e| LabError::io(what(), format!("unreadable reply: {e}")))?,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(LabError::io(
                        what(),
                        format!("no reply in {} s", CALL_TIMEOUT.as_secs()),
                    ))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(LabError::io(what(), "the browser closed its DevTools pipe"))
                }
            };
            if let Some(reply) = reply_for(id, msg) {
                return reply.map_err(|e| LabError::io(what(), e));
            }
        }
    }

    /// Attaches to the browser's first page (the viewer's URL), waiting for it to exist, and
    /// sets its viewport to the window's size.
    pub fn page(&mut self) -> Result<Page, LabError> {
        let until = Instant::now() + TARGET_TIMEOUT;
        let target = loop {
            let targets = self.call("Target.getTargets", json!({}), None)?;
            let page = targets["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["targetId"].as_str().map(str::to_string));
            match page {
                Some(p) => break p,
                None if Instant::now() > until => {
                    return Err(LabError::io(
                        "finding the browser's page",
                        format!("no page after {} s", TARGET_TIMEOUT.as_secs()),
                    ))
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            None,
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| {
                LabError::io(
                    "DevTools Target.attachToTarget",
                    format!("no sessionId in {attached}"),
                )
            })?
            .to_string();
        // The headless window's viewport is smaller than the window (its frame is counted):
        // the page gets exactly the size asked for, and so does a screenshot.
        let (width, height) = self.size;
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
            Some(&session),
        )?;
        Ok(Page { session })
    }

    /// Evaluates `expression` in the page and returns its value (JSON), e.g.
    /// `"({...window.lowtidePlayer})"` for the player's numbers.
    pub fn evaluate(&mut self, page: &Page, expression: &str) -> Result<Value, LabError> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            Some(&page.session),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(LabError::io(
                format!("evaluating {expression} in the page"),
                ex["exception"]["description"]
                    .as_str()
                    .map_or_else(|| ex.to_string(), str::to_string),
            ));
        }
        Ok(r["result"]["value"].clone())
    }

    /// What the page shows now, as PNG bytes.
    pub fn screenshot_png(&mut self, page: &Page) -> Result<Vec<u8>, LabError> {
        use base64::Engine as _;
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png"}),
            Some(&page.session),
        )?;
        let data = r["data"].as_str().ok_or_else(|| {
            LabError::io("DevTools Page.captureScreenshot", "no data in the reply")
        })?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| LabError::io("DevTools Page.captureScreenshot", e))
    }
}

/// One DevTools command on the pipe: JSON, then a NUL byte.
fn devtools_message(id: u64, method: &str, params: Value, session: Option<&str>) -> Vec<u8> {
    let mut m = json!({"id": id, "method": method, "params": params});
    if let Some(s) = session {
        m["sessionId"] = Value::from(s);
    }
    let mut bytes = m.to_string().into_bytes();
    bytes.push(0);
    bytes
}

/// The outcome of command `id` if `msg` is its reply (events and other replies: `None`).
fn reply_for(id: u64, mut msg: Value) -> Option<Result<Value, String>> {
    if msg["id"].as_u64() != Some(id) {
        return None;
    }
    Some(match msg.get_mut("error") {
        Some(e) => Err(e["message"]
            .as_str()
            .map_or_else(|| e.to_string(), str::to_string)),
        None => Ok(msg["result"].take()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn args_of(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_viewer_is_headless_unsandboxed_in_its_own_profile_with_the_url_last() {
        let chromium = Chromium {
            binary: PathBuf::from("/usr/bin/chromium"),
        };
        let log =
            std::env::temp_dir().join(format!("lowtide-chromium-args-{}.log", std::process::id()));
        let v = chromium
            .viewer("http://127.0.0.1:1/watch/a", (640, 360), &log)
            .unwrap();
        let profile = v.profile.path().to_path_buf();
        assert!(profile.is_dir());
        let (c, profile_dir, _) = v.into_command(false);
        let args = args_of(&c);
        assert_eq!(c.get_program(), "/usr/bin/chromium");
        for flag in [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=640,360",
        ] {
            assert!(
                args.iter().any(|a| a == flag),
                "{flag} missing from {args:?}"
            );
        }
        assert!(args.contains(&format!("--user-data-dir={}", profile.display())));
        assert!(!args.iter().any(|a| a == "--remote-debugging-pipe"));
        assert_eq!(args.last().unwrap(), "http://127.0.0.1:1/watch/a");
        // A viewer never started still removes its profile.
        drop(profile_dir);
        assert!(!profile.exists());
        std::fs::remove_file(&log).unwrap();
    }

    #[test]
    fn a_wrapped_viewer_keeps_the_wrappers_arguments_first() {
        let chromium = Chromium {
            binary: PathBuf::from("/usr/bin/chromium"),
        };
        let mut base = Command::new("ip");
        base.args(["netns", "exec", "viewer1", "/usr/bin/chromium"]);
        let log =
            std::env::temp_dir().join(format!("lowtide-chromium-wrap-{}.log", std::process::id()));
        let v = chromium
            .viewer_with(base, "http://10.0.0.1:8080/", (320, 240), &log)
            .unwrap();
        let (c, _profile, _) = v.into_command(true);
        let args = args_of(&c);
        assert_eq!(c.get_program(), "ip");
        assert_eq!(
            &args[..4],
            ["netns", "exec", "viewer1", "/usr/bin/chromium"]
        );
        assert_eq!(args[4], "--headless=new");
        let n = args.len();
        assert_eq!(
            &args[n - 2..],
            ["--remote-debugging-pipe", "http://10.0.0.1:8080/"]
        );
        std::fs::remove_file(&log).unwrap();
    }

    #[test]
    fn finding_the_browser_tries_each_name_and_says_how_to_install_it() {
        let dir =
            std::env::temp_dir().join(format!("lowtide-chromium-find-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Chromium::find_in(std::slice::from_ref(&dir)).unwrap_err();
        assert!(
            err.to_string().contains("apt-get install chromium"),
            "{err}"
        );
        std::fs::write(dir.join("google-chrome"), "").unwrap();
        std::fs::write(dir.join("chromium-browser"), "").unwrap();
        let found = Chromium::find_in(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(found.binary(), dir.join("chromium-browser"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devtools_messages_are_nul_terminated_json_and_replies_match_their_id() {
        let m = devtools_message(
            7,
            "Page.captureScreenshot",
            json!({"format": "png"}),
            Some("S1"),
        );
        assert_eq!(m.last(), Some(&0));
        let v: Value = serde_json::from_slice(&m[..m.len() - 1]).unwrap();
        assert_eq!(
            v,
            json!({"id": 7, "method": "Page.captureScreenshot", "params": {"format": "png"}, "sessionId": "S1"})
        );
        let m = devtools_message(8, "Browser.close", json!({}), None);
        assert!(serde_json::from_slice::<Value>(&m[..m.len() - 1])
            .unwrap()
            .get("sessionId")
            .is_none());

        assert_eq!(
            reply_for(7, json!({"method": "Target.targetCreated", "params": {}})),
            None
        );
        assert_eq!(reply_for(7, json!({"id": 6, "result": {}})), None);
        assert_eq!(
            reply_for(7, json!({"id": 7, "result": {"data": "AA=="}})),
            Some(Ok(json!({"data": "AA=="})))
        );
        assert_eq!(
            reply_for(
                7,
                json!({"id": 7, "error": {"code": -32601, "message": "'X' wasn't found"}})
            ),
            Some(Err("'X' wasn't found".to_string()))
        );
    }

    /// Serves `page` for every request until dropped.
    struct StaticPage {
        port: u16,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl StaticPage {
        fn serve(page: &'static str) -> StaticPage {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let stop = Arc::new(AtomicBool::new(false));
            let stopped = stop.clone();
            let thread = std::thread::spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                            let mut head = [0u8; 4096];
                            let _ = s.read(&mut head);
                            let _ = write!(
                                s,
                                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                                 Connection: close\r\n\r\n{page}",
                                page.len()
                            );
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
            StaticPage {
                port,
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for StaticPage {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// Green once the page has drawn 30 animation frames and WebCodecs says it decodes the
    /// H.264 the player is sent, red if it does not: the screenshot can only be green if the
    /// page ran live for a while, and the serve tests can only pass if the browser decodes.
    const PAGE: &str = r#"<!doctype html><html><body style="margin:0">
<canvas id="c" width="200" height="100" style="display:block;width:100vw;height:100vh"></canvas>
<script>
const ctx = document.getElementById("c").getContext("2d");
let frames = 0;
let h264 = null;
VideoDecoder.isConfigSupported({codec: "avc1.42E01F", optimizeForLatency: true})
  .then((r) => { h264 = r.supported; });
function tick() {
  frames++;
  ctx.fillStyle = h264 === false ? "rgb(220,0,0)" : frames >= 30 && h264 ? "rgb(0,200,0)" : "rgb(0,0,200)";
  ctx.fillRect(0, 0, 200, 100);
  requestAnimationFrame(tick);
}
requestAnimationFrame(tick);
</script></body></html>"#;

    /// Processes in process group `group` that are not zombies.
    fn live_processes_in_group(group: u32) -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
                fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string()
            })
            .count()
    }

    #[test]
    fn the_real_browser_decodes_h264_and_shoots_a_live_page() {
        let chromium = match Chromium::find() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let page = StaticPage::serve(PAGE);
        let dir =
            std::env::temp_dir().join(format!("lowtide-chromium-shot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("page.png");
        let url = format!("http://127.0.0.1:{}/", page.port);
        chromium
            .screenshot(
                &url,
                Duration::from_millis(2000),
                (320, 240),
                &png,
                &dir.join("chromium.log"),
            )
            .unwrap();
        let shot = resvg::tiny_skia::Pixmap::load_png(&png).unwrap();
        assert_eq!((shot.width(), shot.height()), (320, 240));
        let p = shot.pixel(160, 120).unwrap().demultiply();
        assert_eq!(
            (p.red(), p.green(), p.blue()),
            (0, 200, 0),
            "blue: not yet live; red: no H.264"
        );

        // The page's state through DevTools, and every process gone with the viewer.
        let (viewer, mut devtools) = chromium
            .viewer(&url, (320, 240), &dir.join("chromium2.log"))
            .unwrap()
            .spawn_with_devtools()
            .unwrap();
        let p = devtools.page().unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while devtools
            .evaluate(&p, "frames")
            .unwrap_or(Value::Null)
            .as_u64()
            .unwrap_or(0)
            < 30
        {
            assert!(
                Instant::now() < until,
                "the page drew fewer than 30 frames in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(devtools.evaluate(&p, "h264").unwrap(), Value::Bool(true));
        let group = viewer.id().unwrap();
        let profile = viewer.profile_dir().to_path_buf();
        assert!(
            live_processes_in_group(group) > 1,
            "the browser runs no helper processes"
        );
        drop(viewer);
        // Killed processes may take a moment to leave /proc; zombies do not count.
        let until = Instant::now() + Duration::from_secs(5);
        while live_processes_in_group(group) > 0 {
            assert!(
                Instant::now() < until,
                "a browser process outlived its viewer"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !profile.exists(),
            "the profile directory outlived its viewer"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
