//! The datagram format (one packet per UDP datagram). `docs/tfrc.md` has the table.
//!
//! Byte 0 is `0x10 | type` (version 1 in the high nibble); every field after it is a LEB128
//! varint as in lowtide's TCP wire format. Data packets carry RFC 5348 §3.2.1's sender fields
//! (sequence number, timestamp, the sender's RTT estimate), then one or more [`Piece`]s, each a
//! lowtide message or a fragment of one with its own length: the sender packs several small
//! messages (or a message's tail and the next one's head) into one datagram. Feedback packets
//! carry §3.2.2's receiver fields.
//!
//! Parsing never panics and never allocates for the peer: a truncated packet, an unknown type,
//! an overlong varint or a field out of range is a [`DecodeError`] naming the field.

use lowtide_proto::wire::{probe_pad_len, varint};

/// Version 1 in the high nibble of byte 0.
const VERSION_NIBBLE: u8 = 0x10;
/// `p` travels as parts per billion.
pub const P_SCALE: f64 = 1e9;
/// Largest receive rate a feedback packet may report, bytes per second (100 Gbit/s).
pub const MAX_REPORTED_RATE: u64 = 12_500_000_000;
/// Largest probe padding, bytes.
pub const MAX_PROBE_PAD: u64 = 65_507;

/// Why a datagram could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The datagram ends inside a field.
    #[error("truncated packet: {0} missing")]
    Truncated(&'static str),
    /// Byte 0 names no packet type of version 1.
    #[error("unknown packet type byte {0:#04x}")]
    UnknownType(u8),
    /// A varint is longer than 64 bits.
    #[error("varint longer than 64 bits in `{0}`")]
    VarintOverflow(&'static str),
    /// A field holds a value outside its range.
    #[error("field `{field}` = {value} out of range (at most {max})")]
    FieldOutOfRange {
        /// Field name as in `docs/tfrc.md`.
        field: &'static str,
        /// Value received.
        value: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A fragment does not fit its message.
    #[error("fragment at offset {offset} with {len} bytes exceeds the message's {total} bytes")]
    FragmentPastEnd {
        /// Offset.
        offset: u64,
        /// Payload bytes.
        len: u64,
        /// Message length.
        total: u64,
    },
}

/// The sender's fields of a data packet (RFC 5348 §3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Packet sequence number (+1 per data packet).
    pub seq: u64,
    /// Sender clock at sending, µs since its epoch.
    pub timestamp_us: u64,
    /// The sender's RTT estimate, µs (0 before it has one).
    pub rtt_us: u64,
}

/// One piece of a lowtide message in a data packet: a whole message, or one fragment of it.
/// A packet carries one or more pieces; a message's pieces travel in consecutive packets,
/// one piece per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// Message sequence number (+1 per message).
    pub msg: u64,
    /// Message importance.
    pub importance: u8,
    /// Sender clock when the message was queued, µs since its epoch.
    pub msg_time_us: u64,
    /// Message length, bytes.
    pub total_len: u64,
    /// Offset of this piece in the message.
    pub offset: u64,
    /// Index of this piece; the message's pieces are in consecutive packets, so its first
    /// is in packet `seq − frag_index`.
    pub frag_index: u64,
    /// Number of pieces (packets) of the message.
    pub frag_count: u64,
    /// The bytes.
    pub payload: &'a [u8],
}

impl Piece<'_> {
    /// Bytes this piece takes in a datagram.
    pub fn encoded_len(&self) -> usize {
        piece_header_len(self) + varint::len(self.payload.len() as u64) + self.payload.len()
    }

    /// Appends the piece.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in self.header_fields() {
            varint::put(out, v);
        }
        varint::put(out, self.payload.len() as u64);
        out.extend_from_slice(self.payload);
    }

    /// The fields before the length, in wire order ([`read_piece`] reads them).
    fn header_fields(&self) -> [u64; 7] {
        [
            self.msg,
            u64::from(self.importance),
            self.msg_time_us,
            self.total_len,
            self.offset,
            self.frag_count,
            self.frag_index,
        ]
    }
}

/// Appends a data packet: header and pieces.
pub fn encode_data(out: &mut Vec<u8>, h: &DataHeader, pieces: &[Piece<'_>]) {
    encode_data_header(out, h);
    for piece in pieces {
        piece.encode(out);
    }
}

/// Bytes of a piece's fields before its length field.
pub fn piece_header_len(p: &Piece<'_>) -> usize {
    p.header_fields().into_iter().map(varint::len).sum()
}

/// The pieces of a data packet, checked by [`Packet::decode`]; iterate for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces<'a> {
    seq: u64,
    bytes: &'a [u8],
    max_message: u64,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;
    fn next(&mut self) -> Option<Piece<'a>> {
        if self.bytes.is_empty() {
            return None;
        }
        let mut r = Reader {
            buf: self.bytes,
            pos: 0,
        };
        // checked when decoded: an error here cannot happen, and ends the iteration
        let piece = read_piece(&mut r, self.seq, self.max_message).ok()?;
        self.bytes = &self.bytes[r.pos..];
        Some(piece)
    }
}

