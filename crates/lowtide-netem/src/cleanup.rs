//! Nothing the emulator creates outlives it: every namespace is registered here when it is
//! made, removed on drop, and removed by the Ctrl-C/SIGTERM handler; `lowtide netem cleanup`
//! removes what a killed run (SIGKILL, power loss) left, and only our own prefixed names.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Mutex, Once};

/// Every namespace we create is named `lt-…`; every veth device `lt…`.
pub const PREFIX: &str = "lt-";

static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static HANDLER: Once = Once::new();

/// Records a namespace as ours and live, and makes sure a signal removes it.
pub(crate) fn register(ns: &str) {
    HANDLER.call_once(|| {
        // If the program installed its own handler, ctrlc refuses; then that program's
        // handler is responsible, and drops still clean up.
        let _ = ctrlc::set_handler(|| {
            remove_live();
            eprintln!("interrupted: removed lowtide's network namespaces");
            std::process::exit(130);
        });
    });
    if let Ok(mut live) = LIVE.lock() {
        live.insert(ns.to_string());
    }
}

pub(crate) fn unregister(ns: &str) {
    if let Ok(mut live) = LIVE.lock() {
        live.remove(ns);
    }
}

/// Removes every namespace this process still has (for signal handlers of programs that
/// install their own).
pub fn remove_live() {
    let names: Vec<String> = LIVE
        .lock()
        .map(|l| l.iter().cloned().collect())
        .unwrap_or_default();
    for name in names {
        delete_namespace(&name);
        unregister(&name);
    }
}

pub(crate) fn delete_namespace(name: &str) -> bool {
    Command::new("ip")
        .args(["netns", "delete", name])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Namespaces named with our prefix, whoever made them.
pub fn leftover_namespaces() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else {
        return vec![];
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    names.sort();
    names
}

/// veth devices of ours left in the root namespace (a run killed while it built a pair).
fn leftover_links() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["-o", "link", "show"]).output() else {
        return vec![];
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| is_our_link(n))
        .collect()
}

/// `lt` + 5 lowercase letters or digits + `s`/`r` + a number + `h`/`e`.
fn is_our_link(name: &str) -> bool {
    let b = name.as_bytes();
    if b.len() < 10 || !name.starts_with("lt") {
        return false;
    }
    let id_ok = b[2..7]
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let side_ok = matches!(b[7], b's' | b'r');
    let end_ok = matches!(b[b.len() - 1], b'h' | b'e');
    let num_ok = b[8..b.len() - 1].iter().all(u8::is_ascii_digit) && b.len() > 9;
    id_ok && side_ok && end_ok && num_ok
}

/// What `cleanup` removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub namespaces: Vec<String>,
    pub links: Vec<String>,
    pub failed: Vec<String>,
}

/// Removes every namespace and veth device of ours, of any run.
pub fn cleanup_all() -> Cleaned {
    let mut cleaned = Cleaned::default();
    for ns in leftover_namespaces() {
        if delete_namespace(&ns) {
            cleaned.namespaces.push(ns);
        } else {
            cleaned.failed.push(ns);
        }
    }
    for link in leftover_links() {
        let ok = Command::new("ip")
            .args(["link", "delete", &link])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            cleaned.links.push(link);
        } else {
            cleaned.failed.push(link);
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::is_our_link;

    #[test]
    fn only_our_link_names_match() {
        assert!(is_our_link("ltab12cs1h"));
        assert!(is_our_link("ltab12cr12e"));
        assert!(!is_our_link("eth0"));
        assert!(!is_our_link("ltab12cx1h"));
        assert!(!is_our_link("ltAB12cs1h"));
        assert!(!is_our_link("ltab12cs1"));
        assert!(!is_our_link("lt"));
    }
}
