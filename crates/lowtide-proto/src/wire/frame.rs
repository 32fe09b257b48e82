//! Frames: the unit of everything after the handshake.

use super::{varint, DecodeError, Reader, Short};

/// Longest close reason, in bytes.
pub const MAX_CLOSE_REASON: usize = 1024;
/// Largest PROBE padding, bytes (a probe packet is at most one 64 KB segment).
pub const MAX_PROBE_PAD: u64 = 65_536;
/// Longest possible header of a data frame (type and six varints).
pub const MAX_HEADER_LEN: usize = 1 + 6 * varint::MAX_LEN;

/// Frame type codes (the first varint of a frame).
///
/// ```
/// use lowtide_proto::wire::{Frame, FrameType};
/// let mut buf = Vec::new();
/// Frame::StreamClose { stream: 4 }.encode(&mut buf);
/// assert_eq!(buf[0], FrameType::StreamClose as u8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// `STREAM_OPEN { stream, weight_milli }`
    StreamOpen = 0x01,
    /// `STREAM_CLOSE { stream }`
    StreamClose = 0x02,
    /// `DATA_FIRST { stream, seq, importance, send_time_us, total_len, len, payload }`
    DataFirst = 0x03,
    /// `DATA { stream, seq, offset, len, payload }`
    Data = 0x04,
    /// `CANCEL { stream, seq, reason }`
    Cancel = 0x05,
    /// `PACK { bytes, recv_time_us }`
    PAck = 0x06,
    /// `CLOSE { code, reason_len, reason }`
    Close = 0x07,
    /// `SWITCH { path }` (failover)
    Switch = 0x08,
    /// `PROBE { id, index, pad_len, pad }`
    Probe = 0x0c,
    /// `PROBE_REPORT { id, dispersion_us, second_len }`
    ProbeReport = 0x0d,
}

/// Why a message was withdrawn by its sender.
///
/// ```
/// use lowtide_proto::wire::{CancelReason, Frame};
/// let mut buf = Vec::new();
/// let cancel = Frame::Cancel { stream: 2, seq: 9, reason: CancelReason::Expired };
/// cancel.encode(&mut buf);
/// assert_eq!(Frame::decode(&buf, 1024)?, Some((cancel, buf.len())));
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum CancelReason {
    /// The application cancelled it.
    Application,
    /// Its deadline passed before it was completely written.
    Expired,
}

impl CancelReason {
    fn code(self) -> u64 {
        match self {
            CancelReason::Application => 0,
            CancelReason::Expired => 1,
        }
    }
}

/// One chunk of a message. `first` carries the message's metadata and is present exactly when
/// `offset == 0`.
///
/// ```
/// use lowtide_proto::wire::{DataFrame, FirstChunk, Frame};
/// let first = FirstChunk { importance: 2, send_time_us: 5_000, total_len: 10 };
/// let head = DataFrame { stream: 0, seq: 3, offset: 0, first: Some(first), payload: b"hello" };
/// let tail = DataFrame { stream: 0, seq: 3, offset: 5, first: None, payload: b"world" };
/// let mut buf = Vec::new();
/// Frame::Data(head).encode(&mut buf);
/// Frame::Data(tail).encode(&mut buf);
/// let (f, used) = Frame::decode(&buf, 1024)?.expect("complete");
/// assert_eq!(f, Frame::Data(head));
/// assert_eq!(Frame::decode(&buf[used..], 1024)?.map(|(f, _)| f), Some(Frame::Data(tail)));
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    /// Stream id.
    pub stream: u64,
    /// Message sequence number within the stream.
    pub seq: u64,
    /// Byte offset of this chunk in the message.
    pub offset: u64,
    /// Metadata, in the first chunk only.
    pub first: Option<FirstChunk>,
    /// Chunk bytes.
    pub payload: &'a [u8],
}

/// Metadata sent with a message's first chunk.
///
/// ```
/// use lowtide_proto::wire::{FirstChunk, Frame};
/// let meta = FirstChunk { importance: 1, send_time_us: 300, total_len: 1_000_000 };
/// // A sender sizes its chunks with the header length in mind: type, stream, seq,
/// // importance, send time (2-byte varint), total length (3), chunk length (2).
/// assert_eq!(Frame::data_header_len(0, 0, Some(meta), 0, 1400), 1 + 1 + 1 + 1 + 2 + 3 + 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstChunk {
    /// Importance (higher is more important).
    pub importance: u8,
    /// Sender's clock when the message was enqueued, microseconds since its epoch.
    pub send_time_us: u64,
    /// Message length.
    pub total_len: u64,
}

