//! A context: the tokio runtime that drives a C program's channels and listeners.
//!
//! Each context owns a multi-thread runtime with its own worker threads; C calls never run
//! the runtime on the caller's thread (blocking calls wait on a channel, not `block_on`), so
//! they may come from any thread, also from inside another runtime. Channels and listeners
//! hold the runtime alive: freeing the context while they are open only drops its handle.

use std::future::Future;
use std::sync::Arc;

use crate::handles::{self, Kind, Object};
use crate::status::{fail, guard, lowtide_status, Result, LOWTIDE_ERR_INVALID, LOWTIDE_ERR_IO};

/// A context handle (0 is never valid).
#[allow(non_camel_case_types)]
pub type lowtide_ctx = u64;

/// Most worker threads a context may ask for.
pub const LOWTIDE_MAX_THREADS: u32 = 64;

pub(crate) struct Context {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Kind for Context {
    const NAME: &'static str = "context";
    fn wrap(this: Arc<Self>) -> Object {
        Object::Context(this)
    }
    fn unwrap(object: &Object) -> Option<&Arc<Self>> {
        match object {
            Object::Context(c) => Some(c),
            _ => None,
        }
    }
}

impl Context {
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.as_ref().expect("set until drop").handle()
    }

    /// Runs `fut` on the runtime and waits for it on the calling thread.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().or_else(|_| {
            fail(
                crate::status::LOWTIDE_ERR_INTERNAL,
                "the context's runtime dropped a task",
            )
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // The last owner may be a runtime thread itself (a channel's task): never wait here.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Creates a context with `threads` worker threads (0: one). Free it with `lowtide_ctx_free`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn lowtide_ctx_new(threads: u32, out: *mut lowtide_ctx) -> lowtide_status {
    guard("lowtide_ctx_new", || {
        crate::args::non_null(out, "out")?;
        let threads = threads.max(1);
        if threads > LOWTIDE_MAX_THREADS {
            return fail(
                LOWTIDE_ERR_INVALID,
                format!("threads = {threads} is outside 0..={LOWTIDE_MAX_THREADS}"),
            );
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads as usize)
            .thread_name("lowtide")
            .enable_all()
            .build()
            .or_else(|e| fail(LOWTIDE_ERR_IO, format!("building a runtime: {e}")))?;
        let h = handles::insert(Arc::new(Context {
            runtime: Some(runtime),
        }))?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { crate::args::write_out(out, h, "out") }
    })
}

/// Releases a context handle. Its threads stop once every channel and listener made with it
/// is freed too.
#[no_mangle]
pub extern "C" fn lowtide_ctx_free(ctx: lowtide_ctx) -> lowtide_status {
    guard("lowtide_ctx_free", || {
        handles::remove::<Context>(ctx).map(drop)
    })
}
