//! The handle table: C holds 64-bit handles, never pointers to Rust objects.
//!
//! A handle is a slot index plus the slot's generation; freeing bumps the generation, so a
//! freed (stale) handle, a made-up number, or a handle of another kind is an error code, never
//! a dangling pointer. Lookups clone an `Arc` under the table's lock and release it at once:
//! a call on one thread and `lowtide_*_free` on another cannot race into freed memory (the call
//! in flight finishes on its clone; later calls get `LOWTIDE_ERR_BAD_HANDLE`).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::status::{fail, Result, LOWTIDE_ERR_BAD_HANDLE, LOWTIDE_ERR_INVALID};

/// Most handles open at once (bounds the table's memory against a leaking caller).
pub(crate) const MAX_HANDLES: usize = 1 << 20;

/// An object C can hold a handle to.
pub(crate) trait Kind: Sized {
    /// For messages: "channel", "listener", "context".
    const NAME: &'static str;
    fn wrap(this: Arc<Self>) -> Object;
    fn unwrap(object: &Object) -> Option<&Arc<Self>>;
}

pub(crate) enum Object {
    Context(Arc<crate::context::Context>),
    Listener(Arc<crate::listener::ListenerObject>),
    Channel(Arc<crate::channel::ChannelObject>),
}

impl Object {
    fn name(&self) -> &'static str {
        match self {
            Object::Context(_) => crate::context::Context::NAME,
            Object::Listener(_) => crate::listener::ListenerObject::NAME,
            Object::Channel(_) => crate::channel::ChannelObject::NAME,
        }
    }
}

struct Slot<O> {
    generation: u32,
    object: Option<O>,
}

/// Slots and the free list, generic over what they hold so the bookkeeping is tested (and
/// run under Miri by `bash run.sh miri`) without tokio or sockets.
struct Table<O> {
    slots: Vec<Slot<O>>,
    free: Vec<u32>,
}

static TABLE: Mutex<Table<Object>> = Mutex::new(Table::new());

fn table() -> MutexGuard<'static, Table<Object>> {
    // A panic while holding the lock cannot leave the table half-updated (every update is one
    // assignment), so a poisoned lock is safe to reuse.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn encode(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (u64::from(index) + 1)
}

/// Slot index and generation; `None` for 0 and numbers no slot could have made.
fn decode(handle: u64) -> Option<(usize, u32)> {
    let low = handle as u32;
    (low != 0).then(|| ((low - 1) as usize, (handle >> 32) as u32))
}

impl<O> Table<O> {
    const fn new() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `object` in a free slot (or a new one, up to `max` slots); its handle.
    fn insert(&mut self, object: O, max: usize) -> Option<u64> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= max {
                    return None;
                }
                self.slots.push(Slot {
                    generation: 1,
                    object: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.object = Some(object);
        Some(encode(index, slot.generation))
    }

    fn lookup(&self, handle: u64) -> Option<&O> {
        let (index, generation) = decode(handle)?;
        let slot = self.slots.get(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.object.as_ref()
    }

    /// Empties the slot of a live `handle`, making every copy of the handle stale.
    fn remove(&mut self, handle: u64) -> Option<O> {
        self.lookup(handle)?;
        let (index, _) = decode(handle)?;
        let slot = &mut self.slots[index];
        let object = slot.object.take();
        slot.generation = slot.generation.checked_add(1).unwrap_or(1);
        self.free.push(index as u32);
        object
    }

    fn open(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// Stores `object`; returns its handle (never 0).
pub(crate) fn insert<T: Kind>(object: Arc<T>) -> Result<u64> {
    match table().insert(T::wrap(object), MAX_HANDLES) {
        Some(h) => Ok(h),
        None => fail(
            LOWTIDE_ERR_INVALID,
            format!("{MAX_HANDLES} handles are open: free some (a leak?)"),
        ),
    }
}

/// The object behind `handle`, if it is a live handle of kind `T`.
pub(crate) fn get<T: Kind>(handle: u64) -> Result<Arc<T>> {
    let t = table();
    match t.lookup(handle) {
        Some(o) => T::unwrap(o)
            .cloned()
            .ok_or_else(|| wrong_kind::<T>(handle, o)),
        None => Err(stale::<T>(handle)),
    }
}

/// Removes `handle` from the table; the object lives on while calls in flight hold it.
pub(crate) fn remove<T: Kind>(handle: u64) -> Result<Arc<T>> {
    let mut t = table();
    let object = match t.lookup(handle) {
        Some(o) => T::unwrap(o)
            .cloned()
            .ok_or_else(|| wrong_kind::<T>(handle, o))?,
        None => return Err(stale::<T>(handle)),
    };
    t.remove(handle);
    Ok(object)
}

fn stale<T: Kind>(handle: u64) -> crate::status::Fail {
    crate::status::Fail {
        status: LOWTIDE_ERR_BAD_HANDLE,
        message: format!(
            "{} handle {handle:#x} is not open (0, already freed, or never returned by lowtide)",
            T::NAME
        ),
    }
}

fn wrong_kind<T: Kind>(handle: u64, o: &Object) -> crate::status::Fail {
    crate::status::Fail {
        status: LOWTIDE_ERR_BAD_HANDLE,
        message: format!("handle {handle:#x} is a {}, not a {}", o.name(), T::NAME),
    }
}

/// Open handles (for tests of leaks).
#[doc(hidden)]
pub fn open_handles() -> usize {
    table().open()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_handle_is_stale_and_its_slot_is_reused() {
        let mut t = Table::new();
        let a = t.insert("a".to_string(), 2).unwrap();
        let b = t.insert("b".to_string(), 2).unwrap();
        assert_ne!(a, 0);
        assert_eq!(t.insert("c".to_string(), 2), None, "the limit holds");
        assert_eq!(t.lookup(a).map(String::as_str), Some("a"));
        assert_eq!(t.remove(a).as_deref(), Some("a"));
        assert_eq!(t.lookup(a), None, "stale");
        assert_eq!(t.remove(a), None, "freed twice");
        let c = t.insert("c".to_string(), 2).unwrap();
        assert_ne!(c, a, "the reused slot has a new generation");
        assert_eq!(c as u32, a as u32, "the same slot");
        assert_eq!(t.lookup(a), None);
        assert_eq!(t.lookup(c).map(String::as_str), Some("c"));
        assert_eq!(t.lookup(b).map(String::as_str), Some("b"));
        assert_eq!(t.open(), 2);
    }

    #[test]
    fn made_up_handles_find_nothing() {
        let mut t = Table::new();
        let h = t.insert(1u8, 8).unwrap();
        for bad in [0, u64::MAX, h + 1, h ^ (1 << 32), h & 0xffff_ffff, 1 << 32] {
            assert_eq!(t.lookup(bad), None, "{bad:#x}");
        }
        assert_eq!(t.lookup(h), Some(&1));
    }

    #[test]
    fn the_generation_wraps_past_zero() {
        let mut t = Table::new();
        t.insert((), 1).unwrap();
        t.slots[0].generation = u32::MAX;
        let h = encode(0, u32::MAX);
        assert_eq!(t.remove(h), Some(()));
        let again = t.insert((), 1).unwrap();
        assert_eq!(decode(again), Some((0, 1)), "generation 0 is never used");
    }
}
