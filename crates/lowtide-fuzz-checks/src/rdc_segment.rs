//! The RDC agent's packet parsing (lowtide-rdc's `segment::parse` and `wire`), fed by NFQUEUE
//! with whatever arrives on a real host's interface, and the agent behind it.
//!
//! Input: byte 0 even: the rest is one packet as it is. Odd: the rest describes up to 16
//! packets built with etherparse (IPv4 or IPv6; TCP options: timestamps, SACK, MSS, window
//! scale, no-ops; IPv4 options; ECN, DF/MF and fragment offset, an RDC delay stamp), each
//! perhaps cut short or with two bytes overwritten, each going in or out of an agent at an
//! advancing time. Every packet, built or not, must satisfy:
//! - `parse` never panics; a packet it accepts is IPv4/TCP, not a fragment, and its fields
//!   are the bytes at their places (payload = total length − IP header − TCP header);
//!   an IPv6 packet is refused (the agent handles IPv4 only), and so are the `wire`
//!   functions;
//! - stamping a delay (Eq. (2): the larger of the one there and ours, within 16 bits) keeps
//!   the header checksum valid, changes nothing but ID, flag and checksum, reads back, parses
//!   as the packet did, and clears; so do ECN edits and the echo.
//!
//! A built packet that was not cut or overwritten parses to exactly what it was built from.
//! The agent: fewer packets held than `max_held`, every outgoing packet released exactly once
//! (NFQUEUE needs a verdict for each), and a flow's packets released in the order they came.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use etherparse::{PacketBuilder, TcpOptionElement};
use lowtide_rdc::segment::{self, ParseError, Segment};
use lowtide_rdc::{wire, Agent, AgentConfig, FlowKey};

pub fn check(data: &[u8]) {
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    if how & 1 == 0 {
        check_bytes(rest, Duration::from_micros(u64::from(how) * 997));
        return;
    }
    let mut u = Unstructured::new(rest);
    let Ok(cfg) = agent_config(&mut u) else {
        return;
    };
    let mut packets = Vec::new();
    while !u.is_empty() && packets.len() < 16 {
        match Built::arbitrary(&mut u) {
            Ok(b) => packets.push(b),
            Err(_) => break,
        }
    }
    drive_agent(cfg, &packets);
}

/// What must hold for any bytes handed over as a packet; `local` is a router's queueing delay.
fn check_bytes(ip: &[u8], local: Duration) {
    let parsed = segment::parse(ip);
    if let Ok(s) = &parsed {
        check_fields(ip, s);
    }
    if ip.first().is_some_and(|b| b >> 4 == 6) {
        assert!(parsed.is_err(), "an IPv6 packet parsed");
        assert_eq!(wire::delay(ip), Err(wire::WireError::NotIpv4));
    }
    let delay = wire::delay(ip);
    let ecn = wire::ecn(ip);
    assert_eq!(ecn.is_ok(), header_len(ip).is_some());
    let Some(ihl) = header_len(ip) else {
        return;
    };

    let mut stamped = ip.to_vec();
    match wire::stamp_delay(&mut stamped, local) {
        Ok(out) => {
            assert!(wire::is_atomic_datagram(ip));
            let before = delay
                .expect("an atomic datagram's delay reads")
                .unwrap_or_default();
            let ours = (local.as_nanos() + 50_000) / 100_000;
            let ours = wire::DELAY_UNIT * ours.min(0xffff) as u32;
            assert_eq!(out, ours.max(before), "Eq. (2)");
            assert!(out <= wire::MAX_NOTIFIED_DELAY);
            assert_eq!(wire::delay(&stamped), Ok(Some(out)));
            assert_checksum(&stamped, ihl);
            assert_only_changed(ip, &stamped, &[4, 5, 6, 10, 11]);
            assert_eq!(
                segment::parse(&stamped),
                parsed,
                "a stamp changes what the agent reads"
            );
            assert_eq!(wire::clear_delay(&mut stamped), Ok(true));
            assert_eq!(wire::delay(&stamped), Ok(None));
            assert_checksum(&stamped, ihl);
            let mut echo = ip.to_vec();
            assert_eq!(wire::set_echo(&mut echo), Ok(()));
            assert!(wire::is_echo(&echo));
            assert_checksum(&echo, ihl);
        }
        Err(e) => {
            assert_eq!(e, wire::WireError::NotAtomic);
            assert!(!wire::is_atomic_datagram(ip));
            assert_eq!(stamped, ip, "a refused stamp changed the packet");
        }
    }

    let mut marked = ip.to_vec();
    let changed = wire::set_ecn(&mut marked, wire::CE).expect("a header that has an ECN field");
    assert_eq!(changed, ecn != Ok(wire::CE));
    assert_eq!(wire::ecn(&marked), Ok(wire::CE));
    assert_only_changed(ip, &marked, &[1, 10, 11]);
    if changed {
        assert_checksum(&marked, ihl);
    }
    assert_eq!(segment::parse(&marked), parsed);
}

