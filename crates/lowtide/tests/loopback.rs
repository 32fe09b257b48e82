//! Loopback tests of the tokio driver against real Linux TCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use lowtide::{
    sys, ChannelConfig, Config, ControllerConfig, Error, Event, Message, StreamConfig, TlsConfig,
};
use lowtide_proto::wire::{DataFrame, FirstChunk, Frame, Hello, VERSION};
use lowtide_proto::ProtocolError;

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn with_controller(c: ControllerConfig) -> ChannelConfig {
    ChannelConfig {
        transport: Config {
            controller: c,
            ..Config::default()
        },
        ..ChannelConfig::default()
    }
}

async fn pair(
    client: ChannelConfig,
    server: ChannelConfig,
) -> (lowtide::Channel, lowtide::Channel) {
    let l = lowtide::listen(any_port(), server).await.unwrap();
    let addr = l.local_addr().unwrap();
    let (c, s) = tokio::join!(lowtide::connect(addr, client), l.accept());
    (c.unwrap(), s.unwrap())
}

#[tokio::test(flavor = "current_thread")]
async fn every_controller_round_trips_messages_with_write_and_receive_times() {
    for ctl in [
        ControllerConfig::Unlimited,
        ControllerConfig::NotsentLowat { bytes: 8192 },
        ControllerConfig::MinBuf { a: 1, b: 3 },
        ControllerConfig::MinBuf { a: 1, b: 0 },
        ControllerConfig::PaceA { b: 3 },
    ] {
        let mut cfg = with_controller(ctl);
        cfg.mss = Some(1448);
        round_trip(cfg, ChannelConfig::default()).await;
    }
}

/// MPTCP on both ends (`ChannelConfig::mptcp`): the channel's socket is an MPTCP one, and
/// every controller still round-trips (the kernel answers TCP_INFO and SIOCOUTQ for it).
#[tokio::test(flavor = "current_thread")]
async fn mptcp_channels_round_trip_on_mptcp_sockets() {
    for ctl in [
        ControllerConfig::Unlimited,
        ControllerConfig::MinBuf { a: 1, b: 3 },
    ] {
        let cfg = ChannelConfig {
            mptcp: true,
            ..with_controller(ctl)
        };
        let (c, s) = pair(cfg.clone(), cfg.clone()).await;
        // SO_PROTOCOL names the socket's protocol: IPPROTO_MPTCP (262), not IPPROTO_TCP.
        let fd = c.active_fd().get();
        // SAFETY: the channel keeps `fd` open while it lives; the test only reads an option.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let proto = socket2::SockRef::from(&fd).protocol().unwrap();
        assert_eq!(proto, Some(socket2::Protocol::MPTCP));
        c.close(0, "checked").await;
        drop(s);
        round_trip(cfg.clone(), cfg).await;
    }
    let both = ChannelConfig {
        mptcp: true,
        transport: Config {
            failover: Some(lowtide::proto::FailoverConfig::default()),
            ..Config::default()
        },
        ..ChannelConfig::default()
    };
    let e = lowtide::connect(any_port(), both).await.unwrap_err();
    assert!(e.to_string().contains("mptcp"), "{e}");
}

/// A network path whose address no interface has: the connect fails before any packet, and
/// the error says which setting to check.
#[tokio::test(flavor = "current_thread")]
async fn a_local_address_the_host_lacks_is_named() {
    let l = lowtide::listen(any_port(), ChannelConfig::default())
        .await
        .unwrap();
    let cfg = ChannelConfig {
        local_addrs: vec!["192.0.2.77".parse().unwrap()],
        ..ChannelConfig::default()
    };
    let e = lowtide::connect(l.local_addr().unwrap(), cfg)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("192.0.2.77") && text.contains("check local_addrs"),
        "{text}"
    );
    let v6 = ChannelConfig {
        local_addrs: vec!["::1".parse().unwrap()],
        ..ChannelConfig::default()
    };
    let e = lowtide::connect(l.local_addr().unwrap(), v6)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("family"), "{e}");
}

