//! The handle's sending side: streams, messages (one, a batch, or when writable), waiting
//! for the queue to drain, cancelling, and the controller's inputs (stream rate, probes).

use std::time::Instant;

use bytes::Bytes;

use lowtide_proto::{Message, MessageId, StreamConfig};

use super::Channel;
use crate::error::Error;

impl Channel {
    /// Opens a stream.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, StreamConfig};
    /// let audio = client.open_stream(StreamConfig::default())?;
    /// let video = client.open_stream(StreamConfig::default())?;
    /// assert_ne!(audio, video);
    /// // The peer learns of a stream when it is opened.
    /// let mut opened = Vec::new();
    /// while opened.len() < 2 {
    ///     if let Some(Event::StreamOpened { stream, .. }) = server.next_event().await {
    ///         opened.push(stream);
    ///     }
    /// }
    /// assert_eq!(opened, [audio, video]);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn open_stream(&self, cfg: StreamConfig) -> Result<u64, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let id = g.conn.open_stream(cfg)?;
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(id)
    }

    /// Queues a message without waiting (see [`writable`](Self::writable)).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let first = client.send(s, Message::new("key frame").importance(3))?;
    /// let second = client.send(s, Message::new("delta"))?;
    /// assert_eq!((first.stream, first.seq, second.seq), (s, 0, 1));
    /// let m = server.recv().await.expect("a message");
    /// assert_eq!((m.seq, m.importance, &m.data[..]), (0, 3, &b"key frame"[..]));
    /// // An unknown stream is an error, not a panic.
    /// assert!(client.send(s + 100, Message::new("lost")).is_err());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn send(&self, stream: u64, msg: Message) -> Result<MessageId, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let id = g.conn.send(Instant::now(), stream, msg)?;
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(id)
    }

    /// Queues several messages under one lock (cheaper for small messages).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// let ticks = (0..100u32).map(|i| bytes::Bytes::from(i.to_be_bytes().to_vec()));
    /// assert_eq!(client.send_batch(s, ticks)?, 100);
    /// let mut got = Vec::new();
    /// while got.len() < 100 {
    ///     server.recv_many(&mut got, 100).await;
    /// }
    /// assert_eq!(got[99].seq, 99);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn send_batch(
        &self,
        stream: u64,
        msgs: impl IntoIterator<Item = Bytes>,
    ) -> Result<usize, Error> {
        let mut g = self.shared.lock();
        self.check_open(&g)?;
        let now = Instant::now();
        let mut n = 0;
        for data in msgs {
            g.conn.send(now, stream, Message::new(data))?;
            n += 1;
        }
        g.can_write = false;
        drop(g);
        self.shared.to_driver.notify_one();
        Ok(n)
    }

    /// Waits until the transport can take more now: nothing of ours is queued or staged and
    /// the latency controller allows a write. A sender that wants the lowest latency writes one
    /// message each time this returns.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // The lowest-latency sender: build each message only when the transport can take it, so
    /// // it carries the freshest data.
    /// for i in 0..10u8 {
    ///     client.writable().await?;
    ///     client.send(s, Message::new(vec![i; 1000]))?;
    /// }
    /// # for _ in 0..10 { server.recv().await.expect("a message"); }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn writable(&self) -> Result<(), Error> {
        self.wait_open(|g| g.can_write).await
    }

    /// [`writable`](Self::writable), then [`send`](Self::send).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for i in 0..3u8 {
    ///     let id = client.send_when_writable(s, Message::new(vec![i; 500])).await?;
    ///     assert_eq!(id.seq, u64::from(i));
    /// }
    /// for i in 0..3u8 {
    ///     assert_eq!(server.recv().await.expect("a message").data[0], i);
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn send_when_writable(&self, stream: u64, msg: Message) -> Result<MessageId, Error> {
        self.writable().await?;
        self.send(stream, msg)
    }

    /// Waits until fewer than `bytes` are queued in lowtide (for bulk senders that keep the
    /// queue topped up rather than writing one message per [`writable`](Self::writable)).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// // The receiver reads as the data comes (a receiver that does not read pushes back).
    /// let reader = tokio::spawn(async move {
    ///     let mut n = 0;
    ///     while n < 64 && server.recv().await.is_some() {
    ///         n += 1;
    ///     }
    ///     n
    /// });
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // A bulk sender keeps about 256 KB queued in lowtide.
    /// for _ in 0..64 {
    ///     client.queue_below(256 << 10).await?;
    ///     client.send(s, Message::new(vec![0u8; 64 << 10]))?;
    /// }
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// assert_eq!(reader.await.expect("the reader"), 64);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn queue_below(&self, bytes: u64) -> Result<(), Error> {
        self.wait_open(|g| g.conn.queued_bytes() < bytes).await
    }

    /// Waits until everything queued has been handed to the kernel (or cancelled).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 200_000]))?;
    /// assert!(client.queued_bytes() > 0); // the driver has not run yet
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0); // all handed to the kernel
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn flush(&self) -> Result<(), Error> {
        self.wait_open(|g| !g.conn.has_queued() && g.conn.staged_len() == 0)
            .await
    }

    /// The stream's bit rate changed, bytes per second (DBAT sizes its slow-start buffer from
    /// it; other controllers ignore it).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::proto::controller::DbatConfig;
    /// use lowtide::{ChannelConfig, ControllerConfig, Message, StreamConfig};
    /// let any = "127.0.0.1:0".parse().unwrap();
    /// let listener = lowtide::listen(any, ChannelConfig::default()).await?;
    /// let dbat = ChannelConfig::with_controller(ControllerConfig::Dbat(DbatConfig::default()));
    /// let (client, server) = tokio::try_join!(
    ///     lowtide::connect(listener.local_addr()?, dbat),
    ///     listener.accept(),
    /// )?;
    /// // The encoder moved from 320 to 640 kbit/s: DBAT plans its slow start for the new rate
    /// // (the effect on the buffer: `lowtide::proto::Connection::set_stream_rate`).
    /// client.set_stream_rate(80_000);
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new(vec![0u8; 10_000]))?;
    /// assert_eq!(server.recv().await.expect("a message").data.len(), 10_000);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn set_stream_rate(&self, bytes_per_sec: u64) {
        self.shared.lock().conn.set_stream_rate(bytes_per_sec);
    }

    /// Asks for a packet-pair probe (`Event::Probed` carries the result); `false` if the peer
    /// does not answer probes or one is in flight.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// assert!(!client.request_probe()); // the server's hello (it answers probes) is not read yet
    /// let s = server.open_stream(StreamConfig::default())?;
    /// server.send(s, Message::new("hello"))?;
    /// client.recv().await.expect("a message"); // now it is
    /// assert!(client.request_probe());
    /// while let Some(e) = client.next_event().await {
    ///     if let Event::Probed(p) = e {
    ///         assert!(p.second_len > 0); // two packets crossed loopback and were timed
    ///         break;
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn request_probe(&self) -> bool {
        let requested = self.shared.lock().conn.request_probe();
        self.shared.to_driver.notify_one();
        requested
    }

    /// Bytes queued in lowtide (not yet staged for the kernel).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// client.send(s, Message::new(vec![0u8; 3000]))?;
    /// assert!(client.queued_bytes() >= 3000); // payload plus frame headers
    /// client.flush().await?;
    /// assert_eq!(client.queued_bytes(), 0);
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn queued_bytes(&self) -> u64 {
        self.shared.lock().conn.queued_bytes()
    }

    /// Withdraws a message not yet completely written; `false` if too late.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// // On a current-thread runtime the driver has not run yet: the message is still queued.
    /// let id = client.send(s, Message::new(vec![0u8; 4000]))?;
    /// assert!(client.cancel(id));
    /// assert_eq!(client.stats().cancelled_unsent, 1);
    /// // The driver publishes the event.
    /// while let Some(e) = client.next_event().await {
    ///     if let Event::Cancelled { id: gone, sent, .. } = e {
    ///         assert_eq!((gone, sent), (id, 0));
    ///         break;
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn cancel(&self, id: MessageId) -> bool {
        let done = self.shared.lock().conn.cancel(id);
        self.shared.to_driver.notify_one();
        done
    }

    /// Closes our direction of a stream once its queue drains.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::{Event, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.close_stream(s)?;
    /// loop {
    ///     match server.next_event().await {
    ///         Some(Event::StreamClosed { stream }) if stream == s => break,
    ///         Some(_) => continue,
    ///         None => panic!("channel ended first"),
    ///     }
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn close_stream(&self, stream: u64) -> Result<(), Error> {
        self.shared.lock().conn.close_stream(stream)?;
        self.shared.to_driver.notify_one();
        Ok(())
    }
}
