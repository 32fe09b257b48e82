//! The stream handles over loopback: `SendStream` per stream, `Channel::messages` as a
//! `futures::Stream`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use futures_util::StreamExt;
use lowtide::{ChannelConfig, Message, StreamConfig};

#[tokio::test(flavor = "current_thread")]
async fn send_streams_and_the_message_stream_deliver_everything_once_except_the_cancelled() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let l = lowtide::listen(any, ChannelConfig::default())
        .await
        .unwrap();
    let (c, s) = tokio::join!(
        lowtide::connect(l.local_addr().unwrap(), ChannelConfig::default()),
        l.accept()
    );
    let (c, s) = (c.unwrap(), s.unwrap());

    let audio = c.open_send_stream(StreamConfig::default()).unwrap();
    let video = c.open_send_stream(StreamConfig::default()).unwrap();
    assert_ne!(audio.id(), video.id());
    // On a current-thread runtime the driver has not run yet: the message is still queued,
    // so cancelling it must succeed and it must never arrive.
    let doomed = video.send(Message::new(vec![9u8; 4000])).unwrap();
    assert!(video.cancel(doomed));

    let n = 50u8;
    let sender = async {
        for i in 0..n {
            audio
                .send_when_writable(Message::new(vec![i; 160]).importance(5))
                .await
                .unwrap();
            video
                .send_when_writable(Message::new(vec![i; 1200]).importance(1))
                .await
                .unwrap();
        }
        audio.finish().unwrap();
        video.finish().unwrap();
        c.flush().await.unwrap();
        c.close(0, "done").await;
    };
    let receiver = async {
        let mut per_stream: BTreeMap<u64, Vec<(u8, u8, usize)>> = BTreeMap::new();
        let mut messages = s.messages();
        while let Some(m) = messages.next().await {
            per_stream
                .entry(m.stream)
                .or_default()
                .push((m.data[0], m.importance, m.data.len()));
        }
        per_stream
    };
    let ((), per_stream) = tokio::join!(sender, receiver);

    let expect = |len: usize, importance: u8| -> Vec<(u8, u8, usize)> {
        (0..n).map(|i| (i, importance, len)).collect()
    };
    assert_eq!(per_stream.len(), 2, "streams seen: {:?}", per_stream.keys());
    assert_eq!(per_stream[&audio.id()], expect(160, 5));
    assert_eq!(
        per_stream[&video.id()],
        expect(1200, 1),
        "the cancelled 4000-byte message must not arrive"
    );
}