async fn round_trip(cfg: ChannelConfig, server: ChannelConfig) {
    let (c, s) = pair(cfg, server).await;
    let st = c.open_stream(StreamConfig::default()).unwrap();
    let n = 200;
    let sender = async {
        for i in 0..n {
            c.send_when_writable(
                st,
                Message::new(vec![i as u8; 1448]).importance((i % 3) as u8),
            )
            .await
            .unwrap();
        }
    };
    let receiver = async {
        let mut got = Vec::new();
        while got.len() < n {
            got.push(s.recv().await.unwrap());
        }
        got
    };
    let ((), got) = tokio::join!(sender, receiver);
    let mut written = std::collections::HashMap::new();
    let mut acked = 0;
    while acked < n {
        match tokio::time::timeout(Duration::from_secs(5), c.next_event())
            .await
            .expect("events keep coming")
        {
            Some(Event::Written { id, times }) => {
                written.insert(id.seq, times.last_write.unwrap());
            }
            Some(Event::Acked { .. }) => acked += 1,
            Some(_) => {}
            None => panic!("channel ended early"),
        }
    }
    assert_eq!(written.len(), n);
    for r in &got {
        assert_eq!(r.stream, st);
        assert_eq!(r.data.len(), 1448);
        assert_eq!(r.data[0], r.seq as u8);
        let w = written[&r.seq];
        assert!(
            w <= r.received_at,
            "protocol latency is receive time minus write time"
        );
    }
    c.close(0, "done").await;
    assert!(s.recv().await.is_none());
}

/// Sends bulk to a receiver that does not read, sampling SIOCOUTQ; returns the largest
/// `outq - bound` seen (bound = MIN_BUF limit from TCP_INFO plus one write) and the largest outq.
/// With `tls`, over TLS, where one write is one batch of plaintext in MSS-sized records.
async fn flood_slow_reader(controller: ControllerConfig, tls: Option<&TestCerts>) -> (i64, u32) {
    let mut client = with_controller(controller);
    client.sndbuf = Some(2 << 20);
    client.mss = Some(1448);
    let mut server = ChannelConfig::default();
    server.transport.max_reassembly_bytes = 1 << 20;
    server.rcvbuf = Some(256 << 10);
    let mut one_write = client.transport.max_batch;
    if let Some(certs) = tls {
        client.tls = Some(certs.client());
        server.tls = Some(certs.server());
        let payload = 1448 - lowtide::TLS_RECORD_OVERHEAD as u64;
        one_write += one_write.div_ceil(payload) * lowtide::TLS_RECORD_OVERHEAD as u64;
    }
    let (c, s) = pair(client.clone(), server).await;
    let st = c.open_stream(StreamConfig::default()).unwrap();
    for _ in 0..200 {
        c.send(st, Message::new(vec![7u8; 64 << 10])).unwrap();
    }
    let mut worst = i64::MIN;
    let mut max_outq = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(400) {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let fd = c.raw_fd();
        let i = sys::tcp_info(fd).unwrap();
        let outq = sys::outq(fd).unwrap();
        let limit = (u64::from(i.tcpi_snd_cwnd)
            + u64::from(i.tcpi_snd_cwnd.min(3))
            + u64::from(i.tcpi_sacked))
            * u64::from(i.tcpi_snd_mss);
        worst = worst.max(i64::from(outq) - (limit + one_write) as i64);
        max_outq = max_outq.max(outq);
    }
    // Under TLS, the read that fills the budget may complete one record rustls already held
    // in part: at most one record (16 KiB + 256) more (see docs/tls.md).
    let slack = if tls.is_some() { (16 << 10) + 256 } else { 0 };
    let mem = s.recv_memory();
    assert!(mem <= (1 << 20) + slack, "{mem} bytes of receive memory");
    // The receiver stalls for 400 ms: a blocked sender must sleep on kernel events, not poll.
    let wakeups = c.driver_wakeups();
    assert!(
        wakeups < 200,
        "{wakeups} driver wake-ups while the peer was stalled"
    );
    if matches!(controller, ControllerConfig::MinBuf { .. }) {
        assert!(
            c.notsent_lowat_set().is_some(),
            "MinBuf waits through TCP_NOTSENT_LOWAT"
        );
    }
    (worst, max_outq)
}

#[tokio::test(flavor = "current_thread")]
async fn min_buf_keeps_siocoutq_within_allowance_plus_one_write() {
    min_buf_bound(None).await;
}