/// A decoded frame, borrowing its payload from the receive buffer.
///
/// ```
/// use lowtide_proto::wire::Frame;
/// let mut buf = Vec::new();
/// Frame::StreamOpen { stream: 1, weight_milli: 2_000 }.encode(&mut buf);
/// // The header is enough to know how much to read.
/// assert_eq!(Frame::frame_len(&buf, 1024)?, Some(buf.len()));
/// match Frame::decode(&buf, 1024)? {
///     Some((Frame::StreamOpen { stream, weight_milli }, _)) => assert_eq!((stream, weight_milli), (1, 2_000)),
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// The sender opened a stream.
    StreamOpen {
        /// Stream id.
        stream: u64,
        /// Weight in thousandths (informational for the receiver).
        weight_milli: u64,
    },
    /// The sender will send nothing more on the stream.
    StreamClose {
        /// Stream id.
        stream: u64,
    },
    /// A chunk of a message.
    Data(DataFrame<'a>),
    /// A message was withdrawn; any partial reassembly must be freed.
    Cancel {
        /// Stream id.
        stream: u64,
        /// Message sequence number.
        seq: u64,
        /// Why.
        reason: CancelReason,
    },
    /// Application-level acknowledgement (Paceline P-ACK).
    PAck {
        /// Bytes of the channel (handshake included) the receiver has consumed.
        bytes: u64,
        /// Receiver's clock at that moment, microseconds since its epoch.
        recv_time_us: u64,
    },
    /// The sender closes the channel.
    Close {
        /// Close code (0 = normal, see `docs/wire.md`).
        code: u64,
        /// Human-readable reason.
        reason: &'a str,
    },
    /// The first frame on a backup connection the sender switched to (failover): from here on
    /// the channel continues on this connection.
    Switch {
        /// The connection's ordinal, as in its hello (key 5).
        path: u64,
    },
    /// One packet of a packet-pair probe; the pad makes the frame fill a segment.
    Probe {
        /// Probe id (the sender's count).
        id: u64,
        /// 0 for the first packet of the pair, 1 for the second.
        index: u8,
        /// Padding bytes that follow (content ignored).
        pad_len: u64,
    },
    /// The receiver's answer to a probe pair.
    ProbeReport {
        /// Probe id.
        id: u64,
        /// Time between the arrivals of the two probe frames, µs.
        dispersion_us: u64,
        /// Length of the second probe frame as received, bytes.
        second_len: u64,
    },
}

/// The pad length that makes a probe `total` bytes long when it is laid out as one type
/// byte, the id, one index byte, the pad length and the pad (lowtide's PROBE frame and
/// TFRC's probe datagram), as close as the varint lengths allow, never longer, at most `max`.
///
/// ```
/// use lowtide_proto::wire::{probe_pad_len, Frame, MAX_PROBE_PAD};
/// let pad = probe_pad_len(7, 1448, MAX_PROBE_PAD);
/// let mut buf = Vec::new();
/// Frame::Probe { id: 7, index: 0, pad_len: pad }.encode(&mut buf);
/// assert_eq!(buf.len(), 1448); // one full segment
/// ```
pub fn probe_pad_len(id: u64, total: u64, max: u64) -> u64 {
    let header = |pad: u64| (2 + varint::len(id) + varint::len(pad)) as u64;
    let mut pad = total.saturating_sub(header(0)).min(max);
    while pad > 0 && header(pad) + pad > total {
        pad -= 1;
    }
    pad
}

