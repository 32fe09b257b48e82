//! The link's exit: a pass-through cell at the end of each direction (after the queue and the
//! propagation delay) that applies the configured random loss, counts what leaves, measures
//! how late the emulator is against its own schedule, and optionally writes a pcap file.
//!
//! Lateness: rattan gives each packet a logical timestamp (`delay_until`) saying when it
//! should have left the delay cell; the wall clock at our dequeue minus that timestamp is
//! the error the emulator added (timer wake-up, scheduling, channel hops).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rattan_core::cells::{Cell, ControlInterface, Egress, Ingress, Packet};
use rattan_core::error::Error as RattanError;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::aqm::Reason;
use crate::error::NetemError;
use crate::stats::LinkStats;

pub struct LinkTap<P: Packet> {
    ingress: Arc<TapIngress<P>>,
    egress: TapEgress<P>,
    control: Arc<TapControl>,
}

pub struct TapIngress<P> {
    tx: mpsc::UnboundedSender<P>,
}

impl<P: Packet + Send> Ingress<P> for TapIngress<P> {
    fn enqueue(&self, packet: P) -> Result<(), RattanError> {
        self.tx
            .send(packet)
            .map_err(|_| RattanError::ChannelError("link tap closed".to_string()))
    }
}

pub struct TapEgress<P> {
    rx: mpsc::UnboundedReceiver<P>,
    loss: Arc<Mutex<f64>>,
    rng: StdRng,
    stats: Arc<LinkStats>,
    pcap: Option<PcapWriter<BufWriter<File>>>,
}

#[async_trait]
impl<P: Packet + Send + Sync> Egress<P> for TapEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        loop {
            let packet = self.rx.recv().await?;
            let loss = self.loss.lock().map(|l| *l).unwrap_or(0.0);
            if loss > 0.0 && self.rng.gen::<f64>() < loss {
                self.stats.dropped(Reason::RandomLoss);
                continue;
            }
            let now = Instant::now();
            self.stats.delivered(
                packet.l3_length(),
                now.into_std(),
                packet.get_timestamp().into_std(),
            );
            if let Some(pcap) = self.pcap.as_mut() {
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let data = packet.as_slice();
                // A write error (disk full) stops the capture, never the link.
                if pcap
                    .write_packet(&PcapPacket::new(ts, data.len() as u32, data))
                    .is_err()
                {
                    tracing::warn!("pcap write failed; capture stopped for this link");
                    self.pcap = None;
                }
            }
            return Some(packet);
        }
    }
}

/// Changes the link's random loss while it runs.
pub struct TapControl {
    loss: Arc<Mutex<f64>>,
}

/// Run-time configuration of a [`LinkTap`].
#[derive(Debug, Clone, Copy)]
pub struct TapConfig {
    pub loss: f64,
}

impl ControlInterface for TapControl {
    type Config = TapConfig;
    fn set_config(&self, config: TapConfig) -> Result<(), RattanError> {
        if !(0.0..1.0).contains(&config.loss) {
            return Err(RattanError::ConfigError(format!(
                "loss {} is outside 0 to 1",
                config.loss
            )));
        }
        if let Ok(mut l) = self.loss.lock() {
            *l = config.loss;
        }
        Ok(())
    }
}

impl<P: Packet + Send + Sync> LinkTap<P> {
    pub fn new(
        loss: f64,
        seed: u64,
        stats: Arc<LinkStats>,
        pcap_path: Option<&Path>,
    ) -> Result<Self, NetemError> {
        let pcap = match pcap_path {
            Some(path) => {
                let file = File::create(path).map_err(|e| {
                    NetemError::setup(format!("creating the pcap file {}", path.display()), e)
                })?;
                let header = PcapHeader {
                    datalink: DataLink::ETHERNET,
                    snaplen: 65535,
                    ..Default::default()
                };
                Some(
                    PcapWriter::with_header(BufWriter::new(file), header).map_err(|e| {
                        NetemError::setup(
                            format!("writing the pcap header to {}", path.display()),
                            e,
                        )
                    })?,
                )
            }
            None => None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let loss = Arc::new(Mutex::new(loss));
        Ok(Self {
            ingress: Arc::new(TapIngress { tx }),
            egress: TapEgress {
                rx,
                loss: loss.clone(),
                rng: StdRng::seed_from_u64(seed),
                stats,
                pcap,
            },
            control: Arc::new(TapControl { loss }),
        })
    }
}

impl<P: Packet + Send + Sync> Cell<P> for LinkTap<P> {
    type IngressType = TapIngress<P>;
    type EgressType = TapEgress<P>;
    type ControlInterfaceType = TapControl;

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
