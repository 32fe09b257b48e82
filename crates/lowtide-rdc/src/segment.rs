//! The TCP segment inside an IPv4 packet, as the agent needs it: addresses and ports, sequence
//! and acknowledgement numbers, flags, payload length, window, timestamps and whether SACK
//! blocks are present. Parsing never panics; anything else is an error the agent counts.

use std::net::SocketAddrV4;

use etherparse::{Ipv4HeaderSlice, TcpHeaderSlice, TcpOptionElement};

/// A parsed TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: u32,
    pub ack: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub has_ack: bool,
    pub window: u16,
    pub payload: u32,
    /// The timestamp option (TSval, TSecr), RFC 7323.
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks: the receiver holds data above a hole (RFC 2018).
    pub sack: bool,
}

impl Segment {
    /// A segment whose only news is an acknowledgement: no data, SYN, FIN or RST.
    pub fn is_pure_ack(&self) -> bool {
        self.has_ack && self.payload == 0 && !self.syn && !self.fin && !self.rst
    }
}

/// Why a packet is not a segment the agent works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Well-formed, but not TCP over IPv4 (the iptables rules should not queue these).
    #[error("not TCP over IPv4")]
    NotTcp,
    /// Truncated or inconsistent headers.
    #[error("malformed IPv4/TCP headers")]
    Malformed,
}

/// Parses the TCP segment of an IPv4 packet.
pub fn parse(ip: &[u8]) -> Result<Segment, ParseError> {
    let h = Ipv4HeaderSlice::from_slice(ip).map_err(|_| ParseError::Malformed)?;
    if h.protocol() != etherparse::IpNumber::TCP {
        return Err(ParseError::NotTcp);
    }
    if h.is_fragmenting_payload() {
        return Err(ParseError::NotTcp);
    }
    let ihl = h.slice().len();
    let total = usize::from(h.total_len());
    if total < ihl || total > ip.len() {
        return Err(ParseError::Malformed);
    }
    let tcp = TcpHeaderSlice::from_slice(&ip[ihl..total]).map_err(|_| ParseError::Malformed)?;
    let payload = (total - ihl - tcp.slice().len()) as u32;
    let mut timestamps = None;
    let mut sack = false;
    for option in tcp.options_iterator() {
        match option {
            Ok(TcpOptionElement::Timestamp(val, ecr)) => timestamps = Some((val, ecr)),
            Ok(TcpOptionElement::SelectiveAcknowledgement(..)) => sack = true,
            Ok(_) => {}
            Err(_) => return Err(ParseError::Malformed),
        }
    }
    Ok(Segment {
        src: SocketAddrV4::new(h.source_addr(), tcp.source_port()),
        dst: SocketAddrV4::new(h.destination_addr(), tcp.destination_port()),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        syn: tcp.syn(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        has_ack: tcp.ack(),
        window: tcp.window_size(),
        payload,
        timestamps,
        sack,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    /// What a test segment carries.
    #[derive(Clone, Copy)]
    pub(crate) struct Spec {
        pub src: ([u8; 4], u16),
        pub dst: ([u8; 4], u16),
        pub seq: u32,
        pub ack: u32,
        pub payload: usize,
        pub window: u16,
        pub ts: Option<(u32, u32)>,
        pub sack: Option<(u32, u32)>,
        pub syn: bool,
        pub fin: bool,
        pub ecn: u8,
    }

    impl Spec {
        /// Data from the sender 10.1.1.1:40000 to the receiver 10.2.1.1:5000.
        pub(crate) fn data(seq: u32, len: usize) -> Self {
            Spec {
                src: ([10, 1, 1, 1], 40000),
                dst: ([10, 2, 1, 1], 5000),
                seq,
                ack: 1,
                payload: len,
                window: 500,
                ts: None,
                sack: None,
                syn: false,
                fin: false,
                ecn: crate::wire::ECT0,
            }
        }

        /// An ACK from the receiver back to the sender.
        pub(crate) fn ack(ack: u32) -> Self {
            Spec {
                src: ([10, 2, 1, 1], 5000),
                dst: ([10, 1, 1, 1], 40000),
                seq: 1,
                ack,
                payload: 0,
                window: 1000,
                ts: None,
                sack: None,
                syn: false,
                fin: false,
                ecn: 0,
            }
        }

        pub(crate) fn build(&self) -> Vec<u8> {
            let mut tcp = PacketBuilder::ipv4(self.src.0, self.dst.0, 64)
                .tcp(self.src.1, self.dst.1, self.seq, self.window)
                .ack(self.ack);
            if self.syn {
                tcp = tcp.syn();
            }
            if self.fin {
                tcp = tcp.fin();
            }
            let mut options = vec![];
            if let Some((v, e)) = self.ts {
                options.push(TcpOptionElement::Timestamp(v, e));
            }
            if let Some(block) = self.sack {
                options.push(TcpOptionElement::SelectiveAcknowledgement(
                    block,
                    [None, None, None],
                ));
            }
            if !options.is_empty() {
                tcp = tcp.options(&options).expect("options fit");
            }
            let payload = vec![0u8; self.payload];
            let mut out = Vec::with_capacity(tcp.size(payload.len()));
            tcp.write(&mut out, &payload).expect("a valid packet");
            out[6] |= 0x40; // DF, as Linux TCP sends
            out[1] = (out[1] & !0b11) | self.ecn;
            out[10] = 0;
            out[11] = 0;
            let sum = crate::wire::ipv4_checksum(&out[..20]);
            out[10..12].copy_from_slice(&sum.to_be_bytes());
            out
        }
    }

    #[test]
    fn a_data_segment_and_an_ack_with_options() {
        let mut d = Spec::data(1000, 1448);
        d.ts = Some((77, 88));
        let s = parse(&d.build()).unwrap();
        assert_eq!(s.payload, 1448);
        assert_eq!(s.seq, 1000);
        assert_eq!(s.timestamps, Some((77, 88)));
        assert!(!s.is_pure_ack() && !s.sack);
        let mut a = Spec::ack(2448);
        a.sack = Some((5000, 6448));
        let s = parse(&a.build()).unwrap();
        assert!(s.is_pure_ack() && s.sack);
        assert_eq!(s.ack, 2448);
        assert_eq!(s.src.port(), 5000);
    }

    #[test]
    fn truncated_and_foreign_packets_are_errors() {
        let p = Spec::data(1, 100).build();
        assert_eq!(parse(&p[..30]), Err(ParseError::Malformed));
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(parse(&udp), Err(ParseError::NotTcp));
        assert_eq!(parse(&[]), Err(ParseError::Malformed));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn corrupting_a_valid_packet_never_panics(at in 0usize..80, byte in any::<u8>()) {
            let mut p = Spec::data(1, 40).build();
            p[at] = byte;
            let _ = parse(&p);
        }
    }
}
