//! The link's one-way propagation delay: each packet leaves `delay` after the logical time it
//! left the queue, in order (a packet never overtakes the one before it), as rattan's delay
//! cell and mahimahi's `DelayQueue` do. Ours waits on the emulator's [`Timer`], so the whole
//! link wakes the same, measured way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rattan_core::cells::{Cell, Egress, Packet, StdPacket};
use tokio::sync::mpsc;

use super::{channel, ChannelIngress, FixedConfig};
use crate::timer::{Timer, WakeTail};

pub struct DelayCell {
    ingress: Arc<ChannelIngress>,
    egress: DelayEgress,
}

impl DelayCell {
    /// Must be built inside the emulator's runtime.
    pub fn new(delay: Duration, tail: WakeTail) -> std::io::Result<Self> {
        let (ingress, rx) = channel();
        Ok(Self {
            ingress,
            egress: DelayEgress {
                rx,
                delay,
                last: None,
                timer: Timer::new(tail)?,
            },
        })
    }
}

pub struct DelayEgress {
    rx: mpsc::UnboundedReceiver<StdPacket>,
    delay: Duration,
    /// When the last packet left: the next one leaves no earlier.
    last: Option<Instant>,
    timer: Timer,
}

#[async_trait]
impl Egress<StdPacket> for DelayEgress {
    async fn dequeue(&mut self) -> Option<StdPacket> {
        let mut packet = self.rx.recv().await?;
        let due = packet.get_timestamp().into_std() + self.delay;
        let due = self.last.map_or(due, |last| due.max(last));
        if due > Instant::now() {
            if let Err(e) = self.timer.sleep_until(due).await {
                // The guard records this as the link's failure.
                panic!("the delay's timer failed: {e}");
            }
        }
        self.last = Some(due);
        packet.delay_until(due.into());
        Some(packet)
    }
}

impl Cell<StdPacket> for DelayCell {
    type IngressType = ChannelIngress;
    type EgressType = DelayEgress;
    type ControlInterfaceType = FixedConfig;

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
        Arc::new(FixedConfig)
    }
}
