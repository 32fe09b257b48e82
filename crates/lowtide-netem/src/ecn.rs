//! The IPv4 header fields the AQMs read and change, in the Ethernet frames the emulator moves
//! (the IPv4 header starts at byte 14): the ECN field (CE marks), exact RDC's delay
//! notification, and a TCP segment's ports and SYN/ECE flags. The field encodings and the
//! checksum are [`lowtide_rdc_wire`]'s, shared with the RDC receiver agent.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use lowtide_rdc_wire as wire;

use crate::aqm::{FlowKey, TcpFlow};

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];

/// The IPv4 packet inside an Ethernet II frame.
fn ipv4(frame: &[u8]) -> Option<&[u8]> {
    (frame.len() > ETH_HEADER && frame[12..14] == ETHERTYPE_IPV4).then(|| &frame[ETH_HEADER..])
}

fn ipv4_mut(frame: &mut [u8]) -> Option<&mut [u8]> {
    (frame.len() > ETH_HEADER && frame[12..14] == ETHERTYPE_IPV4)
        .then(move || &mut frame[ETH_HEADER..])
}

/// Whether the packet declares itself ECN-capable (ECT(0), ECT(1) or already CE).
pub fn is_ecn_capable(frame: &[u8]) -> bool {
    ipv4(frame).is_some_and(|ip| wire::ecn(ip).is_ok_and(|e| e != wire::NOT_ECT))
}

/// Sets Congestion Experienced; returns false (and changes nothing) for a packet that is not
/// ECN-capable IPv4.
pub fn set_ce(frame: &mut [u8]) -> bool {
    if !is_ecn_capable(frame) {
        return false;
    }
    ipv4_mut(frame).is_some_and(|ip| wire::set_ecn(ip, wire::CE).is_ok())
}

/// The TCP connection of an IPv4 packet (None for other packets, non-first fragments and
/// headers too short to hold ports and flags).
pub fn tcp_flow(frame: &[u8]) -> Option<TcpFlow> {
    const TCP: u8 = 6;
    const SYN: u8 = 0x02;
    const ECE: u8 = 0x40;
    let ip = ipv4(frame)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let fragment_offset = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff;
    if ihl < 20 || *ip.get(9)? != TCP || fragment_offset != 0 {
        return None;
    }
    let tcp = ip.get(ihl..ihl + 14)?;
    let addr = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
    let port = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    let flags = tcp[13];
    Some(TcpFlow {
        key: FlowKey {
            src: SocketAddrV4::new(addr(12), port(0)),
            dst: SocketAddrV4::new(addr(16), port(2)),
        },
        ecn_setup: flags & SYN != 0 && flags & ECE != 0,
    })
}

/// A TCP segment's sequence number and payload length (None for other packets, non-first
/// fragments and truncated headers): what a drop log needs to tell a retransmission.
pub fn tcp_seq(frame: &[u8]) -> Option<(u32, u16)> {
    tcp_flow(frame)?;
    let ip = ipv4(frame)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let tcp = ip.get(ihl..ihl + 13)?;
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    let payload = total.saturating_sub(ihl + data_offset);
    Some((seq, u16::try_from(payload).unwrap_or(u16::MAX)))
}

/// Exact RDC: writes `max(D_in, delay)` into the packet; returns the delay written, or None
/// for a packet that cannot carry one (not IPv4, or not an atomic datagram).
pub fn stamp_rdc_delay(frame: &mut [u8], delay: Duration) -> Option<Duration> {
    wire::stamp_delay(ipv4_mut(frame)?, delay).ok()
}

/// Whether the packet carries an RDC agent's echo ([`wire::set_echo`]).
pub fn is_rdc_echo(frame: &[u8]) -> bool {
    ipv4(frame).is_some_and(wire::is_echo)
}

