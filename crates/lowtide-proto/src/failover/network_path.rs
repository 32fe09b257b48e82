//! Which network path a new backup connection takes.
//!
//! A host with several uplinks gives the channel one local address per path. The primary
//! leaves from the first; a backup (or the duplicate lane) must cross a path other than the
//! connection in use's, or one outage takes both. With three or more paths, successive
//! backups go round the others by ordinal. The driver binds the socket to the address this
//! returns (`lowtide::ChannelConfig::local_addrs`).

/// The path backup `ordinal` takes, given every path in order and the one in use: one other
/// than `in_use`, in turn by ordinal; the only one if there is one path; `None` if there are
/// none (the kernel chooses).
///
/// ```
/// use lowtide_proto::failover::network_path::backup_path;
/// let (a, b) = ("10.1.1.1", "10.3.1.1");
/// assert_eq!(backup_path(&[a, b], Some(a), 1), Some(b));
/// // After a switch to the backup on b, its replacement goes back to a.
/// assert_eq!(backup_path(&[a, b], Some(b), 2), Some(a));
/// assert_eq!(backup_path(&[a], Some(a), 1), Some(a));
/// assert_eq!(backup_path::<&str>(&[], None, 1), None);
/// ```
pub fn backup_path<T: Copy + PartialEq>(paths: &[T], in_use: Option<T>, ordinal: u64) -> Option<T> {
    let others: Vec<T> = paths
        .iter()
        .copied()
        .filter(|p| Some(*p) != in_use)
        .collect();
    match others.len() {
        0 => paths.first().copied(),
        n => Some(others[(ordinal % n as u64) as usize]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Random outages of the path in use: each one moves the channel to the backup the
        /// rule chose, and that backup never shares the failed path while another exists;
        /// over many outages every other path is used.
        #[test]
        fn a_backup_never_shares_the_path_in_use_when_another_exists(
            n in 1usize..5,
            outages in proptest::collection::vec(any::<bool>(), 1..60),
        ) {
            let paths: Vec<u8> = (0..n as u8).collect();
            let mut in_use = paths[0];
            let mut used = vec![in_use];
            let mut ordinal = 1u64;
            let mut ready = backup_path(&paths, Some(in_use), ordinal).unwrap();
            for outage in outages {
                if !outage {
                    continue;
                }
                // The path in use goes dark: the channel switches to the ready backup.
                prop_assert!(n == 1 || ready != in_use, "backup on the failed path {in_use}");
                in_use = ready;
                used.push(in_use);
                ordinal += 1;
                ready = backup_path(&paths, Some(in_use), ordinal).unwrap();
            }
            if n == 2 && used.len() > 2 {
                prop_assert!(used.contains(&0) && used.contains(&1));
            }
        }
    }
}
