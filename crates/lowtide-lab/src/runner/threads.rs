//! The threads of a trial: a task's result, the cross-traffic sinks, a measured variant's
//! threads, and the stop flag set however the trial ends.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use lowtide_traffic::runner::Target;
use lowtide_traffic::sink::{TcpSink, TcpSinkReport, UdpSink, UdpSinkReport};
use lowtide_traffic::Stop;

use super::{TCP_SINK_PORT, UDP_SINK_PORT};
use crate::stream::{self};
use crate::{conference, ladder_flow, live_video, video, LabError};

/// A thread of a trial: running, or finished with its result. The trial looks at its
/// threads every second, so one that fails ends the trial at once, not at its end.
pub(crate) enum Task<T> {
    Running(&'static str, JoinHandle<Result<T, LabError>>),
    Done(&'static str, Result<T, LabError>),
}

impl<T> Task<T> {
    pub(crate) fn spawn(
        host: &lowtide_netem::Host,
        what: &'static str,
        f: impl FnOnce() -> Result<T, LabError> + Send + 'static,
    ) -> Result<Self, LabError>
    where
        T: Send + 'static,
    {
        Ok(Task::Running(what, host.spawn(what, f)?))
    }

    /// Takes the result of a finished thread; the error of a failed one, once.
    pub(super) fn poll(&mut self) -> Option<LabError> {
        if let Task::Running(what, h) = self {
            if !h.is_finished() {
                return None;
            }
            let what = *what;
            let Task::Running(_, h) =
                std::mem::replace(self, Task::Done(what, Err(LabError::Stopped)))
            else {
                unreachable!("matched above")
            };
            *self = Task::Done(what, join(h, what));
        }
        match self {
            Task::Done(what, Err(e)) if !matches!(e, LabError::Stopped) => {
                let e = std::mem::replace(e, LabError::Stopped);
                Some(LabError::io(format!("the {what}"), e))
            }
            _ => None,
        }
    }

    /// Waits for the thread; `Err` if it failed (or stopped because something else did).
    pub(super) fn wait(self) -> Result<T, LabError> {
        match self {
            Task::Running(what, h) => join(h, what),
            Task::Done(_, r) => r,
        }
    }
}

fn join<T>(h: JoinHandle<Result<T, LabError>>, what: &str) -> Result<T, LabError> {
    h.join()
        .map_err(|p| {
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            LabError::io(what.to_string(), format!("the thread panicked: {why}"))
        })
        .and_then(|r| r)
}

/// The cross-traffic sinks of one trial: a TCP and a UDP sink on each target host.
#[derive(Default)]
pub(super) struct Sinks {
    tcp: Vec<Task<TcpSinkReport>>,
    udp: Vec<Task<UdpSinkReport>>,
}

impl Sinks {
    /// The targets on `hosts`, with sinks started there when a schedule uses them.
    pub(super) fn start(
        &mut self,
        hosts: &[lowtide_netem::Host],
        used: bool,
        stop: &Stop,
    ) -> Result<Vec<Target>, LabError> {
        let mut out = vec![];
        for h in hosts {
            let t = Target {
                tcp: SocketAddr::from((h.addr(), TCP_SINK_PORT)),
                udp: SocketAddr::from((h.addr(), UDP_SINK_PORT)),
            };
            if used {
                let s = stop.clone();
                self.tcp.push(Task::spawn(h, "TCP sink", move || {
                    TcpSink::bind(t.tcp)
                        .map_err(traffic_err)?
                        .run(&s)
                        .map_err(traffic_err)
                })?);
                let s = stop.clone();
                self.udp.push(Task::spawn(h, "UDP sink", move || {
                    UdpSink::bind(t.udp)
                        .map_err(traffic_err)?
                        .run(&s)
                        .map_err(traffic_err)
                })?);
            }
            out.push(t);
        }
        Ok(out)
    }

    pub(super) fn poll(&mut self) -> Option<LabError> {
        let tcp = self.tcp.iter_mut().find_map(Task::poll);
        tcp.or_else(|| self.udp.iter_mut().find_map(Task::poll))
    }

    /// Waits for every sink; the payload bytes they received.
    pub(super) fn join(self) -> Result<u64, LabError> {
        let mut bytes = 0;
        for t in self.tcp {
            bytes += t.wait()?.bytes_received;
        }
        for t in self.udp {
            bytes += t.wait()?.bytes;
        }
        Ok(bytes)
    }
}

/// The threads of one measured variant.
// One value per variant and trial: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Measured {
    Stream {
        tx: Task<stream::StreamSent>,
        rx: Task<stream::Received>,
    },
    Video {
        tx: Task<video::VideoSent>,
        rx: Task<lowtide_media::playout::Playout>,
    },
    Conference {
        tx: Task<conference::ConferenceRun>,
        rx: Task<conference::ConferenceSeen>,
    },
    Ladder {
        tx: Task<ladder_flow::LadderSent>,
        rx: Task<ladder_flow::LadderSeen>,
    },
    Live {
        tx: Task<live_video::LiveSent>,
        rx: Task<live_video::LiveSeen>,
    },
}

impl Measured {
    pub(super) fn poll(&mut self) -> Option<LabError> {
        match self {
            Measured::Stream { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Video { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Conference { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Ladder { tx, rx } => tx.poll().or_else(|| rx.poll()),
            Measured::Live { tx, rx } => tx.poll().or_else(|| rx.poll()),
        }
    }
}

/// Sets the trial's stop flag when the trial ends, however it ends.
pub(super) struct StopOnDrop(pub(super) Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub(super) fn traffic_err(e: impl std::fmt::Display) -> LabError {
    LabError::Traffic(e.to_string())
}
