//! Read buffers reused through a small per-thread pool.
//!
//! The driver reads into one `BytesMut` and hands each read to the core as `Bytes`, whose
//! messages are slices of it, so a read buffer cannot be reused while the application holds
//! one of its messages. Allocating a fresh one per read made glibc hand out memory it had just
//! returned to the kernel (`madvise`/trim on free): page faults and page zeroing were 16 % of
//! the bulk receiver's samples and trimming 3 % (`perf` on `lowtide bench --only goodput`), and
//! the receiver, not the sender, limits bulk goodput. A buffer whose messages were all dropped
//! is reclaimed instead ([`BytesMut::try_reclaim`]).
//!
//! The pool is per thread, not per channel, so a server of many mostly idle channels keeps at
//! most [`POOL`] spare buffers per thread; a buffer a message still holds is not spare and stays
//! charged to that channel's receive budget.

use std::cell::RefCell;

use bytes::BytesMut;

/// Retired buffers kept per thread: one read phase reads up to 16 times before the
/// application takes the messages of its first read.
const POOL: usize = 16;

thread_local! {
    static RETIRED: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// Makes `buf` (empty: every read is split off it) ready for a read of up to `len` bytes:
/// unchanged if it has the room, else replaced by a pooled buffer that no message holds any
/// more, or a new one; the old buffer joins the pool until its messages are dropped.
pub(crate) fn prepare(buf: &mut BytesMut, len: usize) {
    debug_assert!(buf.is_empty(), "reads are split off whole");
    if buf.capacity() >= len {
        return;
    }
    retire(std::mem::replace(buf, take(len)));
}

/// Makes room for `room` more bytes after the incomplete frame `buf` holds (its head, kept
/// for the next read to complete in place): where the allocation has no such room left, the
/// head moves to the front of a buffer of at least `len` bytes (the one copy this path makes).
pub(crate) fn make_room(buf: &mut BytesMut, room: usize, len: usize) {
    if buf.is_empty() {
        return prepare(buf, len);
    }
    if buf.capacity() - buf.len() >= room {
        return;
    }
    let mut moved = take(len.max(buf.len() + room));
    moved.extend_from_slice(buf);
    buf.clear();
    retire(std::mem::replace(buf, moved));
}

/// A buffer of at least `len` bytes: a pooled one that no message holds any more, or a new one.
fn take(len: usize) -> BytesMut {
    let reused = RETIRED.with(|p| {
        let mut p = p.borrow_mut();
        // `try_reclaim` succeeds only when no message holds a slice of the buffer any more
        let i = p.iter_mut().position(|b| b.try_reclaim(len))?;
        Some(p.swap_remove(i))
    });
    reused.unwrap_or_else(|| BytesMut::with_capacity(len))
}

/// An exhausted buffer (it still owns its whole allocation, its view is just empty) joins the
/// pool, the oldest leaving a full one.
fn retire(old: BytesMut) {
    RETIRED.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() == POOL {
            p.remove(0);
        }
        p.push(old);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_its_messages_are_dropped() {
        let len = 64 << 10;
        let mut buf = BytesMut::new();
        prepare(&mut buf, len);
        let first = buf.as_ptr() as usize;
        buf.extend_from_slice(&vec![7u8; len]);
        let msg = buf.split().freeze();
        prepare(&mut buf, len);
        assert_ne!(buf.as_ptr() as usize, first, "a held buffer is not reused");
        assert!(buf.capacity() >= len);
        drop(msg);
        buf.extend_from_slice(&vec![8u8; len]);
        drop(buf.split());
        prepare(&mut buf, len);
        assert_eq!(buf.as_ptr() as usize, first, "the dropped buffer is reused");
        assert!(buf.capacity() >= len);
    }

    #[test]
    fn a_buffer_with_room_is_kept() {
        let mut buf = BytesMut::with_capacity(1000);
        let p = buf.as_ptr() as usize;
        prepare(&mut buf, 500);
        assert_eq!(buf.as_ptr() as usize, p);
    }

    #[test]
    fn an_incomplete_frame_stays_in_place_while_it_fits_and_moves_once_otherwise() {
        let mut buf = BytesMut::new();
        make_room(&mut buf, 0, 1000);
        assert!(buf.capacity() >= 1000);
        buf.extend_from_slice(&[1u8; 900]);
        let read = buf.split_to(800).freeze();
        let (p, head) = (buf.as_ptr() as usize, buf.to_vec());
        make_room(&mut buf, 50, 1000);
        assert_eq!(
            buf.as_ptr() as usize,
            p,
            "room left: the head stays where it is"
        );
        make_room(&mut buf, 500, 1000);
        assert_ne!(buf.as_ptr() as usize, p, "no room: the head moves");
        assert_eq!(&buf[..], &head[..]);
        assert!(buf.capacity() - buf.len() >= 500);
        drop(read);
    }
}