/// The receiver's report (RFC 5348 §3.2.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    /// `t_recvdata`: timestamp of the last data packet received, echoed.
    pub echo_us: u64,
    /// `t_delay`: time between receiving that packet and sending this report, µs.
    pub delay_us: u64,
    /// `X_recv`: rate at which data arrived since the last report, bytes per second.
    pub x_recv: u64,
    /// `p`: loss event rate.
    pub p: f64,
    /// Loss events the receiver has counted (a new one means "new loss event").
    pub loss_events: u64,
}

/// One datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Packet<'a> {
    /// Data: header and the message pieces (at least one).
    Data(DataHeader, Pieces<'a>),
    /// Receiver report.
    Feedback(Feedback),
    /// One packet of a packet-pair probe.
    Probe {
        /// Probe id.
        id: u64,
        /// 0 or 1.
        index: u8,
        /// Padding bytes (content ignored).
        pad_len: u64,
    },
    /// The answer to a probe pair.
    ProbeReport {
        /// Probe id.
        id: u64,
        /// Time between the two arrivals, µs.
        dispersion_us: u64,
        /// Length of the second probe datagram, bytes.
        second_len: u64,
    },
    /// The sender ends the session.
    Close {
        /// Close code (0: normal).
        code: u64,
    },
}

const DATA: u8 = 1;
const FEEDBACK: u8 = 2;
const PROBE: u8 = 3;
const PROBE_REPORT: u8 = 4;
const CLOSE: u8 = 5;

/// Longest data packet header (type, sequence number, timestamp, RTT), bytes.
pub const MAX_PACKET_HEADER: usize = 1 + 3 * varint::MAX_LEN;
/// Longest piece header (seven fields and the length), bytes.
pub const MAX_PIECE_HEADER: usize = 8 * varint::MAX_LEN;
/// Longest header of a data packet carrying one piece, bytes.
pub const MAX_DATA_HEADER: usize = MAX_PACKET_HEADER + MAX_PIECE_HEADER;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn var(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        match varint::get(&self.buf[self.pos..]) {
            Ok(Some((v, n))) => {
                self.pos += n;
                Ok(v)
            }
            Ok(None) => Err(DecodeError::Truncated(field)),
            Err(_) => Err(DecodeError::VarintOverflow(field)),
        }
    }
    fn var_max(&mut self, field: &'static str, max: u64) -> Result<u64, DecodeError> {
        let value = self.var(field)?;
        if value > max {
            return Err(DecodeError::FieldOutOfRange { field, value, max });
        }
        Ok(value)
    }
}

