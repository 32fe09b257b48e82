//! What a media message carries in front of its payload, so the receiver can place it.
//!
//! ```text
//! data:        0x01 | window u32 | frame u32 | layer u8 | payload (the layer's bytes)
//! window end:  0x02 | window u32 | messages sent u32
//! ```
//! Big-endian. The window-end message tells the receiver how many messages of a window the
//! sender finished writing, so it can tell a whole window from a partial one by itself.

/// Bytes in front of a data message's payload.
pub const DATA_HEADER: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaHeader {
    Data { window: u32, frame: u32, layer: u8 },
    WindowEnd { window: u32, sent: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("a media message of {0} bytes is too short for its header")]
    Short(usize),
    #[error("unknown media message tag {0:#04x}")]
    UnknownTag(u8),
}

impl MediaHeader {
    /// A data message of `size` bytes in total (at least the header).
    pub fn data_message(window: u32, frame: u32, layer: u8, size: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(size.max(DATA_HEADER));
        out.push(1);
        out.extend_from_slice(&window.to_be_bytes());
        out.extend_from_slice(&frame.to_be_bytes());
        out.push(layer);
        out.resize(size.max(DATA_HEADER), 0);
        out
    }

    pub fn window_end_message(window: u32, sent: u32) -> Vec<u8> {
        let mut out = vec![2];
        out.extend_from_slice(&window.to_be_bytes());
        out.extend_from_slice(&sent.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<MediaHeader, WireError> {
        let u32_at = |i: usize| -> Option<u32> {
            Some(u32::from_be_bytes(bytes.get(i..i + 4)?.try_into().ok()?))
        };
        let short = || WireError::Short(bytes.len());
        match bytes.first() {
            Some(1) => Ok(MediaHeader::Data {
                window: u32_at(1).ok_or_else(short)?,
                frame: u32_at(5).ok_or_else(short)?,
                layer: *bytes.get(9).ok_or_else(short)?,
            }),
            Some(2) => Ok(MediaHeader::WindowEnd {
                window: u32_at(1).ok_or_else(short)?,
                sent: u32_at(5).ok_or_else(short)?,
            }),
            Some(t) => Err(WireError::UnknownTag(*t)),
            None => Err(short()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        let m = MediaHeader::data_message(7, 30, 2, 1200);
        assert_eq!(m.len(), 1200);
        assert_eq!(
            MediaHeader::decode(&m),
            Ok(MediaHeader::Data {
                window: 7,
                frame: 30,
                layer: 2
            })
        );
        let e = MediaHeader::window_end_message(7, 12);
        assert_eq!(
            MediaHeader::decode(&e),
            Ok(MediaHeader::WindowEnd {
                window: 7,
                sent: 12
            })
        );
        assert_eq!(MediaHeader::decode(&m[..5]), Err(WireError::Short(5)));
        assert_eq!(MediaHeader::decode(&[9]), Err(WireError::UnknownTag(9)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = MediaHeader::decode(&bytes);
        }
    }
}
