//! The conference's receiver over any pipe: one viewer per video, each ADU placed by its
//! header's window (the video's index).

use std::time::Instant;

use lowtide_media::conference::{Conference, Viewer};
use lowtide_media::wire::MediaHeader;

use crate::pipe::RecvPipe;

/// Receives the videos sent by [`super::send::send_adus`] (`frames` frames each) until `end`
/// or the peer's end. An ADU naming no video of `videos`, or not of its video's size, is
/// counted as unknown by the first viewer (the peer's bug).
pub(crate) async fn receive_adus(
    pipe: &mut RecvPipe,
    videos: &[Conference],
    frames: u32,
    start: Instant,
    end: Instant,
) -> Vec<Viewer> {
    let mut viewers: Vec<Viewer> = videos.iter().map(|&c| Viewer::new(c, frames)).collect();
    let end = tokio::time::Instant::from_std(end);
    loop {
        let msg = tokio::select! {
            m = pipe.recv() => m,
            _ = tokio::time::sleep_until(end) => None,
        };
        let Some(msg) = msg else { break };
        let at = msg.at.saturating_duration_since(start).as_secs_f64();
        let placed = match MediaHeader::decode(&msg.data) {
            Ok(MediaHeader::Data {
                window,
                frame,
                layer,
            }) => viewers
                .get_mut(window as usize)
                .filter(|v| v.conference().adu_bytes() == msg.data.len())
                .map(|v| v.on_adu(frame, layer, at)),
            _ => None,
        };
        if placed.is_none() {
            if let Some(v) = viewers.first_mut() {
                v.unknown += 1;
            }
        }
    }
    viewers
}
