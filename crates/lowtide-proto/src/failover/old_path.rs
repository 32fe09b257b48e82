//! The false-positive estimate: the abandoned connection's late P-ACKs.
//!
//! After a switch the connecting side keeps reading the old connection for a while (it does
//! not write to it). A P-ACK arriving there that covers bytes past what was acknowledged at
//! the switch means the old connection was still delivering: the failover was (probably) a
//! false positive. Only P-ACKs the receiver sent before it saw the switch can arrive (it stops
//! reading the old connection then), so this undercounts when the old connection recovers
//! only after the switch reached the receiver.
//!
//! Only P-ACK frames are parsed; payload bytes of other frames are skipped without being
//! kept, so memory is one frame header.
//!
//! ```
//! use lowtide_proto::failover::OldPath;
//! use lowtide_proto::wire::{DataFrame, Frame};
//! // A large data frame is skipped, not kept; the P-ACK after it is seen.
//! let mut bytes = Vec::new();
//! let payload = vec![0u8; 60_000];
//! Frame::Data(DataFrame { stream: 0, seq: 1, offset: 8, first: None, payload: &payload }).encode(&mut bytes);
//! Frame::PAck { bytes: 20_000, recv_time_us: 5 }.encode(&mut bytes);
//! let mut old = OldPath::new(&[], 10_000, 65_536);
//! assert!(old.on_bytes(&bytes)?);
//! # Ok::<(), lowtide_proto::wire::DecodeError>(())
//! ```

use crate::wire::{DecodeError, Frame};

/// Watches the old connection's incoming bytes for P-ACKs past the stall point.
///
/// ```
/// use lowtide_proto::failover::OldPath;
/// use lowtide_proto::wire::Frame;
/// // At the switch the old connection had P-ACKed 5000 bytes.
/// let mut old = OldPath::new(&[], 5000, 65_536);
/// let mut late = Vec::new();
/// Frame::PAck { bytes: 5000, recv_time_us: 10 }.encode(&mut late);
/// assert!(!old.on_bytes(&late)?); // nothing new
/// late.clear();
/// Frame::PAck { bytes: 9000, recv_time_us: 20 }.encode(&mut late);
/// assert!(old.on_bytes(&late)?); // it was still delivering: a false positive
/// assert!(old.delivered_after_switch);
/// # Ok::<(), lowtide_proto::wire::DecodeError>(())
/// ```
#[derive(Debug)]
pub struct OldPath {
    /// P-ACK value (bytes of that connection) already seen when the switch happened.
    acked_at_switch: u64,
    max_payload: u64,
    /// An incomplete frame header.
    buf: Vec<u8>,
    /// Payload bytes of a frame that are still to be skipped.
    skip: usize,
    /// The old connection acknowledged bytes after the switch.
    pub delivered_after_switch: bool,
}

impl OldPath {
    /// `pending`: bytes of the old connection read but not parsed at the switch (they start
    /// on a frame boundary); `acked_at_switch`: the last P-ACK value seen on it.
    ///
    /// ```
    /// use lowtide_proto::failover::OldPath;
    /// use lowtide_proto::wire::Frame;
    /// // A P-ACK already read (but not parsed) when the switch happened counts too.
    /// let mut pending = Vec::new();
    /// Frame::PAck { bytes: 6000, recv_time_us: 10 }.encode(&mut pending);
    /// let old = OldPath::new(&pending, 5000, 65_536);
    /// assert!(old.delivered_after_switch);
    /// assert!(!OldPath::new(&[], 5000, 65_536).delivered_after_switch);
    /// ```
    pub fn new(pending: &[u8], acked_at_switch: u64, max_payload: u64) -> Self {
        let mut p = Self {
            acked_at_switch,
            max_payload,
            buf: Vec::new(),
            skip: 0,
            delivered_after_switch: false,
        };
        // A decode error in bytes already read would have closed the channel before.
        let _ = p.on_bytes(pending);
        p
    }

    /// Bytes read from the old connection. Returns `true` when they carried the first P-ACK
    /// past the stall point.
    ///
    /// ```
    /// use lowtide_proto::failover::OldPath;
    /// use lowtide_proto::wire::{DataFrame, Frame};
    /// let mut old = OldPath::new(&[], 5000, 65_536);
    /// let mut late = Vec::new();
    /// Frame::Data(DataFrame { stream: 1, seq: 0, offset: 4, first: None, payload: &[0; 3000] }).encode(&mut late);
    /// Frame::PAck { bytes: 8000, recv_time_us: 10 }.encode(&mut late);
    /// // Frames arrive in any split; data is skipped, the P-ACK found.
    /// assert!(!old.on_bytes(&late[..1500])?);
    /// assert!(old.on_bytes(&late[1500..])?);
    /// assert!(!old.on_bytes(&late[late.len() - 4..])?); // reported once
    /// # Ok::<(), lowtide_proto::wire::DecodeError>(())
    /// ```
    pub fn on_bytes(&mut self, mut data: &[u8]) -> Result<bool, DecodeError> {
        let before = self.delivered_after_switch;
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            self.buf.push(data[0]);
            data = &data[1..];
            let Some(len) = Frame::frame_len(&self.buf, self.max_payload)? else {
                continue;
            };
            if len > self.buf.len() {
                // the header is complete: skip the payload
                self.skip = len - self.buf.len();
                self.buf.clear();
                continue;
            }
            if let Some((Frame::PAck { bytes, .. }, _)) =
                Frame::decode(&self.buf, self.max_payload)?
            {
                if bytes > self.acked_at_switch {
                    self.delivered_after_switch = true;
                }
            }
            self.buf.clear();
        }
        Ok(!before && self.delivered_after_switch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::DataFrame;

    #[test]
    fn a_late_pack_past_the_switch_point_marks_a_false_positive() {
        let mut wire = Vec::new();
        Frame::PAck {
            bytes: 100,
            recv_time_us: 1,
        }
        .encode(&mut wire);
        let payload = vec![7u8; 5000];
        Frame::Data(DataFrame {
            stream: 1,
            seq: 0,
            offset: 0,
            first: None,
            payload: &payload,
        })
        .encode(&mut wire);
        Frame::PAck {
            bytes: 150,
            recv_time_us: 2,
        }
        .encode(&mut wire);
        // the first P-ACK is not past the switch point; the second is
        let mut p = OldPath::new(&wire[..3], 120, 65536);
        let mut hits = 0;
        for chunk in wire[3..].chunks(7) {
            hits += usize::from(p.on_bytes(chunk).unwrap());
            assert!(p.buf.len() < 64, "payload is skipped, not kept");
        }
        assert_eq!(hits, 1);
        assert!(p.delivered_after_switch);
        let mut q = OldPath::new(&[], 150, 65536);
        assert!(!q.on_bytes(&wire).unwrap());
        assert!(q.on_bytes(&[0x7f]).is_err(), "garbage is an error");
    }
}
