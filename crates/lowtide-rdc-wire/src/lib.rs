//! What RDC changes in an IPv4 header, shared by the router (lowtide-netem's RDC cell writes
//! it) and the receiver agent (lowtide-rdc reads and removes it): the ECN field and the
//! exact-RDC delay notification. Functions take the IPv4 packet (header first) and fix the
//! header checksum after every change; TCP's checksum does not cover these fields.
//!
//! A crate of its own, below both: the emulator and the agent are two programs that speak this
//! format to each other, and neither should depend on the other for it (the agent brings
//! NFQUEUE and iptables, the emulator rattan and namespaces). lowtide-rdc re-exports it as
//! `lowtide_rdc::wire`.
//!
//! ## The exact-RDC delay notification
//!
//! Hsiao, Kung and Tan (Section 2.3) say there is "no natural place" for a multi-bit delay and
//! name the 16-bit IP ID field or an option. We use the ID field, flagged:
//!
//! | field | meaning |
//! | --- | --- |
//! | flags bit 0 (`0x8000` of bytes 6-7, RFC 791's reserved bit) | 1: the ID field carries a delay |
//! | Identification (bytes 4-5) | the delay, big-endian, in units of [`DELAY_UNIT`] (100 µs); `0xffff` means at least 6.5535 s |
//!
//! Only atomic datagrams carry it (DF set, MF clear, offset 0): RFC 6864 lets their ID be
//! anything, while a fragment's ID is needed for reassembly, so fragments and packets that may
//! be fragmented are never stamped. The flag tells a stamped ID from the sender's own: a router
//! reads `D_in` only when it is set (Eq. (2): `D_out = max(D_in, D_local)`), and the receiver
//! agent clears it before its kernel sees the packet. An option would have grown each packet
//! by 4 bytes past a full-size packet's MTU; the ID costs nothing in size.
//!
//! ## The receiver's echo ("this flow answers RDC")
//!
//! Not in the paper: the agent marks the ACKs it sends with the same flag and an ID of 0, i.e.
//! a delay notification of zero ([`set_echo`]). A router learns from it that the receiver of
//! the reverse flow runs an agent, so it may notify that flow and must delay the packets of
//! flows that do not answer (lowtide-netem's RDC cell, "TCP-friendliness" in docs/rdc.md).
//! Read as a notification, an echo says "no delay": an exact-RDC router on the ACKs' path
//! computes `max(0, D_local)` as always, and an agent at the other end imposes nothing. A
//! router that read it clears the flag ([`clear_delay`]); a host's Linux stack ignores the
//! reserved bit on receive (`ip_rcv` checks version, length and checksum, not the flag), so an
//! echo that reaches the sender is harmless. Limit: an echo looks like a zero delay stamped by
//! a router, so a router can tell the two apart only by direction (echoes travel on the ACK
//! path, stamps on the data path).

use std::time::Duration;

/// One unit of the delay notification.
pub const DELAY_UNIT: Duration = Duration::from_micros(100);
/// The largest delay the notification can carry (65535 units).
pub const MAX_NOTIFIED_DELAY: Duration = Duration::from_micros(100 * 0xffff);

/// The ECN codepoints (RFC 3168), the low two bits of the TOS byte.
pub const NOT_ECT: u8 = 0b00;
pub const ECT1: u8 = 0b01;
pub const ECT0: u8 = 0b10;
pub const CE: u8 = 0b11;

const RDC_FLAG: u8 = 0x80;
const DF: u8 = 0x40;
const MF: u8 = 0x20;

/// Why a header cannot carry or give a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("not a well-formed IPv4 header")]
    NotIpv4,
    /// A fragment, or a datagram that may be fragmented (DF clear): its ID is not ours.
    #[error("not an atomic datagram (DF clear, or a fragment)")]
    NotAtomic,
}

/// The header length of a well-formed IPv4 packet.
fn header_len(ip: &[u8]) -> Result<usize, WireError> {
    let first = *ip.first().ok_or(WireError::NotIpv4)?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || ip.len() < ihl {
        return Err(WireError::NotIpv4);
    }
    Ok(ihl)
}

/// Whether a well-formed IPv4 packet is an atomic datagram (DF set, not a fragment): one that
/// can carry a delay notification or an echo.
pub fn is_atomic_datagram(ip: &[u8]) -> bool {
    header_len(ip).is_ok() && is_atomic(ip)
}

