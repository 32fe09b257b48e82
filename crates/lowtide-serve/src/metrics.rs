//! The Prometheus text endpoint (`GET /metrics`, exposition format 0.0.4): the server's
//! counters, each stream's, and each viewer's (units sent and dropped by reason, bytes,
//! latency quantiles from the viewer's own reports, its socket's cwnd and RTT). A quantile
//! with no samples is left out, never written as 0.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hub::{lock, Hub};
use crate::viewer::queue::QueueCounters;
use crate::viewer::{quantile, ViewerStats};
use crate::viewer_wire::DropReason;

/// The server's own counters.
#[derive(Debug, Default)]
pub struct ServerCounters {
    pub viewers_accepted: AtomicU64,
    pub viewers_refused: AtomicU64,
    pub viewers_stalled: AtomicU64,
    pub publishers_refused: AtomicU64,
    pub bad_requests: AtomicU64,
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metrics page.
pub fn render(hub: &Hub, c: &ServerCounters) -> String {
    let mut o = String::new();
    let g = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    let streams = hub.list();
    g(
        &mut o,
        "lowtide_serve_streams",
        "gauge",
        "Streams published now.",
    );
    let _ = writeln!(o, "lowtide_serve_streams {}", streams.len());
    for (name, v, help) in [
        (
            "viewers_accepted_total",
            &c.viewers_accepted,
            "Viewers whose WebSocket was accepted.",
        ),
        (
            "viewers_refused_total",
            &c.viewers_refused,
            "Viewers refused (no stream, limits).",
        ),
        (
            "viewers_stalled_total",
            &c.viewers_stalled,
            "Viewers dropped because their socket took nothing.",
        ),
        (
            "publishers_refused_total",
            &c.publishers_refused,
            "Publishers refused (token, path, codec).",
        ),
        (
            "bad_requests_total",
            &c.bad_requests,
            "Malformed, oversized or timed-out HTTP requests and WebSocket protocol errors.",
        ),
    ] {
        let name = format!("lowtide_serve_{name}");
        g(&mut o, &name, "counter", help);
        let _ = writeln!(o, "{name} {}", v.load(Ordering::Relaxed));
    }
    g(
        &mut o,
        "lowtide_serve_stream_viewers",
        "gauge",
        "Viewers of a stream now.",
    );
    // Each family's samples form one group (the format requires it): snapshot the viewers,
    // then write family by family.
    let mut snaps = Vec::new();
    for s in &streams {
        let p = esc(&s.path);
        let viewers = s.viewers();
        let _ = writeln!(
            o,
            "lowtide_serve_stream_viewers{{path=\"{p}\"}} {}",
            viewers.len()
        );
        for v in viewers {
            let (q, queued) = {
                let q = lock(&v.queue);
                (*q.counters(), q.bytes())
            };
            let st = lock(&v.stats).clone();
            snaps.push((format!("path=\"{p}\",viewer=\"{}\"", v.id), q, queued, st));
        }
    }
    for (name, v, help) in [
        (
            "units_total",
            0,
            "Units a stream's publisher delivered to the server.",
        ),
        ("bytes_total", 1, "Bytes of those units."),
        (
            "upstream_lost_total",
            2,
            "Units lost between the publisher and the server.",
        ),
        (
            "keyframe_requests_total",
            3,
            "Keyframe requests sent to the publisher.",
        ),
    ] {
        g(
            &mut o,
            &format!("lowtide_serve_stream_{name}"),
            "counter",
            help,
        );
        for s in &streams {
            let c = [
                &s.units_in,
                &s.bytes_in,
                &s.upstream_lost,
                &s.keyframe_requests,
            ][v];
            let _ = writeln!(
                o,
                "lowtide_serve_stream_{name}{{path=\"{}\"}} {}",
                esc(&s.path),
                c.load(Ordering::Relaxed)
            );
        }
    }
    type Sample = fn(&str, &QueueCounters, usize, &ViewerStats, &mut String);
    let families: [(&str, &str, &str, Sample); 10] = [
        (
            "units_sent_total",
            "counter",
            "Units sent to a viewer.",
            |l, q, _, _, w| {
                let _ = writeln!(w, "lowtide_serve_viewer_units_sent_total{{{l}}} {}", q.sent);
            },
        ),
        (
            "units_dropped_total",
            "counter",
            "Units not sent to a viewer, by reason.",
            |l, q, _, _, w| {
                for r in DropReason::ALL {
                    let _ = writeln!(
                        w,
                        "lowtide_serve_viewer_units_dropped_total{{{l},reason=\"{}\"}} {}",
                        r.name(),
                        q.dropped[r as usize - 1]
                    );
                }
            },
        ),
        (
            "bytes_written_total",
            "counter",
            "Bytes written to a viewer's socket.",
            |l, _, _, st, w| {
                let _ = writeln!(
                    w,
                    "lowtide_serve_viewer_bytes_written_total{{{l}}} {}",
                    st.bytes_written
                );
            },
        ),
        (
            "queued_bytes",
            "gauge",
            "Bytes of units waiting in a viewer's queue.",
            |l, _, queued, _, w| {
                let _ = writeln!(w, "lowtide_serve_viewer_queued_bytes{{{l}}} {queued}");
            },
        ),
        (
            "frames_shown_total",
            "counter",
            "Frames a viewer reported shown.",
            |l, _, _, st, w| {
                let _ = writeln!(
                    w,
                    "lowtide_serve_viewer_frames_shown_total{{{l}}} {}",
                    st.shown
                );
            },
        ),
        (
            "decoder_problems_total",
            "counter",
            "Decoder errors a viewer reported.",
            |l, _, _, st, w| {
                let _ = writeln!(
                    w,
                    "lowtide_serve_viewer_decoder_problems_total{{{l}}} {}",
                    st.problems
                );
            },
        ),
        (
            "cwnd_segments",
            "gauge",
            "The viewer socket's congestion window.",
            |l, _, _, st, w| {
                let _ = writeln!(w, "lowtide_serve_viewer_cwnd_segments{{{l}}} {}", st.cwnd);
            },
        ),
        (
            "srtt_seconds",
            "gauge",
            "The viewer socket's smoothed RTT.",
            |l, _, _, st, w| {
                let _ = writeln!(
                    w,
                    "lowtide_serve_viewer_srtt_seconds{{{l}}} {}",
                    st.srtt_us as f64 / 1e6
                );
            },
        ),
        (
            "capture_to_shown_seconds",
            "summary",
            "Capture to shown, over the viewer's last 300 stamped frames.",
            |l, _, _, st, w| quantiles(w, "capture_to_shown", l, &st.capture_to_shown_ms),
        ),
        (
            "server_to_shown_seconds",
            "summary",
            "Arrival at the server to shown, over the viewer's last 300 frames.",
            |l, _, _, st, w| quantiles(w, "server_to_shown", l, &st.server_to_shown_ms),
        ),
    ];
    for (name, kind, help, sample) in families {
        g(&mut o, &format!("lowtide_serve_viewer_{name}"), kind, help);
        for (l, q, queued, st) in &snaps {
            sample(l, q, *queued, st, &mut o);
        }
    }
    o
}

fn quantiles(w: &mut String, name: &str, l: &str, win: &std::collections::VecDeque<f64>) {
    for qu in [0.5, 0.99] {
        if let Some(ms) = quantile(win, qu) {
            let _ = writeln!(
                w,
                "lowtide_serve_viewer_{name}_seconds{{{l},quantile=\"{qu}\"}} {}",
                ms / 1000.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::HubConfig;
    use lowtide_media::encoded::Codec;

    #[test]
    fn the_page_names_streams_and_viewers_and_writes_no_quantile_without_data() {
        let hub = Hub::new(HubConfig::default());
        hub.publish("cam\"1", Codec::H264).unwrap();
        let addr = std::net::IpAddr::from([127, 0, 0, 1]);
        let (_, v) = hub.join("cam\"1", addr, std::time::Instant::now()).unwrap();
        let page = render(&hub, &ServerCounters::default());
        assert!(page.contains("lowtide_serve_streams 1\n"));
        assert!(page.contains("lowtide_serve_stream_viewers{path=\"cam\\\"1\"} 1\n"));
        let l = format!("path=\"cam\\\"1\",viewer=\"{}\"", v.id);
        assert!(page.contains(&format!(
            "lowtide_serve_viewer_units_dropped_total{{{l},reason=\"expired\"}} 0\n"
        )));
        assert!(!page.contains("quantile="), "no samples, no quantile");
        lock(&v.stats).capture_to_shown_ms.push_back(42.0);
        let page = render(&hub, &ServerCounters::default());
        assert!(page.contains(&format!(
            "lowtide_serve_viewer_capture_to_shown_seconds{{{l},quantile=\"0.5\"}} 0.042\n"
        )));
    }
}