/// A parsed segment's fields are the bytes at their places.
fn check_fields(ip: &[u8], s: &Segment) {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    assert_eq!(ip[0] >> 4, 4);
    assert_eq!(ip[9], 6, "not TCP");
    assert_eq!(ip[6] & 0x3f, 0, "a fragment (MF or an offset)");
    assert_eq!(ip[7], 0, "a fragment (an offset)");
    let total = usize::from(be16(&ip[2..]));
    assert!(total <= ip.len());
    let tcp = &ip[ihl..total];
    let doff = usize::from(tcp[12] >> 4) * 4;
    assert!((20..=tcp.len()).contains(&doff));
    assert_eq!(s.payload as usize, tcp.len() - doff);
    let addr = |at: &[u8]| Ipv4Addr::new(at[0], at[1], at[2], at[3]);
    assert_eq!(s.src, SocketAddrV4::new(addr(&ip[12..]), be16(tcp)));
    assert_eq!(s.dst, SocketAddrV4::new(addr(&ip[16..]), be16(&tcp[2..])));
    assert_eq!(s.seq, be32(&tcp[4..]));
    assert_eq!(s.ack, be32(&tcp[8..]));
    let flags = tcp[13];
    assert_eq!(
        (s.fin, s.syn, s.rst, s.has_ack),
        (
            flags & 1 != 0,
            flags & 2 != 0,
            flags & 4 != 0,
            flags & 0x10 != 0
        )
    );
    assert_eq!(s.window, be16(&tcp[14..]));
}

fn header_len(ip: &[u8]) -> Option<usize> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    (ip[0] >> 4 == 4 && ihl >= 20 && ip.len() >= ihl).then_some(ihl)
}

fn assert_checksum(ip: &[u8], ihl: usize) {
    assert_eq!(wire::ipv4_checksum(&ip[..ihl]), 0, "header checksum");
}

