//! lowtide-tfrc: TCP-Friendly Rate Control (Floyd, Handley, Padhye, Widmer, RFC 5348) over
//! UDP, with lowtide's message model and a send buffer that is fixed or tuned by DBAT (Hasan,
//! Huang, Werstein, "Dynamic Send Buffer Active Tuning for Low Latency Streaming Media").
//!
//! ```text
//! send(msg) ─► send buffer (importance, deadlines; fixed size or DBAT) ─► fragments
//!   ─► rate control (equation, X_recv limit, slow start, no-feedback timer) ─► UDP
//! UDP ─► loss history (NDUPACK, loss events, weighted intervals) ─► feedback once per RTT
//!     └► reassembly (a lost fragment drops its message, counted) ─► poll_message
//! ```
//!
//! Sans IO: [`Endpoint`] takes `now` in every call; [`driver`] runs it on a tokio UDP socket.
//! Modules, one rule each: [`equation`] (§3.1), [`loss`] (§5), [`sender`] (§4), [`receiver`]
//! (§6), [`small_packets`] (RFC 4828's TFRC-SP, an option), [`packet`] (the datagrams),
//! [`buffer`] (send buffer and message model), [`reassembly`], [`endpoint`] (the session
//! end), [`sim`] (a simulated bottleneck for tests).
//! Design and measurements: `docs/tfrc.md`.

pub mod buffer;
pub mod driver;
pub mod endpoint;
pub mod equation;
pub mod loss;
pub mod packet;
pub mod reassembly;
pub mod receiver;
pub mod sender;
pub mod sim;
pub mod small_packets;

pub use buffer::{BufferConfig, DropReason, Message, MessageId, SendError};
pub use endpoint::{Endpoint, Event, Stats, TfrcConfig, TfrcError};
pub use reassembly::Received;
pub use receiver::FirstLossSeed;
pub use sender::InitialWindow;
