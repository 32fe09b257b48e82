//! The handle's receiving side: messages as they arrive (one, many, or without waiting) and
//! the channel's events.

use lowtide_proto::{Event, Received};

use super::Channel;

impl Channel {
    /// Next complete message; `None` once the channel is closed and drained.
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
    /// client.send(s, Message::new("hello"))?;
    /// let m = server.recv().await.expect("a message");
    /// assert_eq!((m.stream, m.seq, &m.data[..]), (s, 0, &b"hello"[..]));
    /// client.close(0, "done").await;
    /// assert!(server.recv().await.is_none()); // closed and drained
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn recv(&self) -> Option<Received> {
        let (m, budget_was_zero) = self
            .wait_until(|g| {
                let budget_was_zero = self.shared.read_budget(g) == 0;
                match g.conn.poll_message() {
                    Some(m) => Some(Some((m, budget_was_zero))),
                    None => g.finished.then_some(None),
                }
            })
            .await?;
        self.reopened_budget(budget_was_zero);
        Some(m)
    }

    /// Waits for at least one message and moves up to `max` ready ones into `out` under one
    /// lock; returns how many (0 once the channel is finished and drained).
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
    /// for i in 0..5u8 {
    ///     client.send(s, Message::new(vec![i]))?;
    /// }
    /// let mut got = Vec::new();
    /// while got.len() < 5 {
    ///     let n = server.recv_many(&mut got, 2).await;
    ///     assert!((1..=2).contains(&n)); // never more than `max`
    /// }
    /// assert_eq!(got.iter().map(|m| m.data[0]).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn recv_many(&self, out: &mut Vec<Received>, max: usize) -> usize {
        let (n, budget_was_zero) = self
            .wait_until(|g| {
                let budget_was_zero = self.shared.read_budget(g) == 0;
                let mut n = 0;
                while n < max {
                    match g.conn.poll_message() {
                        Some(m) => out.push(m),
                        None => break,
                    }
                    n += 1;
                }
                (n > 0 || g.finished).then_some((n, budget_was_zero))
            })
            .await;
        if n > 0 {
            self.reopened_budget(budget_was_zero);
        }
        n
    }

    /// A message if one is ready.
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
    /// assert!(server.try_recv().is_none()); // nothing sent yet
    /// let s = client.open_stream(StreamConfig::default())?;
    /// client.send(s, Message::new("x"))?;
    /// let first = server.recv().await.expect("a message");
    /// assert_eq!(&first.data[..], b"x");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn try_recv(&self) -> Option<Received> {
        let mut g = self.shared.lock();
        let budget_was_zero = self.shared.read_budget(&g) == 0;
        let m = g.conn.poll_message();
        drop(g);
        self.reopened_budget(m.is_some() && budget_was_zero);
        m
    }

    /// Next event; `None` once the channel is finished and no events are left.
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
    /// let id = client.send(s, Message::new(vec![0u8; 1000]))?;
    /// // Written (in the kernel), then Acked (the receiver's P-ACK covers it).
    /// loop {
    ///     match client.next_event().await {
    ///         Some(Event::Acked { id: acked, times, .. }) if acked == id => {
    ///             assert!(times.acked.is_some());
    ///             break;
    ///         }
    ///         Some(_) => continue,
    ///         None => panic!("channel ended first"),
    ///     }
    /// }
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub async fn next_event(&self) -> Option<Event> {
        self.wait_until(|g| match g.events.pop_front() {
            Some(e) => Some(Some(e)),
            None => g.finished.then_some(None),
        })
        .await
    }

    /// All events available now.
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
    /// let id = client.send(s, Message::new("x"))?;
    /// client.flush().await?;
    /// let events = client.drain_events();
    /// assert!(events.iter().any(|e| matches!(e, Event::Written { id: w, .. } if *w == id)));
    /// assert!(client.drain_events().is_empty()); // drained
    /// # server.recv().await.expect("a message");
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn drain_events(&self) -> Vec<Event> {
        self.shared.lock().events.drain(..).collect()
    }

    /// Events dropped because the application did not keep up (`max_events`).
    ///
    /// ```
    /// # lowtide::current_thread_runtime()?.block_on(async {
    /// use lowtide::{ChannelConfig, Message, StreamConfig};
    /// let any = "127.0.0.1:0".parse().unwrap();
    /// let listener = lowtide::listen(any, ChannelConfig::default()).await?;
    /// // Keep at most 16 events (the smallest allowed): the application never reads them here.
    /// let cfg = ChannelConfig { max_events: 16, ..ChannelConfig::default() };
    /// let (client, server) = tokio::try_join!(
    ///     lowtide::connect(listener.local_addr()?, cfg),
    ///     listener.accept(),
    /// )?;
    /// let s = client.open_stream(StreamConfig::default())?;
    /// for _ in 0..30 {
    ///     client.send(s, Message::new("x"))?;
    /// }
    /// client.flush().await?; // thirty `Written` events, only sixteen kept
    /// assert!(client.events_dropped() >= 14);
    /// assert!(client.drain_events().len() <= 16);
    /// # let _ = server;
    /// # Ok::<(), lowtide::Error>(())
    /// # })?;
    /// # Ok::<(), lowtide::Error>(())
    /// ```
    pub fn events_dropped(&self) -> u64 {
        self.shared.lock().events_dropped
    }
}
