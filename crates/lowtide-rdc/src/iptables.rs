//! The agent's iptables rules, in two chains of its own in the `mangle` table:
//!
//! ```text
//! -t mangle -N LT-RDC-<q>-IN    -A LT-RDC-<q>-IN  -p tcp [--dport P] -j NFQUEUE --queue-num q   --queue-bypass
//! -t mangle -N LT-RDC-<q>-OUT   -A LT-RDC-<q>-OUT -p tcp [--sport P] -j NFQUEUE --queue-num q+1 --queue-bypass
//! -t mangle -I INPUT  1 ! -i lo -j LT-RDC-<q>-IN
//! -t mangle -I OUTPUT 1 ! -o lo -j LT-RDC-<q>-OUT
//! ```
//!
//! `--queue-bypass` lets packets through while no agent is bound to the queue, so a killed
//! agent never blackholes a connection. [`Rules`] removes everything it installed when dropped
//! (normal exit and panic); [`remove_live`] removes every rule set still installed by this
//! process, from the namespace it was installed in (for signal handlers); [`remove_leftovers`]
//! removes what a killed agent left (`lowtide rdc cleanup`).
//!
//! NFQUEUE works through iptables' xtables target, with either backend (nf_tables' `compat`
//! or legacy): Linux 6.18 here has no nft `queue` expression (`CONFIG_NFT_QUEUE` unset).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Mutex;

use crate::driver::AgentError;

/// The programs tried, in order, when none is given.
pub const TOOLS: [&str; 2] = ["iptables", "iptables-legacy"];

/// Every rule set of this process still installed: (tool, queue, its network namespace).
static LIVE: Mutex<Vec<(String, u16, File)>> = Mutex::new(Vec::new());

/// The two chains of the agent bound to queue `queue` (and `queue + 1`).
pub fn chains(queue: u16) -> [String; 2] {
    [format!("LT-RDC-{queue}-IN"), format!("LT-RDC-{queue}-OUT")]
}

/// Which traffic the rules send to the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Local TCP ports (the receivers' ports); empty: every TCP flow.
    pub ports: Vec<u16>,
    /// Also queue loopback traffic (the benchmark does; a receiver host never needs it).
    pub loopback: bool,
}