impl<'a> Packet<'a> {
    /// Appends the datagram to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Packet::Data(ref h, pieces) => {
                encode_data_header(out, h);
                for piece in pieces {
                    piece.encode(out);
                }
            }
            Packet::Feedback(f) => {
                out.push(VERSION_NIBBLE | FEEDBACK);
                varint::put(out, f.echo_us);
                varint::put(out, f.delay_us);
                varint::put(out, f.x_recv);
                varint::put(out, (f.p.clamp(0.0, 1.0) * P_SCALE).round() as u64);
                varint::put(out, f.loss_events);
            }
            Packet::Probe { id, index, pad_len } => {
                out.push(VERSION_NIBBLE | PROBE);
                varint::put(out, id);
                varint::put(out, u64::from(index));
                let pad = pad_len.min(MAX_PROBE_PAD);
                varint::put(out, pad);
                out.resize(out.len() + pad as usize, 0);
            }
            Packet::ProbeReport {
                id,
                dispersion_us,
                second_len,
            } => {
                out.push(VERSION_NIBBLE | PROBE_REPORT);
                varint::put(out, id);
                varint::put(out, dispersion_us);
                varint::put(out, second_len);
            }
            Packet::Close { code } => {
                out.push(VERSION_NIBBLE | CLOSE);
                varint::put(out, code);
            }
        }
    }

    /// The probe datagram of `total` bytes (never longer; at least the bare header). Its
    /// layout is that of lowtide's PROBE frame, so the pad length is computed the same way.
    pub fn probe_of_len(id: u64, index: u8, total: usize) -> Packet<'static> {
        Packet::Probe {
            id,
            index,
            pad_len: probe_pad_len(id, total as u64, MAX_PROBE_PAD),
        }
    }

    /// Parses one datagram; `max_message` bounds a data packet's `total_len`.
    pub fn decode(buf: &'a [u8], max_message: u64) -> Result<Packet<'a>, DecodeError> {
        let Some(&first) = buf.first() else {
            return Err(DecodeError::Truncated("type"));
        };
        if first & 0xf0 != VERSION_NIBBLE {
            return Err(DecodeError::UnknownType(first));
        }
        let mut r = Reader { buf, pos: 1 };
        Ok(match first & 0x0f {
            DATA => {
                let h = DataHeader {
                    seq: r.var("data.seq")?,
                    timestamp_us: r.var("data.timestamp_us")?,
                    rtt_us: r.var_max("data.rtt_us", 60_000_000)?,
                };
                let start = r.pos;
                if start == buf.len() {
                    return Err(DecodeError::Truncated("data.piece"));
                }
                while r.pos < buf.len() {
                    read_piece(&mut r, h.seq, max_message)?;
                }
                Packet::Data(
                    h,
                    Pieces {
                        seq: h.seq,
                        bytes: &buf[start..],
                        max_message,
                    },
                )
            }
            FEEDBACK => Packet::Feedback(Feedback {
                echo_us: r.var("feedback.echo_us")?,
                delay_us: r.var("feedback.delay_us")?,
                x_recv: r.var_max("feedback.x_recv", MAX_REPORTED_RATE)?,
                p: r.var_max("feedback.p_ppb", P_SCALE as u64)? as f64 / P_SCALE,
                loss_events: r.var("feedback.loss_events")?,
            }),
            PROBE => {
                let id = r.var("probe.id")?;
                let index = r.var_max("probe.index", 1)? as u8;
                let pad_len = r.var_max("probe.pad_len", MAX_PROBE_PAD)?;
                if (buf.len() - r.pos) as u64 != pad_len {
                    return Err(DecodeError::Truncated("probe.pad"));
                }
                Packet::Probe { id, index, pad_len }
            }
            PROBE_REPORT => Packet::ProbeReport {
                id: r.var("probe_report.id")?,
                dispersion_us: r.var("probe_report.dispersion_us")?,
                second_len: r.var_max("probe_report.second_len", MAX_PROBE_PAD + 32)?,
            },
            CLOSE => Packet::Close {
                code: r.var("close.code")?,
            },
            _ => return Err(DecodeError::UnknownType(first)),
        })
    }
}

/// Appends a data packet's header (the pieces follow).
pub fn encode_data_header(out: &mut Vec<u8>, h: &DataHeader) {
    out.push(VERSION_NIBBLE | DATA);
    for v in [h.seq, h.timestamp_us, h.rtt_us] {
        varint::put(out, v);
    }
}