async fn min_buf_bound(tls: Option<&TestCerts>) {
    let (worst, max_minbuf) = flood_slow_reader(ControllerConfig::MinBuf { a: 1, b: 3 }, tls).await;
    assert!(
        worst <= 0,
        "SIOCOUTQ exceeded the MIN_BUF allowance + one write by {worst} bytes"
    );
    let (_, max_unlimited) = flood_slow_reader(ControllerConfig::Unlimited, tls).await;
    eprintln!(
        "tls={}: MinBuf(1,3) max SIOCOUTQ {max_minbuf} B, {} B below its bound; Unlimited {max_unlimited} B",
        tls.is_some(),
        -worst
    );
    assert!(
        max_unlimited > max_minbuf + (1 << 20),
        "plain TCP should fill its send buffer: {max_unlimited} vs MinBuf {max_minbuf}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn notsent_lowat_and_congestion_control_are_set_on_the_socket() {
    let mut cfg = with_controller(ControllerConfig::NotsentLowat { bytes: 16384 });
    cfg.congestion = Some("reno".into());
    let (c, s) = pair(cfg, ChannelConfig::default()).await;
    let st = c.open_stream(StreamConfig::default()).unwrap();
    c.send(st, Message::new(vec![1u8; 100])).unwrap();
    assert_eq!(s.recv().await.unwrap().data.len(), 100);
    assert_eq!(sys::notsent_lowat(c.raw_fd()).unwrap(), 16384);
    assert_eq!(c.notsent_lowat_set(), Some(16384));
    assert_eq!(sys::congestion(c.raw_fd()).unwrap(), "reno");
    assert_eq!(c.stats().messages_written, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn unknown_congestion_control_names_the_call() {
    let cfg = ChannelConfig {
        congestion: Some("nosuchcc".into()),
        ..ChannelConfig::default()
    };
    let e = lowtide::listen(any_port(), cfg).await.unwrap_err();
    assert!(
        matches!(&e, Error::Io { what, .. } if what.contains("TCP_CONGESTION") && what.contains("nosuchcc")),
        "{e}"
    );
}

/// A raw TCP peer that speaks the handshake and then whatever the test wants.
async fn raw_peer(limit: u64) -> (lowtide::Channel, tokio::net::TcpStream) {
    let mut cfg = ChannelConfig::default();
    cfg.transport.max_reassembly_bytes = limit;
    cfg.transport.max_message_size = 1 << 20;
    // a small kernel receive buffer, so that back-pressure reaches the flooding peer quickly
    cfg.rcvbuf = Some(128 << 10);
    let l = lowtide::listen(any_port(), cfg).await.unwrap();
    let addr = l.local_addr().unwrap();
    let (raw, ch) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
    let mut raw = raw.unwrap();
    let mut hello = Vec::new();
    Hello {
        version: VERSION,
        options: vec![],
    }
    .encode(&mut hello);
    raw.write_all(&hello).await.unwrap();
    (ch.unwrap(), raw)
}

/// Reads what the channel sent until EOF and returns the CLOSE frame's code and reason.
async fn read_close(raw: &mut tokio::net::TcpStream) -> (u64, String) {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut buf)).await;
    close_in(&buf)
}

fn close_in(buf: &[u8]) -> (u64, String) {
    let (_, mut pos) = Hello::decode(buf).unwrap().unwrap();
    while let Some((f, n)) = Frame::decode(&buf[pos..], 1 << 20).unwrap() {
        if let Frame::Close { code, reason } = f {
            return (code, reason.to_owned());
        }
        pos += n;
    }
    panic!("no CLOSE frame in {} bytes", buf.len());
}

#[tokio::test(flavor = "current_thread")]
async fn flooding_peer_cannot_exceed_receive_memory_and_garbage_closes_with_an_error() {
    let limit = 2 << 20;
    let (ch, raw) = raw_peer(limit).await;
    let (mut rd, mut wr) = raw.into_split();
    // 200 complete 60 kB messages (12 MB), then garbage.
    let writer = tokio::spawn(async move {
        let payload = vec![9u8; 60_000];
        let mut frame = Vec::new();
        for seq in 0..200u64 {
            frame.clear();
            let first = FirstChunk {
                importance: 0,
                send_time_us: 0,
                total_len: 60_000,
            };
            Frame::Data(DataFrame {
                stream: 0,
                seq,
                offset: 0,
                first: Some(first),
                payload: &payload,
            })
            .encode(&mut frame);
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = wr.write_all(&[0x7f, 0x01, 0x02]).await;
        let _ = wr.flush().await;
        // keep the write half open until the test ends
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    // The application reads nothing for a while: the receiver must stop reading.
    let mut peak = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        peak = peak.max(ch.recv_memory());
    }
    assert!(peak <= limit, "{peak} > {limit}");
    assert!(
        peak > limit / 2,
        "the flood should have filled the budget: {peak}"
    );
    assert!(
        !writer.is_finished(),
        "the flood should be blocked by TCP flow control"
    );
    // Now the app drains; the flood resumes, then the garbage closes the channel.
    let mut n = 0;
    while tokio::time::timeout(Duration::from_secs(5), ch.recv())
        .await
        .unwrap()
        .is_some()
    {
        n += 1;
        assert!(ch.recv_memory() <= limit);
    }
    assert_eq!(n, 200);
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut buf)).await;
    let (code, reason) = close_in(&buf);
    assert_eq!(code, 1, "{reason}");
    assert!(reason.contains("unknown frame type"), "{reason}");
    assert!(
        matches!(ch.error(), Some(Error::Protocol(ProtocolError::Decode(_)))),
        "{:?}",
        ch.error()
    );
    writer.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn oversized_and_partial_floods_get_precise_errors() {
    let (ch, mut raw) = raw_peer(4 << 20).await;
    let mut f = Vec::new();
    let first = FirstChunk {
        importance: 0,
        send_time_us: 0,
        total_len: 2 << 20,
    };
    Frame::Data(DataFrame {
        stream: 0,
        seq: 0,
        offset: 0,
        first: Some(first),
        payload: b"x",
    })
    .encode(&mut f);
    raw.write_all(&f).await.unwrap();
    assert_eq!(read_close(&mut raw).await.0, 2);
    ch.finished().await;
    assert!(
        matches!(ch.error(), Some(Error::Protocol(ProtocolError::MessageTooLarge { size, .. })) if size == 2 << 20)
    );

    let (ch, mut raw) = raw_peer(1 << 20).await;
    let payload = vec![1u8; 60_000];
    let mut f = Vec::new();
    for seq in 0..40u64 {
        let first = FirstChunk {
            importance: 0,
            send_time_us: 0,
            total_len: 1 << 20,
        };
        Frame::Data(DataFrame {
            stream: 0,
            seq,
            offset: 0,
            first: Some(first),
            payload: &payload,
        })
        .encode(&mut f);
    }
    let _ = raw.write_all(&f).await;
    assert_eq!(read_close(&mut raw).await.0, 4);
    ch.finished().await;
    assert!(matches!(
        ch.error(),
        Some(Error::Protocol(
            ProtocolError::ReassemblyMemoryExceeded { .. }
        ))
    ));
    assert!(ch.recv_memory() <= 1 << 20);
}

// ---------------------------------------------------------------- TLS

/// A self-signed certificate for 127.0.0.1 and its key in a temporary directory, removed on
/// drop (also when the test panics).
struct TestCerts {
    dir: std::path::PathBuf,
}

impl TestCerts {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lowtide-tls-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .unwrap();
        std::fs::write(dir.join("cert.pem"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), c.key_pair.serialize_pem()).unwrap();
        Self { dir }
    }

    fn client(&self) -> TlsConfig {
        let mut t = TlsConfig::client(self.dir.join("cert.pem"), None);
        t.handshake_timeout_ms = 1_000;
        t
    }

    fn server(&self) -> TlsConfig {
        let mut t = TlsConfig::server(self.dir.join("cert.pem"), self.dir.join("key.pem"));
        t.handshake_timeout_ms = 1_000;
        t
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn tls_round_trips_messages_with_write_and_receive_times() {
    let certs = TestCerts::new();
    for ctl in [
        ControllerConfig::Unlimited,
        ControllerConfig::MinBuf { a: 1, b: 3 },
    ] {
        let mut client = with_controller(ctl);
        client.mss = Some(1448);
        client.tls = Some(certs.client());
        let server = ChannelConfig {
            tls: Some(certs.server()),
            ..ChannelConfig::default()
        };
        round_trip(client, server).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn min_buf_keeps_siocoutq_within_allowance_plus_one_write_under_tls() {
    min_buf_bound(Some(&TestCerts::new())).await;
}

/// Runs `connect` against `server` and both ends' handshakes; returns both results and how
/// long it took.
async fn handshake(
    client: ChannelConfig,
    server: ChannelConfig,
) -> (
    Result<lowtide::Channel, Error>,
    Result<lowtide::Channel, Error>,
    Duration,
) {
    let l = lowtide::listen(any_port(), server).await.unwrap();
    let addr = l.local_addr().unwrap();
    let t0 = Instant::now();
    let (c, s) = tokio::join!(lowtide::connect(addr, client), l.accept());
    (c, s, t0.elapsed())
}

fn tls_error(r: &Result<lowtide::Channel, Error>) -> String {
    match r {
        Err(e @ (Error::Tls(_) | Error::PeerNotTls { .. })) => e.to_string(),
        Err(e) => panic!("not a TLS error: {e}"),
        Ok(_) => panic!("the handshake should fail"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn tls_bad_peers_get_clear_errors_without_hanging() {
    let ours = TestCerts::new();
    let theirs = TestCerts::new();
    let tls_client = |certs: &TestCerts| ChannelConfig {
        tls: Some(certs.client()),
        ..ChannelConfig::default()
    };
    let tls_server = ChannelConfig {
        tls: Some(ours.server()),
        ..ChannelConfig::default()
    };

    // A server certificate the client does not trust.
    let (c, s, took) = handshake(tls_client(&theirs), tls_server.clone()).await;
    let e = tls_error(&c);
    assert!(e.contains("certificate"), "{e}");
    let e = tls_error(&s);
    assert!(e.contains("alert") || e.contains("closed"), "{e}");
    assert!(took < Duration::from_millis(900), "{took:?}");

    // A plaintext client on the TLS port: the server refuses it, the client's channel ends.
    let (c, s, _) = handshake(ChannelConfig::default(), tls_server.clone()).await;
    let e = tls_error(&s);
    assert!(e.contains("plaintext lowtide, not TLS"), "{e}");
    let c = c.unwrap();
    tokio::time::timeout(Duration::from_secs(5), c.finished())
        .await
        .expect("the plaintext client's channel ends");
    let e = c.error().expect("the plaintext client's channel failed");
    assert_eq!(e.mistake(), Some(lowtide::Mistake::PeerSpeaksTls), "{e}");

    // A TLS client to a plaintext server: an error within the handshake timeout.
    let (c, s, took) = handshake(tls_client(&ours), ChannelConfig::default()).await;
    assert_eq!(
        c.as_ref().err().and_then(Error::mistake),
        Some(lowtide::Mistake::PeerSpeaksPlaintext)
    );
    let e = tls_error(&c);
    assert!(e.contains("plaintext lowtide, not TLS"), "{e}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let s = s.unwrap();
    tokio::time::timeout(Duration::from_secs(5), s.finished())
        .await
        .expect("the plaintext server's channel ends");

    // A certificate file that is not one: `listen` names it.
    let bad = ChannelConfig {
        tls: Some(TlsConfig::server(
            ours.dir.join("key.pem"),
            ours.dir.join("key.pem"),
        )),
        ..ChannelConfig::default()
    };
    let e = lowtide::listen(any_port(), bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("key.pem") && e.contains("no CERTIFICATE"), "{e}");
}

/// Bulk goodput of 64 KB messages over loopback with and without TLS, alternating, in one
/// process (both ends on one thread: a ratio, not an absolute figure). Prints; asserts only
/// that both delivered. `cargo test --release -p lowtide --test loopback -- --ignored tls_bulk`
#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement (~6 s)"]
async fn tls_bulk_goodput_beside_plaintext() {
    let certs = TestCerts::new();
    let mut ratios = Vec::new();
    for round in 0..3 {
        let mut mb_s = [0.0; 2];
        for (i, tls) in [false, true].into_iter().enumerate() {
            let mut client = ChannelConfig::default();
            let mut server = ChannelConfig::default();
            if tls {
                client.tls = Some(certs.client());
                server.tls = Some(certs.server());
            }
            let (c, s) = pair(client, server).await;
            let st = c.open_stream(StreamConfig::default()).unwrap();
            let msg = bytes::Bytes::from(vec![5u8; 64 << 10]);
            let t0 = Instant::now();
            let secs = Duration::from_secs(1);
            let sender = async {
                let end = tokio::time::Instant::from_std(t0 + secs);
                while let Ok(r) = tokio::time::timeout_at(end, c.queue_below(1 << 20)).await {
                    r.unwrap();
                    c.send_batch(st, std::iter::repeat_n(msg.clone(), 8))
                        .unwrap();
                }
            };
            let receiver = async {
                let mut got = 0u64;
                let mut out = Vec::new();
                while t0.elapsed() < secs {
                    out.clear();
                    if s.recv_many(&mut out, 64).await == 0 {
                        break;
                    }
                    got += out.iter().map(|m| m.data.len() as u64).sum::<u64>();
                }
                got
            };
            let ((), got) = tokio::join!(sender, receiver);
            assert!(got > 0);
            mb_s[i] = got as f64 / t0.elapsed().as_secs_f64() / 1e6;
            c.close(0, "done").await;
        }
        eprintln!(
            "round {round}: plaintext {:.0} MB/s, TLS {:.0} MB/s, TLS/plaintext {:.2}",
            mb_s[0],
            mb_s[1],
            mb_s[1] / mb_s[0]
        );
        ratios.push(mb_s[1] / mb_s[0]);
    }
    ratios.sort_by(f64::total_cmp);
    eprintln!("median TLS/plaintext goodput: {:.2}", ratios[1]);
}

/// `SO_REUSEPORT` through [`lowtide::Listener::from_std`]: two listeners (as two server
/// processes, one per core, would hold) share one port, the kernel spreads connections over
/// both by their 4-tuple, and each accepts working channels. With 32 connections the chance
/// that all land on one listener is 2·2⁻³², so the test does not flake.
#[tokio::test(flavor = "current_thread")]
async fn two_reuseport_listeners_share_a_port_and_both_accept_channels() {
    const CHANNELS: usize = 32;
    let bind = |addr: SocketAddr| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_reuse_port(true).unwrap();
        s.bind(&addr.into()).unwrap();
        s.listen(128).unwrap();
        std::net::TcpListener::from(s)
    };
    let first = bind(any_port());
    let addr = first.local_addr().unwrap();
    let second = bind(addr);
    assert_eq!(second.local_addr().unwrap(), addr);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut acceptors = Vec::new();
    for (index, std_listener) in [first, second].into_iter().enumerate() {
        let l = lowtide::Listener::from_std(std_listener, ChannelConfig::default()).unwrap();
        let tx = tx.clone();
        acceptors.push(tokio::spawn(async move {
            loop {
                let ch = l.accept().await.unwrap();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let m = ch.recv().await.expect("one message");
                    tx.send((index, m.data)).unwrap();
                    ch.finished().await;
                });
            }
        }));
    }
    let mut clients = Vec::new();
    for i in 0..CHANNELS {
        let ch = lowtide::connect(addr, ChannelConfig::default())
            .await
            .unwrap();
        let s = ch.open_stream(StreamConfig::default()).unwrap();
        ch.send(s, Message::new(format!("channel {i}").into_bytes()))
            .unwrap();
        clients.push(ch);
    }
    let mut per_listener = [0usize; 2];
    let mut payloads = Vec::new();
    for _ in 0..CHANNELS {
        let (index, data) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("every channel's message arrives")
            .unwrap();
        per_listener[index] += 1;
        payloads.push(String::from_utf8(data.to_vec()).unwrap());
    }
    payloads.sort();
    let mut want: Vec<String> = (0..CHANNELS).map(|i| format!("channel {i}")).collect();
    want.sort();
    assert_eq!(payloads, want);
    assert!(
        per_listener.iter().all(|&n| n > 0),
        "both listeners accept: {per_listener:?}"
    );
    for ch in &clients {
        ch.close(0, "done").await;
    }
    for a in acceptors {
        a.abort();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn listener_from_std_outside_a_runtime_is_an_error() {
    let std_listener = std::net::TcpListener::bind(any_port()).unwrap();
    let r = std::thread::spawn(move || {
        lowtide::Listener::from_std(std_listener, ChannelConfig::default()).map(|_| ())
    })
    .join()
    .unwrap();
    match r {
        Err(Error::Io { what, .. }) => assert_eq!(what, "Listener::from_std"),
        other => panic!("{other:?}"),
    }
}

/// The driver reads at most about 1 MB (four reads) ahead of an application that has not taken
/// its messages, far below the receive budget (32 MB by default): the rest waits in the
/// kernel, and every message still arrives once the application reads.
#[tokio::test(flavor = "current_thread")]
async fn the_driver_reads_only_a_bounded_amount_ahead_of_the_application() {
    let (client, server) = pair(ChannelConfig::default(), ChannelConfig::default()).await;
    let s = client.open_stream(StreamConfig::default()).unwrap();
    let msgs = 128; // 8 MB of 64 KB messages
    client
        .send_batch(
            s,
            (0..msgs).map(|_| bytes::Bytes::from(vec![3u8; 64 << 10])),
        )
        .unwrap();
    // The application takes nothing for a while; the driver must stop reading.
    let mut peak = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        peak = peak.max(server.recv_memory());
    }
    let read_chunk = ChannelConfig::default().read_chunk as u64;
    // four reads ahead, plus the read that crossed the line and the frame it ended in
    let bound = 4 * read_chunk + read_chunk + (64 << 10) + 64;
    assert!(
        peak >= 2 * read_chunk,
        "the driver should have read ahead: {peak}"
    );
    assert!(peak <= bound, "read {peak} bytes ahead, bound {bound}");
    let mut n = 0;
    while n < msgs {
        let m = tokio::time::timeout(Duration::from_secs(10), server.recv())
            .await
            .expect("every message arrives once the application reads")
            .expect("a message");
        assert_eq!(m.data.len(), 64 << 10);
        n += 1;
    }
}

/// A channel that sends and receives: while its application leaves received messages waiting
/// (the read-ahead bound reached), the P-ACKs for what it sends still arrive and are acted on,
/// although they come in the peer's byte stream behind data nobody has taken. Without reading
/// on while its own messages await a P-ACK, the driver left them in the kernel until the
/// application read (no `Acked` within a second).
#[tokio::test(flavor = "current_thread")]
async fn p_acks_still_arrive_while_the_application_leaves_messages_waiting() {
    let (client, server) = pair(ChannelConfig::default(), ChannelConfig::default()).await;
    let down = server.open_stream(StreamConfig::default()).unwrap();
    let msgs = 128; // 8 MB of 64 KB messages the client's application does not take for now
    server
        .send_batch(
            down,
            (0..msgs).map(|_| bytes::Bytes::from(vec![3u8; 64 << 10])),
        )
        .unwrap();
    let read_chunk = ChannelConfig::default().read_chunk as u64;
    let t0 = Instant::now();
    while client.recv_memory() < 4 * read_chunk {
        assert!(t0.elapsed() < Duration::from_secs(5), "no read-ahead");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let up = client.open_stream(StreamConfig::default()).unwrap();
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let id = client.send(up, Message::new(vec![1u8; 1000])).unwrap();
        let sent = Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_secs(1), client.next_event()).await {
                Ok(Some(Event::Acked { id: acked, .. })) if acked == id => break,
                Ok(Some(_)) => continue,
                Ok(None) => panic!("channel ended"),
                Err(_) => panic!("message {i}: no P-ACK within 1 s while messages waited"),
            }
        }
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("slowest P-ACK while the application held messages: {slowest:?}");
    // loopback answers in well under a millisecond; the margin is for a busy 2-core machine
    assert!(
        slowest < Duration::from_millis(300),
        "slowest P-ACK {slowest:?}"
    );
    for _ in 0..msgs {
        let m = tokio::time::timeout(Duration::from_secs(10), client.recv())
            .await
            .expect("every message arrives once the application reads")
            .expect("a message");
        assert_eq!(m.data.len(), 64 << 10);
    }
    for _ in 0..20 {
        let m = server.recv().await.expect("the client's messages");
        assert_eq!(m.data.len(), 1000);
    }
}
