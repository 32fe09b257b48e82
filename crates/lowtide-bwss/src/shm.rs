//! The memory the daemon shares with every registered reader: a header with the daemon's
//! heartbeat, and one slot per flow with its read budget (written by the daemon) and its
//! count of bytes read (written by the reader). A `memfd` the daemon passes over its socket.
//!
//! Readers never trust a slot blindly: it carries the socket's inode, and a heartbeat older
//! than [`STALE_AFTER_NS`] means the daemon is gone; either way the reader passes through.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// "LTBWSS05" (the slot's clamp became a number of round trips, `clamp_milli_rtts`).
pub const MAGIC: u64 = 0x4c54_4257_5353_3035;
/// Flows one daemon steers at once.
pub const SLOTS: usize = 4096;
/// A heartbeat older than this means the daemon is gone.
pub const STALE_AFTER_NS: u64 = 1_500_000_000;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    heartbeat_ns: AtomicU64,
    slots: AtomicU64,
    _pad: [AtomicU64; 5],
}

/// One flow's shared state.
#[repr(C)]
pub struct Slot {
    /// The socket's inode; 0 while the slot is free.
    pub inode: AtomicU64,
    /// Bytes/s the reader may take; 0: unsteered.
    pub rate: AtomicU64,
    /// Bytes the reader's bucket may save up.
    pub depth: AtomicU64,
    /// Bytes delivered to the application so far (the reader adds).
    pub bytes_read: AtomicU64,
    /// Bytes that have arrived so far, read or not (`tcpi_bytes_received`; the reader
    /// publishes it every [`crate::fcs::CLAMP_EVERY_MS`] while it reads); 0: not known yet.
    pub bytes_arrived: AtomicU64,
    /// When `bytes_arrived` was taken ([`monotonic_ns`]): a reader that reads rarely (a
    /// starved download) publishes rarely, and the count is as old as this.
    pub arrived_at_ns: AtomicU64,
    /// The window clamp in thousandths of round trips of the rate
    /// ([`crate::Budget::clamp_rtts`]); 0: no clamp.
    pub clamp_milli_rtts: AtomicU64,
    /// The receiver's round-trip estimate, µs (`tcpi_rcv_rtt`, published with
    /// `bytes_arrived`); 0: none yet.
    pub rtt_us: AtomicU64,
}

const LEN: usize = size_of::<Header>() + SLOTS * size_of::<Slot>();

// The layout every process maps: a 64-byte header, then 64-byte slots, all 8-byte atomics
// (so a slot starts 8-aligned wherever the header ends, and a page-aligned mapping aligns all).
const _: () = assert!(size_of::<Header>() == 64 && size_of::<Slot>() == 64);
const _: () = assert!(align_of::<Header>() == 8 && align_of::<Slot>() == 8);

/// The header of the region at `base`.
///
/// # Safety
/// `base` is 8-aligned and valid for reads and writes of [`LEN`] bytes for `'a`, and those
/// bytes are only accessed through atomics (every field of `Header` and `Slot` is one).
unsafe fn header_at<'a>(base: *mut u8) -> &'a Header {
    // SAFETY: by the contract, `base` holds a Header (LEN >= its size, aligned); any bit
    // pattern is a valid AtomicU64.
    unsafe { &*(base as *const Header) }
}

/// Slot `i` of the region at `base`, if it exists.
///
/// # Safety
/// As for [`header_at`].
unsafe fn slot_at<'a>(base: *mut u8, i: u32) -> Option<&'a Slot> {
    let i = i as usize;
    (i < SLOTS).then(|| {
        // SAFETY: slot `i` < SLOTS lies within the LEN bytes after the header; it is 8-aligned
        // (the header's size and a slot's are multiples of 8, checked above).
        unsafe { &*(base.add(size_of::<Header>()) as *const Slot).add(i) }
    })
}