impl<'a> Frame<'a> {
    /// The frame type's name, for errors.
    ///
    /// ```
    /// use lowtide_proto::wire::Frame;
    /// assert_eq!(Frame::Switch { path: 1 }.name(), "SWITCH");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Frame::StreamOpen { .. } => "STREAM_OPEN",
            Frame::StreamClose { .. } => "STREAM_CLOSE",
            Frame::Data(_) => "DATA",
            Frame::Cancel { .. } => "CANCEL",
            Frame::PAck { .. } => "PACK",
            Frame::Close { .. } => "CLOSE",
            Frame::Switch { .. } => "SWITCH",
            Frame::Probe { .. } => "PROBE",
            Frame::ProbeReport { .. } => "PROBE_REPORT",
        }
    }

    /// Appends the header of a data frame (everything but the payload) to `out`.
    ///
    /// ```
    /// use lowtide_proto::wire::{DataFrame, Frame};
    /// let payload = vec![5u8; 1000];
    /// let d = DataFrame { stream: 2, seq: 9, offset: 4000, first: None, payload: &payload };
    /// // The sender writes header and payload with one writev, without copying the payload.
    /// let mut header = Vec::new();
    /// Frame::encode_data_header(&mut header, &d);
    /// let mut whole = Vec::new();
    /// Frame::Data(d).encode(&mut whole);
    /// assert_eq!(whole, [&header[..], &payload[..]].concat());
    /// ```
    pub fn encode_data_header(out: &mut Vec<u8>, d: &DataFrame<'_>) {
        match d.first {
            Some(f) => {
                out.push(FrameType::DataFirst as u8);
                varint::put(out, d.stream);
                varint::put(out, d.seq);
                varint::put(out, u64::from(f.importance));
                varint::put(out, f.send_time_us);
                varint::put(out, f.total_len);
            }
            None => {
                out.push(FrameType::Data as u8);
                varint::put(out, d.stream);
                varint::put(out, d.seq);
                varint::put(out, d.offset);
            }
        }
        varint::put(out, d.payload.len() as u64);
    }

    /// Longest data frame header: the type byte and six varints (stream, seq, importance,
    /// send time and total length of a first chunk, payload length).
    ///
    /// ```
    /// use lowtide_proto::wire::varint;
    /// use lowtide_proto::wire::Frame;
    /// // The type byte plus six varints of at most `varint::MAX_LEN` bytes each.
    /// assert_eq!(Frame::MAX_DATA_HEADER_LEN, 1 + 6 * varint::MAX_LEN);
    /// ```
    pub const MAX_DATA_HEADER_LEN: usize = 1 + 6 * varint::MAX_LEN;

    /// Length of a data frame header with these fields and a payload of `len` bytes.
    ///
    /// ```
    /// use lowtide_proto::wire::{DataFrame, FirstChunk, Frame};
    /// let first = FirstChunk { importance: 1, send_time_us: 123_456, total_len: 50_000 };
    /// let n = Frame::data_header_len(2, 9, Some(first), 0, 1000);
    /// let mut header = Vec::new();
    /// let d = DataFrame { stream: 2, seq: 9, offset: 0, first: Some(first), payload: &[0; 1000] };
    /// Frame::encode_data_header(&mut header, &d);
    /// assert_eq!(n, header.len()); // sized without encoding
    /// ```
    pub fn data_header_len(
        stream: u64,
        seq: u64,
        offset_or_meta: Option<FirstChunk>,
        offset: u64,
        len: u64,
    ) -> usize {
        1 + varint::len(stream)
            + varint::len(seq)
            + match offset_or_meta {
                Some(f) => {
                    varint::len(u64::from(f.importance))
                        + varint::len(f.send_time_us)
                        + varint::len(f.total_len)
                }
                None => varint::len(offset),
            }
            + varint::len(len)
    }

    /// Appends the whole frame to `out`.
    ///
    /// ```
    /// use lowtide_proto::wire::{Frame, MAX_CLOSE_REASON};
    /// let mut out = Vec::new();
    /// Frame::StreamClose { stream: 4 }.encode(&mut out);
    /// assert_eq!(out.len(), 2); // type and a one-byte varint
    /// out.clear();
    /// // A long close reason is cut to MAX_CLOSE_REASON bytes.
    /// let reason = "x".repeat(10_000);
    /// Frame::Close { code: 0, reason: &reason }.encode(&mut out);
    /// assert!(out.len() < MAX_CLOSE_REASON + 8);
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Frame::StreamOpen {
                stream,
                weight_milli,
            } => {
                out.push(FrameType::StreamOpen as u8);
                varint::put(out, stream);
                varint::put(out, weight_milli);
            }
            Frame::StreamClose { stream } => {
                out.push(FrameType::StreamClose as u8);
                varint::put(out, stream);
            }
            Frame::Data(ref d) => {
                Self::encode_data_header(out, d);
                out.extend_from_slice(d.payload);
            }
            Frame::Cancel {
                stream,
                seq,
                reason,
            } => {
                out.push(FrameType::Cancel as u8);
                varint::put(out, stream);
                varint::put(out, seq);
                varint::put(out, reason.code());
            }
            Frame::PAck {
                bytes,
                recv_time_us,
            } => {
                out.push(FrameType::PAck as u8);
                varint::put(out, bytes);
                varint::put(out, recv_time_us);
            }
            Frame::Close { code, reason } => {
                out.push(FrameType::Close as u8);
                varint::put(out, code);
                let r = truncate_utf8(reason, MAX_CLOSE_REASON);
                varint::put(out, r.len() as u64);
                out.extend_from_slice(r.as_bytes());
            }
            Frame::Switch { path } => {
                out.push(FrameType::Switch as u8);
                varint::put(out, path);
            }
            Frame::Probe { id, index, pad_len } => {
                out.push(FrameType::Probe as u8);
                varint::put(out, id);
                varint::put(out, u64::from(index));
                let pad = pad_len.min(MAX_PROBE_PAD);
                varint::put(out, pad);
                out.resize(out.len() + pad as usize, 0);
            }
            Frame::ProbeReport {
                id,
                dispersion_us,
                second_len,
            } => {
                out.push(FrameType::ProbeReport as u8);
                varint::put(out, id);
                varint::put(out, dispersion_us);
                varint::put(out, second_len);
            }
        }
    }

    /// The PROBE frame with this id and index whose encoding is `total` bytes long (as close
    /// as the varint lengths allow, never longer; at least the bare header).
    ///
    /// ```
    /// use lowtide_proto::wire::Frame;
    /// for total in [100, 1448, 9000] {
    ///     let mut out = Vec::new();
    ///     Frame::probe_of_len(3, 1, total).encode(&mut out);
    ///     assert!(out.len() as u64 <= total && out.len() as u64 >= total - 2);
    /// }
    /// ```
    pub fn probe_of_len(id: u64, index: u8, total: u64) -> Frame<'static> {
        Frame::Probe {
            id,
            index,
            pad_len: probe_pad_len(id, total, MAX_PROBE_PAD),
        }
    }

    /// Parses one frame from the front of `buf`. `max_payload` bounds chunk payloads.
    ///
    /// Returns `Ok(Some((frame, bytes_used)))`, `Ok(None)` if `buf` ends inside the frame, or
    /// the first error found.
    ///
    /// ```
    /// use lowtide_proto::wire::{DecodeError, Frame};
    /// let mut buf = Vec::new();
    /// Frame::PAck { bytes: 70_000, recv_time_us: 1_500 }.encode(&mut buf);
    /// let (frame, used) = Frame::decode(&buf, 65_536)?.expect("whole");
    /// assert_eq!((frame, used), (Frame::PAck { bytes: 70_000, recv_time_us: 1_500 }, buf.len()));
    /// assert_eq!(Frame::decode(&buf[..2], 65_536)?, None); // cut short: wait for more
    /// assert!(Frame::decode(&[0xff, 0x00], 65_536).is_err()); // no such frame type
    /// # Ok::<(), DecodeError>(())
    /// ```
    pub fn decode(
        buf: &'a [u8],
        max_payload: u64,
    ) -> Result<Option<(Frame<'a>, usize)>, DecodeError> {
        let mut r = Reader::new(buf);
        match Self::decode_inner(&mut r, max_payload) {
            Ok(f) => Ok(Some((f, r.pos))),
            Err(Short::Incomplete | Short::NeedTotal(_)) => Ok(None),
            Err(Short::Bad(e)) => Err(e),
        }
    }

    /// Length of the frame at the front of `buf` as soon as its header is complete (the
    /// payload may still be missing); `Ok(None)` while the header itself is incomplete.
    ///
    /// ```
    /// use lowtide_proto::wire::{DataFrame, DecodeError, Frame};
    /// let payload = vec![0u8; 20_000];
    /// let mut buf = Vec::new();
    /// Frame::Data(DataFrame { stream: 0, seq: 0, offset: 8, first: None, payload: &payload }).encode(&mut buf);
    /// // The header alone tells the whole frame's length (a reader can size one read for it).
    /// assert_eq!(Frame::frame_len(&buf[..10], 65_536)?, Some(buf.len()));
    /// assert_eq!(Frame::frame_len(&buf[..1], 65_536)?, None); // the header is incomplete
    /// # Ok::<(), DecodeError>(())
    /// ```
    pub fn frame_len(buf: &'a [u8], max_payload: u64) -> Result<Option<usize>, DecodeError> {
        let mut r = Reader::new(buf);
        match Self::decode_inner(&mut r, max_payload) {
            Ok(_) => Ok(Some(r.pos)),
            Err(Short::NeedTotal(n)) => Ok(Some(n)),
            Err(Short::Incomplete) => Ok(None),
            Err(Short::Bad(e)) => Err(e),
        }
    }

    fn decode_inner(r: &mut Reader<'a>, max_payload: u64) -> Result<Frame<'a>, Short> {
        let ty = r.var()?;
        let frame = match ty {
            0x01 => Frame::StreamOpen {
                stream: r.var()?,
                weight_milli: r.var_max("stream_open.weight_milli", u64::from(u32::MAX))?,
            },
            0x02 => Frame::StreamClose { stream: r.var()? },
            0x03 | 0x04 => {
                let stream = r.var()?;
                let seq = r.var()?;
                let (offset, first) = if ty == 0x03 {
                    let importance = r.var_max("data.importance", 255)? as u8;
                    let send_time_us = r.var()?;
                    let total_len = r.var()?;
                    (
                        0,
                        Some(FirstChunk {
                            importance,
                            send_time_us,
                            total_len,
                        }),
                    )
                } else {
                    (r.var()?, None)
                };
                let len = r.var()?;
                if len > max_payload {
                    return Err(DecodeError::FrameTooLarge {
                        len,
                        max: max_payload,
                    }
                    .into());
                }
                let payload = r.bytes(len as usize)?;
                Frame::Data(DataFrame {
                    stream,
                    seq,
                    offset,
                    first,
                    payload,
                })
            }
            0x05 => {
                let stream = r.var()?;
                let seq = r.var()?;
                let reason = match r.var_max("cancel.reason", 1)? {
                    0 => CancelReason::Application,
                    _ => CancelReason::Expired,
                };
                Frame::Cancel {
                    stream,
                    seq,
                    reason,
                }
            }
            0x06 => Frame::PAck {
                bytes: r.var()?,
                recv_time_us: r.var()?,
            },
            0x07 => {
                let code = r.var()?;
                let n = r.var_max("close.reason_len", MAX_CLOSE_REASON as u64)?;
                let raw = r.bytes(n as usize)?;
                let reason = std::str::from_utf8(raw).map_err(|_| DecodeError::ReasonNotUtf8)?;
                Frame::Close { code, reason }
            }
            0x08 => Frame::Switch { path: r.var()? },
            0x0c => {
                let id = r.var()?;
                let index = r.var_max("probe.index", 1)? as u8;
                let pad_len = r.var_max("probe.pad_len", MAX_PROBE_PAD)?;
                if pad_len > max_payload {
                    return Err(DecodeError::FrameTooLarge {
                        len: pad_len,
                        max: max_payload,
                    }
                    .into());
                }
                r.bytes(pad_len as usize)?;
                Frame::Probe { id, index, pad_len }
            }
            0x0d => Frame::ProbeReport {
                id: r.var()?,
                dispersion_us: r.var()?,
                second_len: r.var_max("probe_report.second_len", MAX_PROBE_PAD + 32)?,
            },
            other => return Err(DecodeError::UnknownFrameType(other).into()),
        };
        Ok(frame)
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_frames() -> Vec<Frame<'static>> {
        vec![
            Frame::StreamOpen {
                stream: 3,
                weight_milli: 2500,
            },
            Frame::StreamClose { stream: 1 << 40 },
            Frame::Data(DataFrame {
                stream: 1,
                seq: 7,
                offset: 0,
                first: Some(FirstChunk {
                    importance: 200,
                    send_time_us: 123_456,
                    total_len: 5,
                }),
                payload: b"hello",
            }),
            Frame::Data(DataFrame {
                stream: 1,
                seq: 8,
                offset: 1400,
                first: None,
                payload: b"xy",
            }),
            Frame::Cancel {
                stream: 2,
                seq: 9,
                reason: CancelReason::Expired,
            },
            Frame::PAck {
                bytes: 1 << 33,
                recv_time_us: 77,
            },
            Frame::Close {
                code: 3,
                reason: "limit exceeded",
            },
            Frame::Probe {
                id: 1,
                index: 1,
                pad_len: 1400,
            },
            Frame::ProbeReport {
                id: 1,
                dispersion_us: 23_000,
                second_len: 1448,
            },
            Frame::Switch { path: 300 },
        ]
    }

    #[test]
    fn probe_frames_fill_the_requested_length() {
        for total in [4u64, 100, 127, 128, 129, 130, 1448, 9000] {
            let f = Frame::probe_of_len(3, 0, total);
            let mut out = Vec::new();
            f.encode(&mut out);
            assert_eq!(out.len() as u64, total, "{f:?}");
        }
        let mut out = Vec::new();
        Frame::Probe {
            id: 0,
            index: 0,
            pad_len: MAX_PROBE_PAD + 1,
        }
        .encode(&mut out);
        assert_eq!(
            Frame::decode(&out, MAX_PROBE_PAD).unwrap().unwrap().1,
            out.len()
        );
        assert!(matches!(
            Frame::decode(&out, 1000),
            Err(DecodeError::FrameTooLarge { .. })
        ));
        let bad = [0x0c, 0x00, 0x02, 0x00];
        assert!(matches!(
            Frame::decode(&bad, 10),
            Err(DecodeError::FieldOutOfRange {
                field: "probe.index",
                ..
            })
        ));
    }

    #[test]
    fn every_frame_round_trips_and_every_prefix_is_incomplete() {
        for f in all_frames() {
            let mut out = Vec::new();
            f.encode(&mut out);
            assert_eq!(Frame::decode(&out, 1 << 20).unwrap(), Some((f, out.len())));
            for cut in 0..out.len() {
                assert_eq!(
                    Frame::decode(&out[..cut], 1 << 20).unwrap(),
                    None,
                    "{f:?} cut {cut}"
                );
                if let Some(n) = Frame::frame_len(&out[..cut], 1 << 20).unwrap() {
                    assert_eq!(n, out.len(), "{f:?} cut {cut}");
                }
            }
            assert_eq!(Frame::frame_len(&out, 1 << 20).unwrap(), Some(out.len()));
            if let Frame::Data(d) = f {
                assert_eq!(
                    Frame::data_header_len(
                        d.stream,
                        d.seq,
                        d.first,
                        d.offset,
                        d.payload.len() as u64
                    ),
                    out.len() - d.payload.len()
                );
            }
        }
    }

    #[test]
    fn oversized_payload_is_rejected_from_the_header_alone() {
        let mut out = Vec::new();
        Frame::Data(DataFrame {
            stream: 0,
            seq: 0,
            offset: 4,
            first: None,
            payload: &[0; 100],
        })
        .encode(&mut out);
        assert_eq!(
            Frame::decode(&out[..6], 99),
            Err(DecodeError::FrameTooLarge { len: 100, max: 99 })
        );
    }

    #[test]
    fn garbage_is_rejected() {
        assert_eq!(
            Frame::decode(&[0x7f], 10),
            Err(DecodeError::UnknownFrameType(0x7f))
        );
        assert_eq!(
            Frame::decode(&[0x07, 0x00, 0x02, 0xff, 0xfe], 10),
            Err(DecodeError::ReasonNotUtf8)
        );
        assert!(matches!(
            Frame::decode(&[0x05, 0x00, 0x00, 0x09], 10),
            Err(DecodeError::FieldOutOfRange {
                field: "cancel.reason",
                ..
            })
        ));
    }

    #[test]
    fn close_reason_is_truncated_on_a_char_boundary() {
        let long = "é".repeat(MAX_CLOSE_REASON);
        let mut out = Vec::new();
        Frame::Close {
            code: 1,
            reason: &long,
        }
        .encode(&mut out);
        let (f, _) = Frame::decode(&out, 0).unwrap().unwrap();
        let Frame::Close { reason, .. } = f else {
            panic!("not a close: {f:?}")
        };
        assert!(reason.len() <= MAX_CLOSE_REASON && reason.chars().all(|c| c == 'é'));
    }
}