fn is_atomic(ip: &[u8]) -> bool {
    ip[6] & DF != 0 && ip[6] & MF == 0 && ip[6] & 0x1f == 0 && ip[7] == 0
}

/// The Internet checksum (RFC 1071) of `header`, whose checksum field must be zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn refresh_checksum(ip: &mut [u8], ihl: usize) {
    ip[10] = 0;
    ip[11] = 0;
    let sum = ipv4_checksum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// The ECN codepoint of an IPv4 packet.
pub fn ecn(ip: &[u8]) -> Result<u8, WireError> {
    header_len(ip)?;
    Ok(ip[1] & CE)
}

/// Sets the ECN codepoint; returns whether the header changed.
pub fn set_ecn(ip: &mut [u8], codepoint: u8) -> Result<bool, WireError> {
    let ihl = header_len(ip)?;
    let tos = (ip[1] & !CE) | (codepoint & CE);
    if tos == ip[1] {
        return Ok(false);
    }
    ip[1] = tos;
    refresh_checksum(ip, ihl);
    Ok(true)
}

/// The delay an exact-RDC router wrote, `None` when the packet carries none.
pub fn delay(ip: &[u8]) -> Result<Option<Duration>, WireError> {
    header_len(ip)?;
    if ip[6] & RDC_FLAG == 0 {
        return Ok(None);
    }
    if !is_atomic(ip) {
        return Err(WireError::NotAtomic);
    }
    let units = u16::from_be_bytes([ip[4], ip[5]]);
    Ok(Some(DELAY_UNIT * u32::from(units)))
}

/// Eq. (2): writes `max(D_in, local)` (rounded to the nearest unit, saturating at
/// [`MAX_NOTIFIED_DELAY`]) and returns the delay written.
pub fn stamp_delay(ip: &mut [u8], local: Duration) -> Result<Duration, WireError> {
    let ihl = header_len(ip)?;
    if !is_atomic(ip) {
        return Err(WireError::NotAtomic);
    }
    let incoming = delay(ip)?.unwrap_or(Duration::ZERO);
    let units = (local.as_nanos() + DELAY_UNIT.as_nanos() / 2) / DELAY_UNIT.as_nanos();
    let local_units = units.min(0xffff) as u16;
    let out = (DELAY_UNIT * u32::from(local_units)).max(incoming);
    let out_units = (out.as_nanos() / DELAY_UNIT.as_nanos()) as u16;
    ip[4..6].copy_from_slice(&out_units.to_be_bytes());
    ip[6] |= RDC_FLAG;
    refresh_checksum(ip, ihl);
    Ok(out)
}

/// Removes the notification flag (the ID keeps the value: an atomic datagram's ID means
/// nothing); returns whether the header changed.
pub fn clear_delay(ip: &mut [u8]) -> Result<bool, WireError> {
    let ihl = header_len(ip)?;
    if ip[6] & RDC_FLAG == 0 {
        return Ok(false);
    }
    ip[6] &= !RDC_FLAG;
    refresh_checksum(ip, ihl);
    Ok(true)
}

/// Marks an outgoing packet of an RDC receiver as its echo (a zero delay notification, see the
/// module doc); only atomic datagrams can carry it.
pub fn set_echo(ip: &mut [u8]) -> Result<(), WireError> {
    let ihl = header_len(ip)?;
    if !is_atomic(ip) {
        return Err(WireError::NotAtomic);
    }
    ip[4] = 0;
    ip[5] = 0;
    ip[6] |= RDC_FLAG;
    refresh_checksum(ip, ihl);
    Ok(())
}

