//! lowtide's C API (`include/lowtide.h`, `-llowtide_c`; guide: `docs/c-api.md`).
//!
//! - Objects are opaque 64-bit handles from a table with generation numbers ([`handles`]): a
//!   freed or made-up handle is `LOWTIDE_ERR_BAD_HANDLE`, never undefined behaviour.
//! - Every call returns a [`lowtide_status`]; the failed call's message is in
//!   [`lowtide_last_error`] (thread-local). No panic crosses into C.
//! - A context ([`context`]) owns the tokio runtime that drives its channels; C threads never
//!   run it. Channels ([`channel`]) and listeners ([`listener`]) each have an fd that is
//!   readable while something waits, for `poll`/`epoll`/libuv; `lowtide_recv`,
//!   `lowtide_poll_event` and `lowtide_accept` never block.
//! - Every handle may be used from several threads at once: each call takes the object's own
//!   locks.
//!
//! There are no callbacks: a callback would run on a runtime thread, where a C program's
//! locks and its event loop's rules do not hold; an fd fits every event loop.

#![allow(clippy::missing_safety_doc)] // each `unsafe extern` fn documents its contract
#![deny(clippy::undocumented_unsafe_blocks)] // every unsafe block states its invariant

mod args;
pub mod channel;
pub mod context;
pub mod event;
mod eventfd;
pub mod handles;
pub mod listener;
pub mod status;

pub use channel::*;
pub use context::*;
pub use event::*;
pub use listener::*;
pub use status::*;
