//! The IPv4 header fields the AQMs change, in the Ethernet frames the emulator moves (the
//! IPv4 header starts at byte 14): the ECN field (CE marks) and exact RDC's delay
//! notification. The field encodings and the checksum are [`lowtide_rdc::wire`]'s, shared
//! with the RDC receiver agent.

use std::time::Duration;

use lowtide_rdc::wire;

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

/// Exact RDC: writes `max(D_in, delay)` into the packet; returns the delay written, or None
/// for a packet that cannot carry one (not IPv4, or not an atomic datagram).
pub fn stamp_rdc_delay(frame: &mut [u8], delay: Duration) -> Option<Duration> {
    wire::stamp_delay(ipv4_mut(frame)?, delay).ok()
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

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
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