/// Whether a packet carries an echo: the flag with a zero delay, on an atomic datagram.
pub fn is_echo(ip: &[u8]) -> bool {
    delay(ip) == Ok(Some(Duration::ZERO))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A valid IPv4/TCP header (40 bytes, DF set), TOS given, checksum valid.
    pub(crate) fn packet(tos: u8) -> Vec<u8> {
        let mut ip = vec![
            0x45, tos, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 1, 1, 1, 10, 2, 1, 1,
        ];
        let sum = ipv4_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        ip.extend([0u8; 20]);
        ip
    }

    fn checksum_ok(ip: &[u8]) -> bool {
        ipv4_checksum(&ip[..20]) == 0
    }

    #[test]
    fn ecn_is_set_and_cleared_with_a_valid_checksum() {
        let mut p = packet(0b1011_1000 | ECT0);
        assert_eq!(ecn(&p), Ok(ECT0));
        assert_eq!(set_ecn(&mut p, CE), Ok(true));
        assert_eq!(ecn(&p), Ok(CE));
        assert_eq!(p[1] >> 2, 0b101110, "DSCP kept");
        assert!(checksum_ok(&p));
        assert_eq!(set_ecn(&mut p, ECT0), Ok(true));
        assert_eq!(set_ecn(&mut p, ECT0), Ok(false));
        assert!(checksum_ok(&p));
    }

    #[test]
    fn a_stamp_is_read_back_and_the_larger_delay_wins() {
        let mut p = packet(0);
        assert_eq!(delay(&p), Ok(None), "the sender's own ID is not a delay");
        let d = stamp_delay(&mut p, Duration::from_micros(12_340)).unwrap();
        assert_eq!(d, Duration::from_micros(12_300));
        assert_eq!(delay(&p), Ok(Some(Duration::from_micros(12_300))));
        assert!(checksum_ok(&p));
        // A second router with less delay keeps the first one's; with more, writes its own.
        assert_eq!(
            stamp_delay(&mut p, Duration::from_millis(2)),
            Ok(Duration::from_micros(12_300))
        );
        assert_eq!(
            stamp_delay(&mut p, Duration::from_millis(40)),
            Ok(Duration::from_millis(40))
        );
        assert_eq!(clear_delay(&mut p), Ok(true));
        assert_eq!(delay(&p), Ok(None));
        assert!(checksum_ok(&p));
    }

    #[test]
    fn delays_saturate_and_fragments_are_never_stamped() {
        let mut p = packet(0);
        assert_eq!(
            stamp_delay(&mut p, Duration::from_secs(100)),
            Ok(MAX_NOTIFIED_DELAY)
        );
        let mut frag = packet(0);
        frag[6] = 0x20; // MF, no DF
        assert_eq!(
            stamp_delay(&mut frag, Duration::ZERO),
            Err(WireError::NotAtomic)
        );
        // A flag on a non-atomic datagram is garbage, not a delay.
        frag[6] |= RDC_FLAG;
        assert_eq!(delay(&frag), Err(WireError::NotAtomic));
        assert_eq!(delay(&[0x60; 40]), Err(WireError::NotIpv4));
    }

    #[test]
    fn an_echo_is_a_zero_delay_that_a_router_clears() {
        let mut p = packet(0);
        assert!(!is_echo(&p));
        set_echo(&mut p).unwrap();
        assert!(is_echo(&p));
        assert_eq!(
            delay(&p),
            Ok(Some(Duration::ZERO)),
            "read as a notification: no delay"
        );
        assert!(checksum_ok(&p));
        // An exact-RDC router on the ACK path writes its own delay over it, as over any stamp.
        let mut stamped = p.clone();
        stamp_delay(&mut stamped, Duration::from_millis(3)).unwrap();
        assert!(!is_echo(&stamped));
        assert_eq!(clear_delay(&mut p), Ok(true));
        assert!(!is_echo(&p) && checksum_ok(&p));
        let mut frag = packet(0);
        frag[6] = 0x20;
        assert_eq!(set_echo(&mut frag), Err(WireError::NotAtomic));
        assert!(!is_echo(&frag));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = is_echo(&bytes);
            let _ = set_echo(&mut bytes.clone());
            let _ = ecn(&bytes);
            let _ = delay(&bytes);
            let _ = set_ecn(&mut bytes, CE);
            let _ = stamp_delay(&mut bytes, Duration::from_millis(3));
            let _ = clear_delay(&mut bytes);
        }

        #[test]
        fn stamping_keeps_the_checksum_valid(tos in any::<u8>(), us in 0u64..10_000_000) {
            let mut p = packet(tos);
            let d = stamp_delay(&mut p, Duration::from_micros(us)).unwrap();
            prop_assert!(checksum_ok(&p));
            prop_assert_eq!(delay(&p).unwrap(), Some(d));
            prop_assert!(clear_delay(&mut p).unwrap());
            prop_assert!(checksum_ok(&p));
        }
    }
}
