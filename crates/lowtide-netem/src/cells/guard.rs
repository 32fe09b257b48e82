//! A wrapper around any rattan cell that turns its failures into a recorded
//! [`EmulatorFailure`](crate::failure::EmulatorFailure) instead of a crash.
//!
//! Without it, a panic inside a cell (rattan-core 0.1.1's trace replay divides by a zero
//! bandwidth on traces with gaps) ends that cell's tokio task; rattan's `join_rattan` then
//! unwraps the task's `JoinError` when the network is torn down, so the main thread panics
//! and the run ends with no report. And rattan's core panics itself when a cell's ingress
//! returns an error other than "channel closed" or "would block" (a full send queue of a veth).
//!
//! So every cell of the emulator is built inside a `Guarded`:
//! - its egress future runs under `catch_unwind`; a panic is recorded with the cell's site and
//!   the cell is parked (it waits forever, so its task ends cleanly when the network stops);
//! - its ingress runs under `catch_unwind` too; a full queue ("would block", "no available
//!   capacity") is a counted drop (`interface_busy`), any other error or panic is recorded
//!   and the packet dropped, so rattan's core never sees an error it would panic on.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use rattan_core::cells::{Cell, CellState, Egress, Ingress, StdPacket};
use rattan_core::control::RattanNotify;
use rattan_core::error::{Error, TokioRuntimeError};

use crate::aqm::Reason;
use crate::failure::{panic_message, FailureSlot, Site};
use crate::stats::LinkStats;

/// Where a guarded cell's failures go.
pub struct Watch {
    /// Failures of what enters the cell (for a host's interface: writing to the host).
    pub ingress: Site,
    /// Failures of what leaves the cell (for a host's interface: reading from the host).
    pub egress: Site,
    pub failures: Arc<FailureSlot>,
    /// Where packets the ingress could not take are counted (the link they were leaving).
    pub drops: Option<Arc<LinkStats>>,
}

impl Watch {
    /// A cell inside one link: both sides fail as that cell of that link.
    pub fn inside(site: Site, failures: &Arc<FailureSlot>) -> Self {
        Self {
            ingress: site.clone(),
            egress: site,
            failures: failures.clone(),
            drops: None,
        }
    }
}

pub struct Guarded<C: Cell<StdPacket>> {
    ingress: Arc<GuardedIngress>,
    egress: GuardedEgress<C::EgressType>,
    control: Arc<C::ControlInterfaceType>,
}

impl<C: Cell<StdPacket>> Guarded<C> {
    pub fn new(inner: C, watch: Watch) -> Self {
        let sender: Arc<dyn Ingress<StdPacket>> = inner.sender();
        let control = inner.control_interface();
        Self {
            ingress: Arc::new(GuardedIngress {
                inner: sender,
                site: watch.ingress,
                failures: watch.failures.clone(),
                drops: watch.drops,
            }),
            egress: GuardedEgress {
                inner: inner.into_receiver(),
                site: watch.egress,
                failures: watch.failures,
                failed: false,
            },
            control,
        }
    }
}

impl<C: Cell<StdPacket>> Cell<StdPacket> for Guarded<C> {
    type IngressType = GuardedIngress;
    type EgressType = GuardedEgress<C::EgressType>;
    type ControlInterfaceType = C::ControlInterfaceType;

    fn sender(&self) -> Arc<Self::IngressType> {
        self.ingress.clone()
    }

    fn receiver(&mut self) -> &mut Self::EgressType {
        &mut self.egress
    }

    fn into_receiver(self) -> Self::EgressType {
        self.egress
    }

    fn control_interface(&self) -> Arc<Self::ControlInterfaceType> {
        self.control.clone()
    }
}

pub struct GuardedIngress {
    inner: Arc<dyn Ingress<StdPacket>>,
    site: Site,
    failures: Arc<FailureSlot>,
    drops: Option<Arc<LinkStats>>,
}

impl Ingress<StdPacket> for GuardedIngress {
    fn enqueue(&self, packet: StdPacket) -> Result<(), Error> {
        match catch_unwind(AssertUnwindSafe(|| self.inner.enqueue(packet))) {
            Ok(Ok(())) => Ok(()),
            // The next cell has stopped: the network is being torn down.
            Ok(Err(Error::ChannelError(m))) => Err(Error::ChannelError(m)),
            Ok(Err(e)) if is_full(&e) => {
                if let Some(stats) = &self.drops {
                    stats.dropped(Reason::InterfaceBusy);
                }
                Ok(())
            }
            Ok(Err(e)) => {
                self.failures.record(&self.site, e.to_string());
                Ok(())
            }
            Err(payload) => {
                self.failures.record(&self.site, panic_message(&*payload));
                Ok(())
            }
        }
    }
}

/// A queue that is full for now, as opposed to broken.
fn is_full(e: &Error) -> bool {
    match e {
        Error::IoError(io) => io.kind() == std::io::ErrorKind::WouldBlock,
        Error::TokioRuntimeError(TokioRuntimeError::MpscError(m)) => {
            m.contains("no available capacity")
        }
        _ => false,
    }
}

pub struct GuardedEgress<E> {
    inner: E,
    site: Site,
    failures: Arc<FailureSlot>,
    failed: bool,
}

#[async_trait]
impl<E: Egress<StdPacket>> Egress<StdPacket> for GuardedEgress<E> {
    async fn dequeue(&mut self) -> Option<StdPacket> {
        if !self.failed {
            match CatchUnwind(self.inner.dequeue()).await {
                Ok(packet) => return packet,
                Err(payload) => {
                    self.failures.record(&self.site, panic_message(&*payload));
                    self.failed = true;
                }
            }
        }
        // A failed cell forwards nothing more; its task ends when the network stops.
        std::future::pending().await
    }

    fn reset(&mut self) {
        self.inner.reset();
    }

    fn change_state(&self, state: CellState) {
        self.inner.change_state(state);
    }

    fn set_notify_receiver(&mut self, notify_rx: tokio::sync::broadcast::Receiver<RattanNotify>) {
        self.inner.set_notify_receiver(notify_rx);
    }
}

/// Polls a future under `catch_unwind`.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}
