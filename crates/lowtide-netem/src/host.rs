//! An emulated host: a network namespace with one veth into the emulator and one address (and,
//! for the senders of a two-path topology, a second veth and address on path B).
//! Code runs there as threads that `setns` into the namespace, so every host of a run shares
//! one process and one CLOCK_MONOTONIC: one-way latency is exact, without NTP.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;

use rattan_env::NetNs;

use crate::error::NetemError;

pub struct Host {
    pub(crate) name: String,
    pub(crate) addr: Ipv4Addr,
    /// The second interface's address and device name, when the topology has a path B.
    pub(crate) path_b: Option<(Ipv4Addr, String)>,
    pub(crate) ns: Arc<NetNs>,
    pub(crate) congestion: String,
    pub(crate) ecn: bool,
}

impl Host {
    /// The namespace name, usable with `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The address of this host's interface on path B (senders of a two-path topology):
    /// a socket bound to it leaves through path B.
    pub fn path_b_addr(&self) -> Option<Ipv4Addr> {
        self.path_b.as_ref().map(|(a, _)| *a)
    }

    /// The device name of this host's path B interface (for `SO_BINDTODEVICE`).
    pub fn path_b_device(&self) -> Option<&str> {
        self.path_b.as_ref().map(|(_, d)| d.as_str())
    }

    /// The congestion control tools on this host set per socket.
    pub fn congestion(&self) -> &str {
        &self.congestion
    }

    pub fn ecn(&self) -> bool {
        self.ecn
    }

    /// Runs `f` on a new thread inside this host.
    pub fn spawn<F, R>(&self, thread_name: &str, f: F) -> Result<JoinHandle<R>, NetemError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let ns = self.ns.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || {
                let entered = ns.enter().map(|_| ()).map_err(|e| e.to_string());
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered);
                if !ok {
                    // The caller gets the error from `spawn`; `f` must never run outside the
                    // host, so unwind silently (no panic message: the error is reported).
                    std::panic::resume_unwind(Box::new(()));
                }
                f()
            })
            .map_err(|e| NetemError::setup(format!("spawning thread {thread_name}"), e))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => Err(NetemError::setup(
                format!("entering namespace {} for thread {thread_name}", self.name),
                e,
            )),
            Err(e) => Err(NetemError::setup(
                format!("starting thread {thread_name}"),
                e,
            )),
        }
    }

    /// Runs `f` inside this host and waits for it.
    pub fn run<F, R>(&self, f: F) -> Result<R, NetemError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.spawn("lowtide-host", f)?
            .join()
            .map_err(|_| NetemError::setup(format!("a task in host {}", self.name), "it panicked"))
    }

    /// A command that runs `program` inside this host (`ip netns exec`). It is killed if
    /// this process dies first, so no program outlives the network it ran in.
    pub fn command(&self, program: &str) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs `ip -n HOST ARGS` (policy routing, MPTCP endpoints: what rattan's netlink
    /// helpers do not cover); an error carries the command and what `ip` printed.
    pub fn ip(&self, args: &[&str]) -> Result<(), NetemError> {
        let what = || format!("ip -n {} {}", self.name, args.join(" "));
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .map_err(|e| NetemError::setup(what(), format!("{e} (install iproute2)")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(NetemError::setup(
                what(),
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }

    /// Sets a sysctl of this host's network stack (`net.ipv4.tcp_ecn` → /proc/sys/net/ipv4/tcp_ecn).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<(), NetemError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_string();
        let what = format!("setting {key} in host {}", self.name);
        self.run(move || std::fs::write(&path, value))?
            .map_err(|e| NetemError::setup(what, e))
    }
}
