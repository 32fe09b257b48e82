//! What a write opportunity has to do ([`Connection::transmit_work`]) and the bound on what
//! staging the queue takes ([`Connection::queued_wire_bound`]): the driver spares its kernel
//! samples on them, so they must never say "nothing" when a pass would do something.

use std::time::Instant;

use bytes::Bytes;

use super::limits::hello;
use crate::connection::TransmitWork;
use crate::controller::DbatConfig;
use crate::{Config, Connection, ControllerConfig, Message, Side, StreamConfig, TcpState};

/// A kernel with room and a window: every controller is open.
fn open_kernel() -> TcpState {
    TcpState {
        cwnd: 100,
        mss: 1448,
        ..TcpState::default()
    }
}

/// Stages and "writes" everything the controller allows.
fn drain(c: &mut Connection, now: Instant) {
    c.poll_transmit(now, &open_kernel());
    let n = c.staged_len() as usize;
    c.handle_written(now, n);
}

fn established(controller: ControllerConfig) -> (Connection, Instant) {
    let now = Instant::now();
    let cfg = Config {
        controller,
        ..Config::default()
    };
    let mut c = Connection::new(cfg, Side::Server, now).unwrap();
    c.handle_bytes(now, &hello()).unwrap();
    (c, now)
}

#[test]
fn min_buf_is_idle_only_with_nothing_queued_staged_or_due() {
    let (mut c, now) = established(ControllerConfig::MinBuf { a: 1, b: 3 });
    // our hello (and the P-ACK of the peer's) are still to be written
    assert_ne!(c.transmit_work(), TransmitWork::Nothing);
    drain(&mut c, now);
    assert_eq!(c.transmit_work(), TransmitWork::Nothing);
    let s = c.open_stream(StreamConfig::default()).unwrap();
    drain(&mut c, now);
    c.send(now, s, Message::new(vec![7u8; 1250])).unwrap();
    assert_eq!(c.transmit_work(), TransmitWork::Decide);
    drain(&mut c, now);
    assert_eq!(c.transmit_work(), TransmitWork::Nothing);
    // a CLOSE is a control frame: it goes out whatever the controller says
    c.close(0, "bye");
    assert_eq!(c.transmit_work(), TransmitWork::ControlOnly);
}

#[test]
fn a_controller_that_watches_the_idle_kernel_or_recorded_decisions_always_decide() {
    let (mut c, now) = established(ControllerConfig::Dbat(DbatConfig::default()));
    drain(&mut c, now);
    assert_eq!(c.transmit_work(), TransmitWork::Decide);
    let (mut c, now) = established(ControllerConfig::MinBuf { a: 1, b: 3 });
    c.record_decisions(16);
    drain(&mut c, now);
    assert_eq!(c.transmit_work(), TransmitWork::Decide);
}

#[test]
fn queued_wire_bound_covers_what_staging_the_queue_takes() {
    for sizes in [
        vec![1250usize],
        vec![1; 40],
        vec![0, 1, 63, 64, 65, 700, 5000],
        vec![100_000],
    ] {
        let (mut c, now) = established(ControllerConfig::Unlimited);
        let streams: Vec<u64> = (0..3)
            .map(|_| c.open_stream(StreamConfig::default()).unwrap())
            .collect();
        drain(&mut c, now);
        for (i, &n) in sizes.iter().enumerate() {
            let data = Bytes::from(vec![i as u8; n]);
            c.send(
                now,
                streams[i % 3],
                Message::new(data).importance((i % 4) as u8),
            )
            .unwrap();
        }
        let bound = c.queued_wire_bound();
        c.poll_transmit(now, &open_kernel());
        assert!(!c.has_queued(), "{sizes:?}: all staged in one pass");
        assert!(
            c.staged_len() <= bound,
            "{sizes:?}: staged {} > bound {bound}",
            c.staged_len()
        );
    }
}
