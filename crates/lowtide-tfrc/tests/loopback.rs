//! The tokio driver over real UDP sockets on loopback: a short session, no timing assertions
//! (timeouts only stop a hang).

use std::time::Duration;

use lowtide_tfrc::driver::Session;
use lowtide_tfrc::{BufferConfig, Event, Message, TfrcConfig};
use tokio::net::UdpSocket;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(20);

/// A client bound to an ephemeral port and the server it reached (the server learns its
/// peer from the first datagram, so `client` sends a first message).
async fn connect() -> (Session, Session) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let server = tokio::spawn(Session::accept_on(sock, cfg()));
    let client = Session::connect("127.0.0.1:0".parse().unwrap(), addr, cfg())
        .await
        .unwrap();
    client.send(Message::new(&b"hello"[..])).unwrap();
    let server = timeout(LIMIT, server).await.unwrap().unwrap().unwrap();
    let first = timeout(LIMIT, server.recv()).await.unwrap().unwrap();
    assert_eq!(&first.data[..], b"hello");
    (client, server)
}

fn cfg() -> TfrcConfig {
    TfrcConfig {
        buffer: BufferConfig::Fixed { bytes: 1 << 20 },
        ..TfrcConfig::default()
    }
}

/// 60 messages of 1 kB: all of it fits in the receiver's socket buffer (the driver asks for
/// 1 MiB; even the default 208 KiB holds 60 datagrams), so a receiver stalled by a busy
/// machine loses nothing, and every message must arrive intact, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_cross_loopback_intact_and_in_order_and_close_reaches_the_peer() {
    let (client, server) = connect().await;
    for i in 0..60u32 {
        let mut m = vec![(i % 251) as u8; 1000];
        m[..4].copy_from_slice(&i.to_be_bytes());
        client.send(Message::new(m).importance(1)).unwrap();
    }
    assert_eq!(server.peer_addr(), client.local_addr());
    for i in 0..60u32 {
        let r = timeout(LIMIT, server.recv())
            .await
            .expect("message within the limit")
            .expect("session open");
        assert_eq!(r.data.len(), 1000);
        assert_eq!(u32::from_be_bytes(r.data[..4].try_into().unwrap()), i);
        assert!(r.data[4..].iter().all(|&b| b == (i % 251) as u8));
        assert_eq!(r.importance, 1);
    }
    // the sender learned an RTT and a receive rate from the reports
    let (rtt, x_recv) =
        client.with_endpoint(|ep| (ep.rate_control().rtt(), ep.rate_control().x_recv()));
    assert!(rtt.is_some() && x_recv > 0.0, "{rtt:?} {x_recv}");
    let st = server.stats();
    assert_eq!((st.refused_malformed, st.data_lost), (0, 0));
    assert!(st.feedback_sent > 0);

    client.close(0);
    loop {
        match timeout(LIMIT, server.next_event())
            .await
            .expect("close within the limit")
        {
            Some(Event::Closed { by_peer, code }) => {
                assert!(by_peer && code == 0);
                break;
            }
            Some(_) => {}
            None => panic!("closed without a Closed event"),
        }
    }
    assert!(timeout(LIMIT, server.recv()).await.unwrap().is_none());
}

/// Dropping the last handle closes the session: the peer hears CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_session_closes_it() {
    let (client, server) = connect().await;
    let clone = client.clone();
    drop(client);
    assert!(
        !clone.with_endpoint(|ep| ep.is_closed()),
        "a clone keeps it open"
    );
    drop(clone);
    assert!(timeout(LIMIT, server.recv()).await.unwrap().is_none());
    assert!(server.with_endpoint(|ep| ep.is_closed()));
}