/// Removes the RDC flag (an echo read by the router); returns whether the header changed.
pub fn clear_rdc_flag(frame: &mut [u8]) -> bool {
    ipv4_mut(frame).is_some_and(|ip| wire::clear_delay(ip) == Ok(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Ethernet frame with a valid IPv4/TCP header (DF set), TOS given.
    fn frame(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4);
        let mut ip = vec![
            0x45, tos, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 1, 1, 1, 10, 2, 1, 1,
        ];
        let sum = wire::ipv4_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend(ip);
        f.extend([0u8; 20]);
        f
    }

    #[test]
    fn ect_packets_get_ce_and_a_valid_checksum() {
        let mut f = frame(0b10);
        assert!(is_ecn_capable(&f));
        assert!(set_ce(&mut f));
        assert_eq!(f[15] & 0b11, 0b11);
        assert_eq!(
            wire::ipv4_checksum(&f[14..34]),
            0,
            "a valid header sums to 0xffff"
        );
    }

    #[test]
    fn not_ect_packets_are_left_alone() {
        let mut f = frame(0);
        let before = f.clone();
        assert!(!is_ecn_capable(&f));
        assert!(!set_ce(&mut f));
        assert_eq!(f, before);
    }

    #[test]
    fn a_delay_stamp_is_written_into_the_frame() {
        let mut f = frame(0);
        assert_eq!(
            stamp_rdc_delay(&mut f, Duration::from_millis(7)),
            Some(Duration::from_millis(7))
        );
        assert_eq!(wire::delay(&f[14..]), Ok(Some(Duration::from_millis(7))));
        assert_eq!(wire::ipv4_checksum(&f[14..34]), 0);
        let mut arp = frame(0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(stamp_rdc_delay(&mut arp, Duration::ZERO), None);
    }

    #[test]
    fn tcp_flow_reads_ports_and_the_ecn_setup_flags() {
        let mut f = frame(0);
        f[34..38].copy_from_slice(&[0x9c, 0x40, 0x13, 0x88]); // 40000 -> 5000
        f[47] = 0x02 | 0x40 | 0x80; // SYN, ECE, CWR: an ECN-setup SYN
        let flow = tcp_flow(&f).unwrap();
        assert_eq!(flow.key.src, "10.1.1.1:40000".parse().unwrap());
        assert_eq!(flow.key.dst, "10.2.1.1:5000".parse().unwrap());
        assert!(flow.ecn_setup);
        f[47] = 0x02; // a SYN without ECN
        assert!(!tcp_flow(&f).unwrap().ecn_setup);
        f[47] = 0x10 | 0x40; // ECE on an ACK: an echo, not a setup
        assert!(!tcp_flow(&f).unwrap().ecn_setup);
        let mut udp = frame(0);
        udp[23] = 17;
        assert_eq!(tcp_flow(&udp), None);
        let mut fragment = frame(0);
        fragment[21] = 1; // offset 8 bytes: no TCP header here
        assert_eq!(tcp_flow(&fragment), None);
        assert_eq!(tcp_flow(&f[..40]), None, "too short for the flags");
    }

    #[test]
    fn tcp_seq_reads_the_sequence_number_and_payload_length() {
        let mut f = frame(0);
        f[38..42].copy_from_slice(&7_000_001u32.to_be_bytes());
        f[46] = 0x50; // a 20-byte TCP header
        assert_eq!(tcp_seq(&f), Some((7_000_001, 0)), "a pure ACK");
        f[16..18].copy_from_slice(&1040u16.to_be_bytes());
        assert_eq!(tcp_seq(&f), Some((7_000_001, 1000)));
        let mut udp = frame(0);
        udp[23] = 17;
        assert_eq!(tcp_seq(&udp), None);
        assert_eq!(tcp_seq(&f[..45]), None, "too short for the data offset");
    }

    #[test]
    fn an_echo_is_read_and_cleared_with_a_valid_checksum() {
        let mut f = frame(0);
        assert!(!is_rdc_echo(&f));
        wire::set_echo(&mut f[14..]).unwrap();
        assert!(is_rdc_echo(&f));
        assert!(clear_rdc_flag(&mut f));
        assert!(!is_rdc_echo(&f) && !clear_rdc_flag(&mut f));
        assert_eq!(wire::ipv4_checksum(&f[14..34]), 0);
    }

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = is_rdc_echo(&bytes);
            let _ = clear_rdc_flag(&mut bytes.clone());
            let _ = tcp_flow(&bytes);
            let _ = tcp_seq(&bytes);
            let capable = is_ecn_capable(&bytes);
            let changed = set_ce(&mut bytes);
            prop_assert_eq!(capable, changed);
            let _ = stamp_rdc_delay(&mut bytes, Duration::from_millis(1));
        }

        #[test]
        fn marking_keeps_the_checksum_valid(dscp in 0u8..64, ect in 1u8..4) {
            let mut f = frame(dscp << 2 | ect);
            prop_assert!(set_ce(&mut f));
            prop_assert_eq!(wire::ipv4_checksum(&f[14..34]), 0);
        }
    }
}
