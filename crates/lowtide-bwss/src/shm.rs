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
        // SAFETY: the mapping is at least LEN bytes and page-aligned; Header is atomics.
        unsafe { &*(self.ptr as *const Header) }
    }

    /// Slot `i`, if it exists.
    pub fn slot(&self, i: u32) -> Option<&Slot> {
        let i = i as usize;
        (i < SLOTS).then(|| {
            // SAFETY: within the mapping; Slot is atomics, suitably aligned after Header.
            unsafe { &*(self.ptr.add(size_of::<Header>()) as *const Slot).add(i) }
        })
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

    #[test]
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
