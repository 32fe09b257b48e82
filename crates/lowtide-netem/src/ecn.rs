//! Reading and setting the ECN field of IPv4 packets inside Ethernet frames, in place.
//!
//! The emulator moves whole Ethernet II frames (from AF_PACKET); the IPv4 header starts at
//! byte 14. Setting CE changes the TOS byte, so the header checksum is recomputed.

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const CE: u8 = 0b11;

/// The IPv4 header of a frame, if it has a well-formed one.
fn ipv4_header(frame: &[u8]) -> Option<std::ops::Range<usize>> {
    if frame.len() < ETH_HEADER + 20 || frame[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    let version_ihl = frame[ETH_HEADER];
    let ihl = (version_ihl & 0x0f) as usize * 4;
    if version_ihl >> 4 != 4 || ihl < 20 || frame.len() < ETH_HEADER + ihl {
        return None;
    }
    Some(ETH_HEADER..ETH_HEADER + ihl)
}

/// Whether the packet declares itself ECN-capable (ECT(0), ECT(1) or already CE).
pub fn is_ecn_capable(frame: &[u8]) -> bool {
    ipv4_header(frame).is_some_and(|h| frame[h.start + 1] & CE != 0)
}

/// Sets Congestion Experienced; returns false (and changes nothing) for a packet that is not
/// ECN-capable IPv4.
pub fn set_ce(frame: &mut [u8]) -> bool {
    let Some(h) = ipv4_header(frame) else {
        return false;
    };
    if frame[h.start + 1] & CE == 0 {
        return false;
    }
    frame[h.start + 1] |= CE;
    frame[h.start + 10] = 0;
    frame[h.start + 11] = 0;
    let sum = checksum(&frame[h.clone()]);
    frame[h.start + 10..h.start + 12].copy_from_slice(&sum.to_be_bytes());
    true
}

/// The Internet checksum (RFC 1071) of a header whose checksum field is zero.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An Ethernet frame with a valid IPv4/TCP header, TOS given.
    fn frame(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4);
        let mut ip = vec![
            0x45, tos, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 1, 1, 1, 10, 2, 1, 1,
        ];
        let sum = checksum(&ip);
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
        assert_eq!(checksum(&f[14..34]), 0, "a valid header sums to 0xffff");
    }

    #[test]
    fn not_ect_packets_are_left_alone() {
        let mut f = frame(0);
        let before = f.clone();
        assert!(!is_ecn_capable(&f));
        assert!(!set_ce(&mut f));
        assert_eq!(f, before);
    }

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let capable = is_ecn_capable(&bytes);
            let changed = set_ce(&mut bytes);
            prop_assert_eq!(capable, changed);
        }

        #[test]
        fn marking_keeps_the_checksum_valid(dscp in 0u8..64, ect in 1u8..4) {
            let mut f = frame(dscp << 2 | ect);
            prop_assert!(set_ce(&mut f));
            prop_assert_eq!(checksum(&f[14..34]), 0);
        }
    }
}
