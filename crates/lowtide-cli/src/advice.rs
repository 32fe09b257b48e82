//! What to do about an error, in the command line's own terms.
//!
//! The libraries' errors say what happened, once each: a layer that shows its cause does not
//! also return it from `source()`, so the `{:#}` chain printed by `main` never repeats a
//! clause. Where the error is a common set-up mistake ([`lowtide::Mistake`]: TLS on one side
//! only, nothing listening, a port in use, a missing privilege), this module adds the fix,
//! naming the flags of the command that failed. `docs/errors.md` tabulates the mistakes and
//! what the command prints; `tests/errors.rs` provokes each and checks the printed line
//! against the table.

use lowtide::Mistake;

/// The command that failed, for the flags the advice names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `lowtide send`: connects to `--to`.
    Send,
    /// `lowtide recv`: listens on `--listen`.
    Recv,
    /// `lowtide serve`: listens on `--listen` (viewers) and `--ingest` (publishers).
    Serve,
    /// `lowtide watch`: connects to `--server`.
    Watch,
    /// Any other command.
    Other,
}

/// The fix for `e`, if it is one of the common mistakes.
pub fn advice(role: Role, e: &anyhow::Error) -> Option<String> {
    use lowtide_media::pipe::PipeError;
    if e.chain()
        .any(|c| matches!(c.downcast_ref::<PipeError>(), Some(PipeError::Input(_))))
    {
        return Some("name the input's format with --format h264|h265|ivf".into());
    }
    let (mistake, what) = find(e)?;
    let text = match (mistake, role) {
        (Mistake::PeerSpeaksTls, Role::Send) => {
            "add --tls-ca CA.pem (the CA of the receiver's --tls-cert)"
        }
        (Mistake::PeerSpeaksTls, _) => "turn TLS on at this side too",
        (Mistake::PeerSpeaksPlaintext, Role::Send) => {
            "drop --tls-ca, or start `lowtide recv` with --tls-cert and --tls-key"
        }
        (Mistake::PeerSpeaksPlaintext, _) => "turn TLS off at this side, or on at the peer",
        (Mistake::NothingListening, Role::Send) => {
            "nothing listens there: start `lowtide recv --listen ADDR` (or `lowtide serve \
             --ingest ADDR`) first, or check --to"
        }
        (Mistake::NothingListening, Role::Watch) => {
            "nothing listens there: start `lowtide serve` first, or check --server (its --listen)"
        }
        (Mistake::NothingListening, _) => "nothing listens there: start the other side first",
        (Mistake::AddressInUse, Role::Recv) => {
            "another program holds that port: stop it, or pick another with --listen"
        }
        (Mistake::AddressInUse, Role::Serve) => {
            "another program holds that port: stop it, or pick others with --listen and --ingest"
        }
        (Mistake::AddressInUse, _) => "another program holds that port: stop it or pick another",
        (Mistake::NotPermitted, _) if what.contains("TCP_CONGESTION") => {
            "an unprivileged user may only choose a congestion control listed in \
             /proc/sys/net/ipv4/tcp_allowed_congestion_control: pick one of those, or run as root"
        }
        (Mistake::NotPermitted, _) if what.starts_with("bind(") => {
            "ports below 1024 need root: pick a port of 1024 or above, or run as root"
        }
        (Mistake::NotPermitted, _) => "this needs more privilege: run it as root (sudo)",
        _ => return None,
    };
    Some(text.to_owned())
}

/// The mistake behind `e` and the attempted call it names ("" if none): the lowtide error in
/// the chain, or an OS error from a server or viewer.
fn find(e: &anyhow::Error) -> Option<(Mistake, String)> {
    use lowtide_serve::client::WatchError;
    use lowtide_serve::ServeError;
    for cause in e.chain() {
        if let Some(t) = lowtide_error(cause) {
            let what = match t {
                lowtide::Error::Io { what, .. } => what.clone(),
                _ => String::new(),
            };
            return t.mistake().map(|m| (m, what));
        }
        if let Some(ServeError::Http { addr, error }) = cause.downcast_ref::<ServeError>() {
            return Mistake::of_io(error).map(|m| (m, format!("bind({addr})")));
        }
        if let Some(WatchError::Connect { addr, error }) = cause.downcast_ref::<WatchError>() {
            return Mistake::of_io(error).map(|m| (m, format!("connect({addr})")));
        }
    }
    None
}

/// The lowtide error `cause` is or carries (the wrappers show it rather than chain it).
fn lowtide_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a lowtide::Error> {
    use lowtide_media::pipe::PipeError;
    use lowtide_media::session::SessionError;
    use lowtide_serve::ServeError;
    if let Some(t) = cause.downcast_ref::<lowtide::Error>() {
        return Some(t);
    }
    if let Some(SessionError::Transport(t)) = cause.downcast_ref::<SessionError>() {
        return Some(t);
    }
    if let Some(PipeError::Transport(t)) = cause.downcast_ref::<PipeError>() {
        return Some(t);
    }
    if let Some(ServeError::Ingest { error, .. }) = cause.downcast_ref::<ServeError>() {
        return Some(error);
    }
    None
}
