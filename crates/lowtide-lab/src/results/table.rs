//! The table `lab run` and `demo` print: per mode and variant, latency, share over 160 ms,
//! goodput; the video; the goals; the paper's figure beside ours; what went wrong.

use super::{LabSummary, VariantSummary, VideoSummary, TOLERANCES_MS};
use crate::goals;
use crate::scenario::Mode;
use crate::summary::{cell, NO_DATA};

/// Bits/s as Mbit/s for a table cell, "no data" without a value.
pub fn mbit(x: Option<f64>) -> String {
    x.map_or(NO_DATA.into(), |b| format!("{:.2}", b / 1e6))
}

/// A ratio to the baseline in percent for a table cell, "-" without one.
pub fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |r| format!("{:.0}%", r * 100.0))
}

pub fn text_table(s: &LabSummary) -> String {
    let mut out = String::new();
    if let Some(why) = &s.failed {
        out.push_str(&format!(
            "RUN FAILED: {why}\n(the numbers below cover what was measured before)\n"
        ));
    }
    out.push_str(&format!(
        "{:<13} {:<22} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>10} {:>8}\n",
        "mode",
        "variant",
        "p50 ms",
        "p99 ms",
        "ss p99",
        "own p99",
        "over 160 ms",
        "undelivered",
        "delivered",
        "vs TCP"
    ));
    for v in s.variants.iter().filter(|v| v.video.is_none()) {
        let l = &v.latency_ms;
        out.push_str(&format!(
            "{:<13} {:<22} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>10} {:>8}\n",
            v.mode.as_str(),
            v.name,
            l.show("p50", 1),
            l.show("p99", 1),
            &v.sender_side_ms.latency.show("p99", 1),
            if v.own_part_ms.count > 0 {
                v.own_part_ms.show("p99", 1)
            } else {
                "-".into()
            },
            l.show_share(160.0),
            format!("{} of {}", l.censored, l.count),
            mbit(v.goodput_bps),
            ratio(v.goodput_vs_baseline),
        ));
    }
    let f = &s.floor.latency_ms;
    out.push_str(&format!(
        "{:<13} {:<22} {:>9} {:>9} {:>9} {:>9} {:>12}\n",
        "",
        "network floor (UDP)",
        f.show("p50", 1),
        f.show("p99", 1),
        "-",
        "-",
        f.show_share(160.0)
    ));
    if let Some(f) = &s.fairness {
        out.push_str(&format!(
            "throughput fairness (side by side): {}\n",
            f.describe()
        ));
    }
    for v in s.variants.iter().filter(|v| v.video.is_none()) {
        out.push_str(&format!(
            "tail of {}: {}\n",
            v.name,
            v.tail_causes.describe()
        ));
    }
    for (v, c) in s
        .variants
        .iter()
        .filter_map(|v| Some((v, v.conference.as_ref()?)))
    {
        // Every importance bucket with data, most important first (7 = base layer).
        let buckets: Vec<String> = c
            .latency_by_importance_ms
            .iter()
            .rev()
            .map(|(i, l)| {
                format!(
                    "{i}: {}/{} (n = {})",
                    l.show("p50", 0),
                    l.show("p999", 0),
                    l.count
                )
            })
            .collect();
        out.push_str(&format!(
            "conference {}: threshold {:.0} ms, {} frames/s, layers per shown frame {}; by importance p50/p99.9 ms {}; ADUs cancelled {} at their deadline, {} as superseded, {} at the age budget\n",
            v.name,
            c.threshold_ms,
            c.fps.map_or(NO_DATA.into(), |f| format!("{:.1}", f.mean)),
            c.mean_layers.map_or(NO_DATA.into(), |l| format!("{l:.2}")),
            if buckets.is_empty() { NO_DATA.to_string() } else { buckets.join(", ") },
            c.adus_cancelled,
            c.adus_superseded,
            c.adus_aged,
        ));
    }
    let videos: Vec<(&VariantSummary, &VideoSummary)> = s
        .variants
        .iter()
        .filter_map(|v| Some((v, v.video.as_ref()?)))
        .collect();
    if let Some((_, first)) = videos.first() {
        out.push_str(&format!(
            "\nlayered video: windows whole (capture to last byte) within 250 / 500 / 1000 ms, the \
             median window, windows the sender dropped, frames on time and layers shown at {:.0} ms; \
             Mbit/s sent (written to the kernel, Goel et al. Table II) and delivered\n\
             {:<13} {:<22} {:>18} {:>12} {:>8} {:>9} {:>7} {:>9} {:>10} {:>8}\n",
            first.display_tolerance_ms,
            "mode",
            "variant",
            "whole in time",
            "window p50",
            "dropped",
            "on time",
            "layers",
            "sent",
            "delivered",
            "sent/TCP"
        ));
        for (v, x) in videos {
            let within: Vec<String> = TOLERANCES_MS
                .iter()
                .map(|t| {
                    x.within(*t)
                        .value
                        .map_or("-".into(), |w| format!("{:.0}", w * 100.0))
                })
                .collect();
            let pct = |m: Option<f64>| m.map_or(NO_DATA.into(), |m| format!("{:.1}%", m * 100.0));
            out.push_str(&format!(
                "{:<13} {:<22} {:>17}% {:>12} {:>8} {:>9} {:>7} {:>9} {:>10} {:>8}\n",
                v.mode.as_str(),
                v.name,
                within.join(" / "),
                cell(
                    v.latency_ms.p50,
                    v.latency_ms.is_lower_bound("p50"),
                    |x| format!("{x:.0} ms")
                ),
                pct(x.dropped_windows),
                pct(x.fps.map(|f| f / crate::video::FPS)),
                x.mean_layers.map_or(NO_DATA.into(), |m| format!("{m:.2}")),
                mbit(v.sent_bps.map(|m| m.mean)),
                mbit(v.goodput_bps),
                ratio(v.sent_vs_baseline.map(|m| m.mean)),
            ));
        }
    }
    for (v, l) in s
        .variants
        .iter()
        .filter_map(|v| Some((v, v.live.as_ref()?)))
    {
        out.push_str(&format!(
            "live video {}: glass-to-glass p50 {} / p99 {} / max {} ms; frames decoded {} of {} (not decoded: {}; on their way at the end: {}); shown per second p10 {} (fewest {}); longest stall {} ms; encoded {} Mbit/s; corrupted frames {}, bus errors and warnings {}\n",
            v.name,
            v.latency_ms.show("p50", 0),
            v.latency_ms.show("p99", 0),
            v.latency_ms.show("max", 0),
            l.decoded,
            l.stamped,
            l.dropped_text(),
            l.censored,
            cell(l.fps_p10, false, |x| format!("{x:.0}")),
            cell(l.fps_min, false, |x| format!("{x:.0}")),
            cell(l.longest_stall_ms, false, |x| format!("{x:.0}")),
            mbit(l.encoded_bps),
            l.corrupted,
            l.bus_problems,
        ));
    }
    if s.variants.iter().any(|v| v.latency_ms.censored > 0) {
        out.push_str(
            "\n≥: a lower bound; messages never delivered count with the time they had waited \
             when the measurement ended.\n",
        );
    }
    for g in &s.goals {
        out.push_str(&format!(
            "goal {}: {} {} {}: {} ({})\n",
            if g.met { "met" } else { "NOT met" },
            g.goal.variant,
            if g.mode == Mode::Sequential {
                "(sequential)"
            } else {
                ""
            },
            goals::describe(&g.goal),
            g.measured.map_or(NO_DATA.into(), |m| format!(
                "{m:.3} ({} samples)",
                g.samples
            )),
            g.goal.why
        ));
    }
    for e in &s.measurement_errors {
        out.push_str(&format!("MEASUREMENT ERROR: {e}\n"));
    }
    if !s.paper.figure.is_empty() || !s.paper.text.is_empty() {
        out.push_str(&format!("paper: {}: {}\n", s.paper.figure, s.paper.text));
    }
    out
}
