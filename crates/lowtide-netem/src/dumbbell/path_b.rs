//! Path B: each sender's second interface (10.3.i.1, its own veth into the emulator) and the
//! routes that send what leaves from that address out of it (see the module above).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rattan_env::{add_arp_entry_with_netns, add_route_with_netns, NetNs, VethPairBuilder};
use rtnetlink::packet_route::route::RouteScope;

use super::Dumbbell;
use crate::error::NetemError;

impl Dumbbell {
    /// Sender `i`'s interface on path B: 10.3.i.1, its own veth into the emulator.
    pub(super) fn second_interface(
        &mut self,
        id: &str,
        i: usize,
        host_ns: &Arc<NetNs>,
        emu: &Arc<NetNs>,
    ) -> Result<(Ipv4Addr, String), NetemError> {
        let device = format!("lt{id}s{i}bh");
        let pair = VethPairBuilder::new()
            .name(device.clone(), format!("lt{id}s{i}be"))
            .namespace(Some(host_ns.clone()), Some(emu.clone()))
            .mac_addr(path_b_mac(i, 1).into(), path_b_mac(i, 2).into())
            .ip_addr(
                (IpAddr::V4(path_b_addr(i, 1)), 32),
                (IpAddr::V4(path_b_addr(i, 2)), 32),
            )
            .build(i)
            .map_err(|e| {
                NetemError::setup(format!("creating the path B veth pair of sender {i}"), e)
            })?;
        self.veths_b.push(pair);
        Ok((path_b_addr(i, 1), device))
    }

    /// Path B's routes: each receiver reaches 10.3.i.1 through its one veth; each sender
    /// sends what leaves from 10.3.i.1 (or is bound to its second device) out of that device.
    pub(super) fn route_path_b(&self) -> Result<(), NetemError> {
        let receivers = &self.veths[self.senders.len()..];
        for (sender, b) in self.senders.iter().zip(&self.veths_b) {
            let (addr, device) = sender.path_b.clone().expect("a path B interface");
            for r in receivers {
                let dest = r.left.ip_addr.0.to_string();
                let mac = r.left.mac_addr.to_string();
                for args in [
                    vec!["route", "add", &dest, "dev", &device, "table", "100"],
                    vec!["route", "add", &dest, "dev", &device, "metric", "100"],
                    vec![
                        "neigh",
                        "replace",
                        &dest,
                        "lladdr",
                        &mac,
                        "dev",
                        &device,
                        "nud",
                        "permanent",
                    ],
                ] {
                    sender.ip(&args)?;
                }
                let what = || format!("routing {} to {addr}", r.left.name);
                let (ns, index) = (r.left.namespace.clone(), r.left.index);
                add_route_with_netns(
                    (IpAddr::V4(addr), 32),
                    None,
                    index,
                    ns.clone(),
                    RouteScope::Link,
                )
                .map_err(|e| NetemError::setup(what(), e))?;
                add_arp_entry_with_netns(IpAddr::V4(addr), b.left.mac_addr, index, ns)
                    .map_err(|e| NetemError::setup(what(), e))?;
            }
            let from = addr.to_string();
            sender.ip(&["rule", "add", "from", &from, "lookup", "100"])?;
            // Replies on path B come from receivers that path A also routes: no reverse-path
            // filter may drop them.
            for dev in ["all", "default", device.as_str()] {
                sender.sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
            }
        }
        Ok(())
    }
}

/// Sender `i`'s path B address (`end` 1) and the emulator's side of it (2).
pub(super) fn path_b_addr(i: usize, end: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 3, i as u8, end)
}

fn path_b_mac(i: usize, end: u8) -> [u8; 6] {
    [0x38, 0x7e, 0x58, 3, i as u8, end]
}

pub(super) fn path_b_cell_id(i: usize) -> String {
    format!("s{i}b")
}