fn assert_only_changed(before: &[u8], after: &[u8], allowed: &[usize]) {
    assert_eq!(before.len(), after.len());
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        assert!(a == b || allowed.contains(&i), "byte {i} changed");
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn agent_config(u: &mut Unstructured<'_>) -> Result<AgentConfig> {
    let flags: u8 = u.arbitrary()?;
    let mut cfg = if flags & 1 == 0 {
        AgentConfig::default()
    } else {
        AgentConfig::exact()
    };
    // Small tables, so the fail-open paths (flow table and hold full) are reached.
    cfg.max_flows = usize::from(flags >> 1 & 3) + 1;
    cfg.max_held = usize::from(flags >> 3 & 7) + 1;
    cfg.echo = flags & 0x40 != 0;
    Ok(cfg)
}

/// One packet: its fields, the damage done to it, and when and which way it passes.
#[derive(Debug)]
struct Built {
    v6: bool,
    /// Into the host (data from a sender) or out of it (the receiver's ACK).
    incoming: bool,
    /// Which of four senders and four receiver ports.
    peer: u8,
    seq: u32,
    ack: u32,
    /// TCP flags: FIN, SYN, RST, PSH, ACK as on the wire.
    flags: u8,
    window: u16,
    options: Vec<TcpOptionElement>,
    /// 4-byte words of IPv4 options (no-ops and an end).
    ip_option_words: u8,
    payload: u16,
    /// ECN, DF, MF, fragment offset.
    ecn: u8,
    df: bool,
    mf: bool,
    offset: u16,
    /// An exact-RDC router's stamp: (units of 100 µs).
    stamp: Option<u16>,
    protocol: Option<u8>,
    cut: Option<u16>,
    overwrite: Vec<(u16, u8)>,
    advance_ms: u8,
}

impl Built {
    fn arbitrary(u: &mut Unstructured<'_>) -> Result<Built> {
        let shape: u16 = u.arbitrary()?;
        let mut options = Vec::new();
        for _ in 0..(shape & 3) {
            options.push(match u.int_in_range(0u8..=5)? {
                0 => TcpOptionElement::Timestamp(u.arbitrary()?, u.arbitrary()?),
                1 => TcpOptionElement::SelectiveAcknowledgement(
                    (u.arbitrary()?, u.arbitrary()?),
                    [None, None, None],
                ),
                2 => TcpOptionElement::MaximumSegmentSize(u.arbitrary()?),
                3 => TcpOptionElement::WindowScale(u.arbitrary()?),
                4 => TcpOptionElement::SelectiveAcknowledgementPermitted,
                _ => TcpOptionElement::Noop,
            });
        }
        Ok(Built {
            v6: shape & 0x3c == 0x3c,
            incoming: shape & 0x40 != 0,
            peer: u.arbitrary()?,
            seq: u.arbitrary()?,
            ack: u.arbitrary()?,
            flags: u.arbitrary()?,
            window: u.arbitrary()?,
            options,
            ip_option_words: (shape >> 7 & 3) as u8 * 3,
            payload: u.int_in_range(0..=1500)?,
            ecn: (shape >> 9 & 3) as u8,
            df: shape & 0x800 == 0,
            mf: shape & 0x1000 != 0 && u.arbitrary()?,
            offset: if shape & 0x2000 != 0 && u.arbitrary()? {
                u.int_in_range(1..=0x1fff)?
            } else {
                0
            },
            stamp: if shape & 0x4000 != 0 {
                Some(u.arbitrary()?)
            } else {
                None
            },
            protocol: if u.ratio(1, 16)? {
                Some(u.arbitrary()?)
            } else {
                None
            },
            cut: if shape & 0x8000 != 0 {
                Some(u.arbitrary()?)
            } else {
                None
            },
            overwrite: if u.ratio(1, 8)? {
                vec![
                    (u.arbitrary()?, u.arbitrary()?),
                    (u.arbitrary()?, u.arbitrary()?),
                ]
            } else {
                Vec::new()
            },
            advance_ms: u.arbitrary()?,
        })
    }

    /// Whether the TCP options fit the header's 40 bytes (else the packet goes without).
    fn options_fit(&self) -> bool {
        self.options.iter().map(option_len).sum::<usize>() <= 40
    }

    fn sender(&self) -> ([u8; 4], u16) {
        (
            [10, 1, 1, 1 + (self.peer & 3)],
            40000 + u16::from(self.peer >> 2 & 3),
        )
    }

    fn receiver(&self) -> ([u8; 4], u16) {
        ([10, 2, 1, 1], 5000 + u16::from(self.peer >> 4 & 1))
    }

    /// The packet's bytes, and whether it is undamaged IPv4/TCP the agent reads.
    fn bytes(&self) -> (Vec<u8>, bool) {
        let ((src, sport), (dst, dport)) = if self.incoming {
            (self.sender(), self.receiver())
        } else {
            (self.receiver(), self.sender())
        };
        let ip = if self.v6 {
            let v6 = |a: [u8; 4]| {
                let mut b = [0u8; 16];
                b[..2].copy_from_slice(&[0xfd, 0]);
                b[12..].copy_from_slice(&a);
                b
            };
            PacketBuilder::ipv6(v6(src), v6(dst), 64)
        } else {
            PacketBuilder::ipv4(src, dst, 64)
        };
        let mut tcp = ip.tcp(sport, dport, self.seq, self.window);
        // The builder sets ACK with the number; the rest as given.
        if self.flags & 0x10 != 0 {
            tcp = tcp.ack(self.ack);
        }
        for (bit, set) in [(1, 0), (2, 1), (4, 2), (8, 3)] {
            if self.flags & bit != 0 {
                tcp = match set {
                    0 => tcp.fin(),
                    1 => tcp.syn(),
                    2 => tcp.rst(),
                    _ => tcp.psh(),
                };
            }
        }
        if self.options_fit() {
            tcp = tcp.options(&self.options).expect("40 bytes of options fit");
        }
        let payload = vec![0xa5; usize::from(self.payload)];
        let mut out = Vec::new();
        tcp.write(&mut out, &payload)
            .expect("a packet the builder made");
        if self.v6 {
            return (out, false);
        }
        if self.ip_option_words > 0 {
            let n = usize::from(self.ip_option_words) * 4;
            let mut opts = vec![1u8; n];
            opts[n - 1] = 0;
            out.splice(20..20, opts);
            out[0] = 0x40 | (5 + self.ip_option_words);
            let total = (out.len() as u16).to_be_bytes();
            out[2..4].copy_from_slice(&total);
        }
        out[1] = (out[1] & !3) | self.ecn;
        let frag = self.offset.to_be_bytes();
        out[6] = u8::from(self.df) << 6 | u8::from(self.mf) << 5 | frag[0] & 0x1f;
        out[7] = frag[1];
        if let Some(p) = self.protocol {
            out[9] = p;
        }
        if let Some(units) = self.stamp {
            out[4..6].copy_from_slice(&units.to_be_bytes());
            out[6] |= 0x80;
        }
        let ihl = usize::from(out[0] & 0x0f) * 4;
        out[10..12].fill(0);
        let sum = wire::ipv4_checksum(&out[..ihl]);
        out[10..12].copy_from_slice(&sum.to_be_bytes());
        let mut whole = self.protocol.is_none_or(|p| p == 6) && !self.mf && self.offset == 0;
        if let Some(cut) = self.cut {
            let cut = usize::from(cut) % (out.len() + 1);
            whole &= cut == out.len();
            out.truncate(cut);
        }
        for &(at, byte) in &self.overwrite {
            if let Some(b) = out.get_mut(usize::from(at)) {
                whole &= *b == byte;
                *b = byte;
            }
        }
        (out, whole)
    }

    /// A whole packet parses to what it was built from.
    fn check_parsed(&self, parsed: &std::result::Result<Segment, ParseError>) {
        let s = parsed.as_ref().expect("a whole IPv4/TCP packet parses");
        let ((src, sport), (dst, dport)) = if self.incoming {
            (self.sender(), self.receiver())
        } else {
            (self.receiver(), self.sender())
        };
        assert_eq!(s.src, SocketAddrV4::new(src.into(), sport));
        assert_eq!(s.dst, SocketAddrV4::new(dst.into(), dport));
        assert_eq!(s.seq, self.seq);
        assert_eq!(s.payload, u32::from(self.payload));
        assert_eq!(s.window, self.window);
        assert_eq!(s.has_ack, self.flags & 0x10 != 0);
        if s.has_ack {
            assert_eq!(s.ack, self.ack);
        }
        assert_eq!(
            (s.fin, s.syn, s.rst),
            (
                self.flags & 1 != 0,
                self.flags & 2 != 0,
                self.flags & 4 != 0
            )
        );
        let options: &[TcpOptionElement] = if self.options_fit() {
            &self.options
        } else {
            &[]
        };
        let ts = options.iter().rev().find_map(|o| match o {
            TcpOptionElement::Timestamp(v, e) => Some((*v, *e)),
            _ => None,
        });
        assert_eq!(s.timestamps, ts);
        let sack = options
            .iter()
            .any(|o| matches!(o, TcpOptionElement::SelectiveAcknowledgement(..)));
        assert_eq!(s.sack, sack);
    }
}

fn option_len(o: &TcpOptionElement) -> usize {
    match o {
        TcpOptionElement::Noop => 1,
        TcpOptionElement::MaximumSegmentSize(_) => 4,
        TcpOptionElement::WindowScale(_) => 3,
        TcpOptionElement::SelectiveAcknowledgementPermitted => 2,
        TcpOptionElement::SelectiveAcknowledgement(..) => 10,
        TcpOptionElement::Timestamp(..) => 10,
    }
}

fn drive_agent(cfg: AgentConfig, packets: &[Built]) {
    let max_held = cfg.max_held;
    let mut agent: Agent<usize> = Agent::new(cfg).expect("a valid config");
    let t0 = Instant::now();
    let mut now = t0;
    // Handle → the flow it belongs to (None: not a segment of a flow).
    let mut sent: Vec<Option<FlowKey>> = Vec::new();
    let mut released = vec![false; packets.len()];
    let mut last_of_flow: HashMap<FlowKey, usize> = HashMap::new();
    for b in packets {
        now += Duration::from_millis(u64::from(b.advance_ms));
        while agent.poll_timeout().is_some_and(|t| t <= now) {
            agent.handle_timeout(now);
        }
        let (mut ip, whole) = b.bytes();
        let parsed = segment::parse(&ip);
        if whole {
            b.check_parsed(&parsed);
        }
        check_bytes(&ip, Duration::from_micros(u64::from(b.window)));
        if b.incoming {
            let rewrite = agent.handle_incoming(now, &ip);
            if !rewrite.is_empty() {
                rewrite
                    .apply(&mut ip)
                    .expect("edits to a packet the agent read");
                if rewrite.clear_ce {
                    assert_eq!(wire::ecn(&ip), Ok(wire::ECT0));
                }
                if rewrite.clear_delay {
                    assert_eq!(wire::delay(&ip), Ok(None));
                }
                assert_checksum(&ip, header_len(&ip).expect("a header"));
                assert_eq!(segment::parse(&ip), parsed);
            }
            sent.push(None);
            released[sent.len() - 1] = true;
        } else {
            let key = parsed.as_ref().ok().map(|s| FlowKey {
                local: s.src,
                remote: s.dst,
            });
            let _ = agent.wants_echo(&parsed, &ip);
            sent.push(key);
            agent.handle_outgoing(now, parsed, sent.len() - 1);
        }
        drain(&mut agent, &sent, &mut released, &mut last_of_flow);
        assert!(agent.held_now() <= max_held);
    }
    agent.release_all(now);
    drain(&mut agent, &sent, &mut released, &mut last_of_flow);
    assert_eq!(agent.held_now(), 0);
    assert!(released.iter().all(|&r| r), "a packet never released");
}

/// Takes every released packet: each once, a flow's in the order they came.
fn drain(
    agent: &mut Agent<usize>,
    sent: &[Option<FlowKey>],
    released: &mut [bool],
    last_of_flow: &mut HashMap<FlowKey, usize>,
) {
    while let Some(h) = agent.poll_release() {
        assert!(
            !std::mem::replace(&mut released[h], true),
            "packet {h} released twice"
        );
        if let Some(key) = sent[h] {
            if let Some(prev) = last_of_flow.insert(key, h) {
                assert!(prev < h, "packet {h} overtook {prev} of its flow");
            }
        }
    }
}
