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

struct Slot {
    generation: u32,
    object: Option<Object>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

fn table() -> MutexGuard<'static, Table> {
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

/// Stores `object`; returns its handle (never 0).
pub(crate) fn insert<T: Kind>(object: Arc<T>) -> Result<u64> {
    let mut t = table();
    let index = match t.free.pop() {
        Some(i) => i,
        None => {
            if t.slots.len() >= MAX_HANDLES {
                return fail(
                    LOWTIDE_ERR_INVALID,
                    format!("{MAX_HANDLES} handles are open: free some (a leak?)"),
                );
            }
            t.slots.push(Slot {
                generation: 1,
                object: None,
            });
            (t.slots.len() - 1) as u32
        }
    };
    let slot = &mut t.slots[index as usize];
    slot.object = Some(T::wrap(object));
    Ok(encode(index, slot.generation))
}

/// The object behind `handle`, if it is a live handle of kind `T`.
pub(crate) fn get<T: Kind>(handle: u64) -> Result<Arc<T>> {
    let t = table();
    match lookup(&t, handle) {
        Some(o) => T::unwrap(o)
            .cloned()
            .ok_or_else(|| wrong_kind::<T>(handle, o)),
        None => Err(stale::<T>(handle)),
    }
}

/// Removes `handle` from the table; the object lives on while calls in flight hold it.
pub(crate) fn remove<T: Kind>(handle: u64) -> Result<Arc<T>> {
    let mut t = table();
    let object = match lookup(&t, handle) {
        Some(o) => T::unwrap(o)
            .cloned()
            .ok_or_else(|| wrong_kind::<T>(handle, o))?,
        None => return Err(stale::<T>(handle)),
    };
    let (index, _) = decode(handle).expect("lookup succeeded");
    let slot = &mut t.slots[index];
    slot.object = None;
    slot.generation = slot.generation.checked_add(1).unwrap_or(1);
    t.free.push(index as u32);
    Ok(object)
}

fn lookup(t: &Table, handle: u64) -> Option<&Object> {
    let (index, generation) = decode(handle)?;
    let slot = t.slots.get(index)?;
    if slot.generation != generation {
        return None;
    }
    slot.object.as_ref()
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
    let t = table();
    t.slots.len() - t.free.len()
}