/// A mapping of the shared memory.
pub struct Region {
    ptr: *mut u8,
    fd: OwnedFd,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// A new, zeroed region (the daemon).
    pub fn create() -> io::Result<Region> {
        // SAFETY: the name is a NUL-terminated literal.
        let fd = unsafe { libc::memfd_create(c"lowtide-bwss".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: resizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), LEN as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let r = Region::map(fd)?;
        r.header().slots.store(SLOTS as u64, Ordering::Relaxed);
        r.header().magic.store(MAGIC, Ordering::Release);
        Ok(r)
    }

    /// Maps a region received from the daemon, checking its magic and size.
    pub fn map(fd: OwnedFd) -> io::Result<Region> {
        // SAFETY: a shared mapping of a descriptor we own, of the size it was made with.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let r = Region {
            ptr: ptr.cast(),
            fd,
        };
        let magic = r.header().magic.load(Ordering::Acquire);
        if magic != 0 && magic != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the daemon's shared memory has another layout (a different lowtide version?)",
            ));
        }
        Ok(r)
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is LEN bytes, page-aligned, lives as long as `self`, and every
        // process maps it as atomics only.
        unsafe { header_at(self.ptr) }
    }

    /// Slot `i`, if it exists.
    pub fn slot(&self, i: u32) -> Option<&Slot> {
        // SAFETY: as for `header`.
        unsafe { slot_at(self.ptr, i) }
    }

    /// The daemon marks itself alive.
    pub fn beat(&self) {
        self.header()
            .heartbeat_ns
            .store(monotonic_ns(), Ordering::Release);
    }

    /// Whether the daemon beat recently.
    pub fn alive(&self, now_ns: u64) -> bool {
        let hb = self.header().heartbeat_ns.load(Ordering::Acquire);
        hb != 0 && now_ns.saturating_sub(hb) < STALE_AFTER_NS
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of LEN bytes.
        unsafe { libc::munmap(self.ptr.cast(), LEN) };
    }
}

/// CLOCK_MONOTONIC in ns (one clock for every process and namespace of the host).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout alone, on an ordinary 8-aligned allocation of LEN bytes (Miri can run
    /// this; it cannot map a memfd): every field of every slot is its own memory, none
    /// overlaps the header or another slot, and the last slot ends at LEN.
    /// `bash run.sh miri` runs it under Miri.
    #[test]
    fn slots_and_header_do_not_overlap() {
        fn fields(s: &Slot) -> [&AtomicU64; 8] {
            [
                &s.inode,
                &s.rate,
                &s.depth,
                &s.bytes_read,
                &s.bytes_arrived,
                &s.arrived_at_ns,
                &s.clamp_milli_rtts,
                &s.rtt_us,
            ]
        }
        let words: Vec<AtomicU64> = (0..LEN / 8).map(|_| AtomicU64::new(0)).collect();
        let base = words.as_ptr() as *mut u8;
        // SAFETY: `words` is LEN bytes of 8-aligned atomics and outlives every use below.
        let header = unsafe { header_at(base) };
        // SAFETY: as above.
        let slot = |i| unsafe { slot_at(base, i) };
        header.magic.store(MAGIC, Ordering::Relaxed);
        header.heartbeat_ns.store(1, Ordering::Relaxed);
        header.slots.store(SLOTS as u64, Ordering::Relaxed);
        for i in 0..SLOTS as u32 {
            for (k, f) in fields(slot(i).unwrap()).into_iter().enumerate() {
                f.store(
                    (u64::from(i) << 8) | k as u64 | (1 << 40),
                    Ordering::Relaxed,
                );
            }
        }
        assert!(slot(SLOTS as u32).is_none());
        assert_eq!(header.magic.load(Ordering::Relaxed), MAGIC);
        assert_eq!(header.heartbeat_ns.load(Ordering::Relaxed), 1);
        assert_eq!(header.slots.load(Ordering::Relaxed), SLOTS as u64);
        for i in 0..SLOTS as u32 {
            for (k, f) in fields(slot(i).unwrap()).into_iter().enumerate() {
                assert_eq!(
                    f.load(Ordering::Relaxed),
                    (u64::from(i) << 8) | k as u64 | (1 << 40)
                );
            }
        }
        let last = slot(SLOTS as u32 - 1).unwrap() as *const Slot as usize;
        assert_eq!(last + size_of::<Slot>() - base as usize, LEN);
    }

    #[test]
    #[cfg_attr(miri, ignore = "memfd_create and a shared mmap: not under Miri")]
    fn a_second_mapping_sees_the_first() {
        let a = Region::create().unwrap();
        let fd = a.fd().try_clone().unwrap();
        let b = Region::map(fd).unwrap();
        assert!(!b.alive(monotonic_ns()));
        a.beat();
        assert!(b.alive(monotonic_ns()));
        a.slot(7).unwrap().rate.store(1234, Ordering::Relaxed);
        assert_eq!(b.slot(7).unwrap().rate.load(Ordering::Relaxed), 1234);
        assert!(b.slot(SLOTS as u32).is_none());
        assert!(!b.alive(monotonic_ns() + STALE_AFTER_NS));
    }
}