fn run(tool: &str, args: &[&str]) -> Result<(), AgentError> {
    let out = Command::new(tool)
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                AgentError::IptablesMissing {
                    tried: tool.to_string(),
                }
            } else {
                AgentError::Iptables {
                    command: format!("{tool} -w {}", args.join(" ")),
                    reason: e.to_string(),
                }
            }
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(AgentError::Iptables {
            command: format!("{tool} -w {}", args.join(" ")),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The first of `tool` (if given) or [`TOOLS`] that can list the mangle table here.
pub fn find_tool(tool: Option<&str>) -> Result<String, AgentError> {
    let candidates: Vec<&str> = match tool {
        Some(t) => vec![t],
        None => TOOLS.to_vec(),
    };
    let mut last = None;
    for t in &candidates {
        match run(t, &["-t", "mangle", "-S", "INPUT"]) {
            Ok(()) => return Ok(t.to_string()),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(AgentError::IptablesMissing { .. }) | None => Err(AgentError::IptablesMissing {
            tried: candidates.join(", "),
        }),
        Some(e) => Err(e),
    }
}

/// Installed rules; dropping removes them.
#[derive(Debug)]
pub struct Rules {
    tool: String,
    queue: u16,
    installed: bool,
}

impl Rules {
    /// Installs the chains and the jumps to them. Chains of a killed agent with the same
    /// queue are replaced (the caller has bound the queue, so no live agent owns them).
    pub fn install(tool: &str, queue: u16, selection: &Selection) -> Result<Rules, AgentError> {
        remove_leftovers(tool, queue);
        let rules = Rules {
            tool: tool.to_string(),
            queue,
            installed: true,
        };
        // On an error below, dropping `rules` removes what was made.
        let [inp, out] = chains(queue);
        let (q_in, q_out) = (queue.to_string(), (queue + 1).to_string());
        for (chain, dir, q) in [(&inp, "--dport", &q_in), (&out, "--sport", &q_out)] {
            run(tool, &["-t", "mangle", "-N", chain])?;
            let ports: Vec<Option<String>> = if selection.ports.is_empty() {
                vec![None]
            } else {
                selection
                    .ports
                    .iter()
                    .map(|p| Some(p.to_string()))
                    .collect()
            };
            for port in ports {
                let mut args = vec!["-t", "mangle", "-A", chain, "-p", "tcp"];
                if let Some(p) = &port {
                    args.extend([dir, p.as_str()]);
                }
                args.extend(["-j", "NFQUEUE", "--queue-num", q, "--queue-bypass"]);
                run(tool, &args)?;
            }
        }
        let (not_in, not_out): (&[&str], &[&str]) = if selection.loopback {
            (&[], &[])
        } else {
            (&["!", "-i", "lo"], &["!", "-o", "lo"])
        };
        for (hook, not_lo, chain) in [("INPUT", not_in, &inp), ("OUTPUT", not_out, &out)] {
            let mut args = vec!["-t", "mangle", "-I", hook, "1"];
            args.extend_from_slice(not_lo);
            args.extend(["-j", chain.as_str()]);
            run(tool, &args)?;
        }
        register(tool, queue);
        Ok(rules)
    }

    /// Removes the rules now, reporting a failure (dropping removes them silently).
    pub fn remove(mut self) -> Result<(), AgentError> {
        self.installed = false;
        unregister(self.queue);
        remove_chains(&self.tool, self.queue)
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        if self.installed {
            unregister(self.queue);
            if let Err(e) = remove_chains(&self.tool, self.queue) {
                tracing::error!("removing the RDC agent's iptables rules: {e}");
            }
        }
    }
}

fn remove_chains(tool: &str, queue: u16) -> Result<(), AgentError> {
    let [inp, out] = chains(queue);
    let mut first_error = None;
    for (hook, chain) in [("INPUT", &inp), ("OUTPUT", &out)] {
        // Jumps may carry `! -i lo` or not: delete by rule text as listed.
        for rule in jumps_to(tool, hook, chain) {
            let args: Vec<&str> = ["-t", "mangle", "-D"]
                .into_iter()
                .chain(rule.split_whitespace().skip(1))
                .collect();
            if let Err(e) = run(tool, &args) {
                first_error.get_or_insert(e);
            }
        }
    }
    for chain in [&inp, &out] {
        if chain_exists(tool, chain) {
            for args in [["-t", "mangle", "-F", chain], ["-t", "mangle", "-X", chain]] {
                if let Err(e) = run(tool, &args) {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// `-A HOOK ... -j CHAIN` lines of the mangle table that jump to `chain`.
fn jumps_to(tool: &str, hook: &str, chain: &str) -> Vec<String> {
    let Ok(out) = Command::new(tool)
        .args(["-w", "-t", "mangle", "-S", hook])
        .output()
    else {
        return vec![];
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("-A ") && l.split_whitespace().last() == Some(chain))
        .map(str::to_string)
        .collect()
}

fn chain_exists(tool: &str, chain: &str) -> bool {
    Command::new(tool)
        .args(["-w", "-t", "mangle", "-S", chain])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Chains of ours (`LT-RDC-…`) in this namespace's mangle table.
pub fn our_chains(tool: &str) -> Vec<String> {
    let Ok(out) = Command::new(tool)
        .args(["-w", "-t", "mangle", "-S"])
        .output()
    else {
        return vec![];
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| c.starts_with("LT-RDC-"))
        .map(str::to_string)
        .collect()
}

/// Removes the chains of queue `queue` and the jumps to them, if any; returns whether any
/// were there.
pub fn remove_leftovers(tool: &str, queue: u16) -> bool {
    let [inp, out] = chains(queue);
    let present = chain_exists(tool, &inp) || chain_exists(tool, &out);
    if present {
        tracing::warn!("removing iptables chains {inp}/{out} left by an earlier agent");
        let _ = remove_chains(tool, queue);
    }
    present
}

/// Removes every chain of ours in this namespace (any queue); returns the chains removed.
pub fn remove_all_leftovers(tool: &str) -> Vec<String> {
    let chains = our_chains(tool);
    let mut queues: Vec<u16> = chains
        .iter()
        .filter_map(|c| c.strip_prefix("LT-RDC-")?.split('-').next()?.parse().ok())
        .collect();
    queues.sort_unstable();
    queues.dedup();
    for q in queues {
        let _ = remove_chains(tool, q);
    }
    chains
}

fn register(tool: &str, queue: u16) {
    // The namespace file of this thread: a signal handler runs elsewhere and must enter it.
    let Ok(ns) = File::open("/proc/thread-self/ns/net") else {
        return;
    };
    if let Ok(mut live) = LIVE.lock() {
        live.push((tool.to_string(), queue, ns));
    }
}

fn unregister(queue: u16) {
    let here = std::fs::metadata("/proc/thread-self/ns/net").ok();
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|(_, q, ns)| {
            let same_ns = match (&here, ns.metadata()) {
                (Some(a), Ok(b)) => {
                    use std::os::unix::fs::MetadataExt;
                    a.ino() == b.ino() && a.dev() == b.dev()
                }
                _ => true,
            };
            !(*q == queue && same_ns)
        });
    }
}

/// Removes every rule set this process still has installed, each from its own network
/// namespace; for a signal handler that exits without running destructors. Returns how many.
pub fn remove_live() -> usize {
    let live: Vec<(String, u16, File)> = LIVE
        .lock()
        .map(|mut l| l.drain(..).collect())
        .unwrap_or_default();
    let n = live.len();
    for (tool, queue, ns) in live {
        let _ = std::thread::spawn(move || {
            // SAFETY: setns on this new thread only; `ns` is an open namespace file.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
                let _ = remove_chains(&tool, queue);
            }
        })
        .join();
    }
    n
}