/// Reads and checks one piece of packet `seq`.
fn read_piece<'a>(
    r: &mut Reader<'a>,
    seq: u64,
    max_message: u64,
) -> Result<Piece<'a>, DecodeError> {
    let msg = r.var("piece.msg")?;
    let importance = r.var_max("piece.importance", 255)? as u8;
    let msg_time_us = r.var("piece.msg_time_us")?;
    let total_len = r.var_max("piece.total_len", max_message)?;
    let offset = r.var_max("piece.offset", total_len)?;
    let frag_count = r.var_max("piece.frag_count", total_len.max(1))?.max(1);
    // the first piece's packet, seq − frag_index, must exist
    let frag_index = r.var_max("piece.frag_index", (frag_count - 1).min(seq))?;
    let len = r.var("piece.len")?;
    let rest = (r.buf.len() - r.pos) as u64;
    if len > rest {
        return Err(DecodeError::Truncated("piece.payload"));
    }
    if offset + len > total_len {
        return Err(DecodeError::FragmentPastEnd {
            offset,
            len,
            total: total_len,
        });
    }
    let payload = &r.buf[r.pos..r.pos + len as usize];
    r.pos += len as usize;
    Ok(Piece {
        msg,
        importance,
        msg_time_us,
        total_len,
        offset,
        frag_index,
        frag_count,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: DataHeader = DataHeader {
        seq: 70_000,
        timestamp_us: 123_456_789,
        rtt_us: 200_000,
    };

    fn piece(payload: &[u8]) -> Piece<'_> {
        Piece {
            msg: 42,
            importance: 3,
            msg_time_us: 123_000_000,
            total_len: 5000,
            offset: 1200,
            frag_index: 1,
            frag_count: 5,
            payload,
        }
    }

    fn data(pieces: &[Piece<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_data(&mut out, &HEADER, pieces);
        out
    }

    #[test]
    fn every_packet_round_trips_and_every_prefix_fails_cleanly() {
        let payload = [9u8; 1000];
        let tail = piece(&payload[..300]);
        let whole = Piece {
            msg: 43,
            offset: 0,
            total_len: 20,
            frag_index: 0,
            frag_count: 1,
            ..piece(&payload[..20])
        };
        let datagrams = [data(&[piece(&payload)]), data(&[tail, whole, whole])];
        for d in &datagrams {
            let Ok(Packet::Data(h, pieces)) = Packet::decode(d, 1 << 20) else {
                panic!("{d:?}");
            };
            assert_eq!(h, HEADER);
            let got: Vec<Piece> = pieces.collect();
            assert!(got.len() == 1 || got == [tail, whole, whole], "{got:?}");
            // a cut at a piece boundary is a packet of fewer pieces; any other cut fails
            let header_len = d.len() - got.iter().map(Piece::encoded_len).sum::<usize>();
            let ends: Vec<usize> = got
                .iter()
                .scan(header_len, |end, p| {
                    *end += p.encoded_len();
                    Some(*end)
                })
                .collect();
            for cut in 0..d.len() {
                match ends.iter().position(|&e| e == cut) {
                    Some(i) => assert!(
                        matches!(Packet::decode(&d[..cut], 1 << 20), Ok(Packet::Data(_, p)) if p.count() == i + 1)
                    ),
                    None => assert!(Packet::decode(&d[..cut], 1 << 20).is_err(), "cut {cut}"),
                }
            }
        }
        let packets = [
            Packet::Feedback(Feedback {
                echo_us: 5,
                delay_us: 7,
                x_recv: 62_500,
                p: 0.012_345_678,
                loss_events: 3,
            }),
            Packet::Probe {
                id: 1,
                index: 1,
                pad_len: 1100,
            },
            Packet::ProbeReport {
                id: 1,
                dispersion_us: 16_000,
                second_len: 1200,
            },
            Packet::Close { code: 0 },
        ];
        for p in packets {
            let mut out = Vec::new();
            p.encode(&mut out);
            assert_eq!(Packet::decode(&out, 1 << 20).unwrap(), p);
            for cut in 0..out.len() {
                assert!(
                    Packet::decode(&out[..cut], 1 << 20).is_err(),
                    "{p:?} cut {cut}"
                );
            }
        }
        for total in [10usize, 127, 128, 129, 1200, 1472] {
            let mut out = Vec::new();
            Packet::probe_of_len(7, 0, total).encode(&mut out);
            assert_eq!(out.len(), total);
        }
    }

    #[test]
    fn garbage_is_a_named_error() {
        assert_eq!(Packet::decode(&[], 10), Err(DecodeError::Truncated("type")));
        assert_eq!(
            Packet::decode(&[0x99], 10),
            Err(DecodeError::UnknownType(0x99))
        );
        assert!(matches!(
            Packet::decode(
                &[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                10
            ),
            Err(DecodeError::VarintOverflow("feedback.echo_us"))
        ));
        // p above 1
        let mut out = vec![0x12];
        for v in [1u64, 1, 1, 2_000_000_000, 0] {
            varint::put(&mut out, v);
        }
        assert!(matches!(
            Packet::decode(&out, 10),
            Err(DecodeError::FieldOutOfRange {
                field: "feedback.p_ppb",
                ..
            })
        ));
        // a data packet with no piece
        let mut out = Vec::new();
        encode_data_header(&mut out, &HEADER);
        assert_eq!(
            Packet::decode(&out, 1 << 20),
            Err(DecodeError::Truncated("data.piece"))
        );
        // a message larger than allowed, in the second piece
        let out = data(&[
            piece(&[]),
            Piece {
                total_len: 200,
                offset: 0,
                ..piece(&[])
            },
        ]);
        assert!(matches!(
            Packet::decode(&out, 100),
            Err(DecodeError::FieldOutOfRange {
                field: "piece.total_len",
                ..
            })
        ));
        // a piece past the message's end
        let out = data(&[Piece {
            offset: 4500,
            ..piece(&[0; 600])
        }]);
        assert!(matches!(
            Packet::decode(&out, 1 << 20),
            Err(DecodeError::FragmentPastEnd { .. })
        ));
        // a length longer than the datagram
        let mut out = data(&[piece(&[1; 10])]);
        out.pop();
        assert_eq!(
            Packet::decode(&out, 1 << 20),
            Err(DecodeError::Truncated("piece.payload"))
        );
    }
}
