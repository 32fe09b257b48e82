//! Handles in the style of quinn's `SendStream`/`RecvStream`: a [`SendStream`] owns one of
//! our streams, and [`Messages`] yields the channel's received messages as a
//! `futures::Stream`.
//!
//! The receive side is one sequence per channel, not one per stream, on purpose: the sender
//! interleaves streams by importance and weight, and the receiver takes messages in arrival
//! order. Per-stream receive halves would need a queue per stream, and a slow reader of one
//! stream would then hold the receive budget (and so the TCP window) for all others. Filter
//! [`Messages`] by [`Received::stream`] where one task serves one stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{BoxStream, Stream, StreamExt};

use lowtide_proto::{Message, MessageId, Received, StreamConfig};

use crate::channel::Channel;
use crate::error::Error;

/// The sending half of one of our streams on a [`Channel`].
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
/// let video = client.open_send_stream(StreamConfig::default())?;
/// let id = video.send_when_writable(Message::new(vec![0u8; 1200]).importance(2)).await?;
/// video.cancel(id); // too late for the frame: withdraw what is not yet written
/// video.finish()?;
/// // The peer sees the stream end.
/// while let Some(e) = server.next_event().await {
///     if e == (Event::StreamClosed { stream: video.id() }) {
///         break;
///     }
/// }
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SendStream {
    channel: Channel,
    id: u64,
}

impl Channel {
    /// Opens a stream and returns its sending half.
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
    /// let a = client.open_send_stream(StreamConfig::default())?;
    /// let b = client.open_send_stream(StreamConfig::default())?;
    /// assert_ne!(a.id(), b.id());
    /// b.send(Message::new("on b"))?;
    /// assert_eq!(server.recv().await.expect("a message").stream, b.id());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn open_send_stream(&self, cfg: StreamConfig) -> Result<SendStream, Error> {
        let id = self.open_stream(cfg)?;
        Ok(SendStream {
            channel: self.clone(),
            id,
        })
    }

    /// The received messages of every stream, in arrival order, as a `futures::Stream`; it
    /// ends once the channel is closed and drained.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use futures_util::StreamExt;
    /// use lowtide::{Message, StreamConfig};
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for i in 0..3u8 {
    ///     client.send(s, Message::new(vec![i; 100]))?;
    /// }
    /// client.flush().await?;
    /// client.close(0, "done").await;
    /// // The stream ends once the channel is closed and drained.
    /// let seqs: Vec<u64> = server.messages().map(|m| m.seq).collect().await;
    /// assert_eq!(seqs, [0, 1, 2]);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn messages(&self) -> Messages {
        let channel = self.clone();
        Messages(
            futures_util::stream::unfold(
                channel,
                |ch| async move { ch.recv().await.map(|m| (m, ch)) },
            )
            .boxed(),
        )
    }
}

impl SendStream {
    /// The stream's id (as [`Received::stream`] at the peer).
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
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// video.send(Message::new("frame"))?;
    /// assert_eq!(server.recv().await.expect("a message").stream, video.id());
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The channel the stream belongs to.
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// # let any = "127.0.0.1:0".parse().unwrap();
    /// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
    /// # let (client, server) = tokio::try_join!(
    /// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
    /// #     listener.accept(),
    /// # )?;
    /// use lowtide::StreamConfig;
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// assert_eq!(video.channel().local_addr(), client.local_addr());
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Queues a message without waiting (see [`Channel::send`]).
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
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// let id = video.send(Message::new("frame 0").importance(2))?;
    /// assert_eq!((id.stream, id.seq), (video.id(), 0));
    /// let m = server.recv().await.expect("a message");
    /// assert_eq!((m.importance, &m.data[..]), (2, &b"frame 0"[..]));
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn send(&self, msg: Message) -> Result<MessageId, Error> {
        self.channel.send(self.id, msg)
    }

    /// Waits until the transport can take more, then queues the message (see
    /// [`Channel::send_when_writable`]).
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
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// for i in 0..3u8 {
    ///     video.send_when_writable(Message::new(vec![i; 100])).await?;
    /// }
    /// for i in 0..3u64 {
    ///     assert_eq!(server.recv().await.expect("a message").seq, i);
    /// }
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn send_when_writable(&self, msg: Message) -> Result<MessageId, Error> {
        self.channel.send_when_writable(self.id, msg).await
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
    /// use lowtide::{Message, StreamConfig};
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// // The driver has not run yet on this current-thread runtime: the frame is still queued.
    /// let late = video.send(Message::new(vec![0u8; 4000]))?;
    /// assert!(video.cancel(late));
    /// assert!(!video.cancel(late)); // already gone
    /// assert_eq!(client.stats().cancelled_unsent, 1);
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn cancel(&self, id: MessageId) -> bool {
        self.channel.cancel(id)
    }

    /// Closes our direction of the stream once its queue drains (quinn's `finish`).
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
    /// let video = client.open_send_stream(StreamConfig::default())?;
    /// video.send(Message::new("last frame"))?;
    /// video.finish()?;
    /// assert!(video.send(Message::new("too late")).is_err());
    /// assert_eq!(server.recv().await.expect("a message").data, "last frame");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn finish(&self) -> Result<(), Error> {
        self.channel.close_stream(self.id)
    }
}

/// A channel's received messages as a `futures::Stream` (see [`Channel::messages`]).
///
/// ```
/// # lowtide::current_thread_runtime()?.block_on(async {
/// # let any = "127.0.0.1:0".parse().unwrap();
/// # let listener = lowtide::listen(any, lowtide::ChannelConfig::default()).await?;
/// # let (client, server) = tokio::try_join!(
/// #     lowtide::connect(listener.local_addr()?, lowtide::ChannelConfig::default()),
/// #     listener.accept(),
/// # )?;
/// use futures_util::StreamExt;
/// use lowtide::{Message, StreamConfig};
/// let audio = client.open_send_stream(StreamConfig::default())?;
/// let video = client.open_send_stream(StreamConfig::default())?;
/// for i in 0..3u8 {
///     audio.send(Message::new(vec![i; 160]))?;
///     video.send(Message::new(vec![i; 1200]))?;
/// }
/// // One task serves one stream: filter by stream id.
/// let audio_only: Vec<_> = server
///     .messages()
///     .filter(|m| std::future::ready(m.stream == audio.id()))
///     .take(3)
///     .collect()
///     .await;
/// assert!(audio_only.iter().all(|m| m.data.len() == 160));
/// # Ok::<(), lowtide::Error>(())
/// # })?;
/// # Ok::<(), lowtide::Error>(())
/// ```
pub struct Messages(BoxStream<'static, Received>);

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Messages")
    }
}

impl Stream for Messages {
    type Item = Received;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Received>> {
        self.0.poll_next_unpin(cx)
    }
}
