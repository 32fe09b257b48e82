//! The emulator's own rattan cells, and the guard every cell runs in.
//!
//! - [`rate::RateCell`]: the bottleneck queue drained at the link's rate or by a capacity
//!   trace (the schedules are sans-IO, in [`crate::link`]);
//! - [`delay::DelayCell`]: the one-way propagation delay;
//! - [`guard::Guarded`]: catches a cell's panic or error and records it as the run's failure.
//!
//! The link's exit (random loss, counters, lateness, pcap) is [`crate::tap::LinkTap`].
//! Our cells wait on [`crate::timer::Timer`], so the emulator's timing is ours to measure
//! and tune ([`crate::timing`]).

pub mod delay;
pub mod guard;
pub mod rate;

use std::sync::Arc;

use rattan_core::cells::{ControlInterface, Ingress, StdPacket};
use rattan_core::error::Error;
use tokio::sync::mpsc;

/// The ingress of our cells: an unbounded channel into the cell's task (the queue limit is
/// the bottleneck's, applied inside the cell).
pub struct ChannelIngress(mpsc::UnboundedSender<StdPacket>);

impl Ingress<StdPacket> for ChannelIngress {
    fn enqueue(&self, packet: StdPacket) -> Result<(), Error> {
        self.0
            .send(packet)
            .map_err(|_| Error::ChannelError("the cell has stopped".to_string()))
    }
}

fn channel() -> (Arc<ChannelIngress>, mpsc::UnboundedReceiver<StdPacket>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Arc::new(ChannelIngress(tx)), rx)
}

/// Our cells are configured when the topology is built, not while they run.
pub struct FixedConfig;

impl ControlInterface for FixedConfig {
    type Config = ();
    fn set_config(&self, _: ()) -> Result<(), Error> {
        Err(Error::ConfigError(
            "this cell is configured when the topology is built".to_string(),
        ))
    }
}
