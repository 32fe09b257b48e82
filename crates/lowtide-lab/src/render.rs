//! A run folder's `report.html` and its SVG plots, from `summary.json` and the raw records
//! alone: `lowtide lab report DIR` re-renders without namespaces, and tests render recorded
//! data.

use std::path::Path;

use crate::goals;
use crate::report::{self, Bar, Series};
use crate::results::{LabSummary, TrialRecord, VariantSummary, VideoSummary, FLOOR};
use crate::scenario::{Mode, PaperNumbers};
use crate::stats::MeanCi;
use crate::stream::Sample;
use crate::summary::{Measured, NO_DATA};
use crate::LabError;

/// Files a report consists of, besides the SVGs.
pub const REPORT: &str = "report.html";
pub const SUMMARY: &str = "summary.json";
/// The summary a run stored, kept by `lab report` when its recomputation differs.
pub const SUMMARY_STORED: &str = "summary.stored.json";
pub const SCENARIO: &str = "scenario.toml";
/// The scenario after `--quick`, `--runs` and overrides: what the summary is computed from.
pub const SCENARIO_AS_RUN: &str = "scenario-as-run.toml";
pub use crate::results::files::{MESSAGES, TCPINFO, TRIALS, WINDOWS};

/// Writes every plot and `report.html` into `dir`.
pub fn render(dir: &Path, s: &LabSummary, records: &[TrialRecord]) -> Result<(), LabError> {
    let mut sections = vec![problems(s), intro(s)];
    let mut modes: Vec<Mode> = s.variants.iter().map(|v| v.mode).collect();
    modes.dedup();
    for mode in modes {
        let variants: Vec<&VariantSummary> = s.variants.iter().filter(|v| v.mode == mode).collect();
        sections.push(format!("<h2>{}</h2>", mode_title(mode, s.runs)));
        sections.push(variant_table(&variants, s));
        if let (Mode::SideBySide, Some(f)) = (mode, &s.fairness) {
            sections.push(format!(
                "<p><b>Throughput fairness</b> among the streams that take what their transport \
                 gives (Jain's index over their goodputs, 1 = equal shares; the elephants are not \
                 counted one by one): {}.</p>",
                report::escape(&f.describe())
            ));
        }
        sections.push(tail_table(&variants));
        if variants.iter().any(|v| v.sender_cost.is_some()) {
            sections.push(
                "<h3>What sending cost (Goel et al. Table I)</h3><p>The sender thread runs the \
                 application and lowtide's driver on one runtime: its CPU time is the sender's, \
                 for the whole run, mean over runs. Side by side, the variants share the machine.</p>"
                    .into(),
            );
            sections.push(cost_table(&variants));
        }
        if let Some(table) = lane_table(&variants) {
            sections.push(
                "<h3>The duplicate lane</h3><p>Per run: copies the sender wrote to the lane and \
                 their bytes; at the receiver, copies that arrived before their original (the \
                 lane won) and after it (dropped as second), and the lane's reads acknowledged \
                 at once.</p>"
                    .into(),
            );
            sections.push(table);
        }
        let tag = mode.as_str();
        if variants.iter().any(|v| v.video.is_some()) {
            sections.push(video_section(dir, tag, mode, &variants, s, records)?);
        }
        if variants.iter().any(|v| v.conference.is_some()) {
            sections.push(conference_section(&variants));
            if variants
                .iter()
                .any(|v| v.conference.as_ref().is_some_and(|c| !c.videos.is_empty()))
            {
                sections.push(crate::quality_fairness::section(
                    dir, tag, mode, &variants, s, records,
                )?);
            }
        }
        if variants.iter().any(|v| v.live.is_some()) {
            sections.push(crate::live_video::report::section(
                dir, tag, mode, &variants, records,
            )?);
        }
        if variants.iter().any(|v| v.ladder.is_some()) {
            sections.push(crate::ladder_report::section(
                dir, tag, mode, &variants, records,
            )?);
        }
        latency_plot(dir, tag, mode, s, records)?;
        cdf_plot(dir, tag, mode, s, records)?;
        let which = match mode {
            Mode::SideBySide => "run 1",
            Mode::Sequential => {
                "run 1 of each variant, each in its own network; the floor of the first"
            }
        };
        sections.push(format!(
            "<h3>Latency over time ({which})</h3>{}<h3>Latency distribution ({} s to {} s, all runs)</h3>{}",
            report::figure(&format!("latency-{tag}.svg"), "latency over time"),
            s.window.from_s,
            s.window.to_s,
            report::figure(&format!("cdf-{tag}.svg"), "latency CDF"),
        ));
        if s.baseline.is_some() {
            let bars: Vec<Bar> = variants
                .iter()
                .filter_map(|v| {
                    let n = v.normalized_throughput?;
                    Some(Bar {
                        label: v.name.clone(),
                        mean: n.mean,
                        low: n.ci95_low,
                        high: n.ci95_high,
                    })
                })
                .collect();
            if !bars.is_empty() {
                report::normalized_throughput(
                    &dir.join(format!("throughput-{tag}.svg")),
                    &format!(
                        "Throughput normalised to {} (mean, 95% CI over runs)",
                        s.baseline.as_deref().unwrap_or("TCP")
                    ),
                    &bars,
                )?;
                sections.push(format!(
                    "<h3>Normalised throughput</h3>{}",
                    report::figure(&format!("throughput-{tag}.svg"), "normalised throughput")
                ));
            }
        }
    }
    if !s.goals.is_empty() {
        sections.push("<h2>Goals</h2>".into());
        sections.push(goal_table(s));
    }
    sections.push("<h2>The bottleneck in each run</h2>".into());
    sections.push(trial_table(s));
    let windows = if records.iter().any(|r| !r.windows.is_empty()) {
        format!("<a href=\"{WINDOWS}\">{WINDOWS}</a> (one line per video adaptation window), ")
    } else {
        String::new()
    };
    sections.push(format!(
        "<p>Raw data: <a href=\"{MESSAGES}\">{MESSAGES}</a> (one line per message sent, delivered or \
         censored, and per probe), {windows}<a href=\"{TCPINFO}\">{TCPINFO}</a> (each stream's \
         TCP_INFO every 10 ms), <a href=\"{TRIALS}\">{TRIALS}</a>, <a href=\"{SUMMARY}\">{SUMMARY}</a>, \
         <a href=\"{SCENARIO}\">{SCENARIO}</a> and <a href=\"{SCENARIO_AS_RUN}\">{SCENARIO_AS_RUN}</a>. \
         <code>lowtide lab report</code> recomputes the summary from them.</p>"
    ));
    let title = format!(
        "lowtide lab: {}{}",
        s.scenario,
        if s.quick { " (--quick)" } else { "" }
    );
    let html = report::page(&title, &s.provenance, &sections);
    let path = dir.join(REPORT);
    std::fs::write(&path, html).map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

fn mode_title(mode: Mode, runs: u32) -> String {
    match mode {
        Mode::SideBySide => format!(
            "Side by side: every variant at once through the same bottleneck ({runs} run{})",
            if runs == 1 { "" } else { "s" }
        ),
        Mode::Sequential => format!(
            "Sequential: one variant at a time, {runs} run{} each",
            if runs == 1 { "" } else { "s" }
        ),
    }
}

fn intro(s: &LabSummary) -> String {
    let e = report::escape;
    let mut out = String::new();
    if !s.description.is_empty() {
        out.push_str(&format!("<p>{}</p>", e(&s.description)));
    }
    let streams = s.variants.iter().any(|v| v.video.is_none());
    let videos = s.variants.iter().any(|v| v.video.is_some());
    let apps = match (streams, videos) {
        (true, false) => {
            "Each variant's stream writes a 1448-byte message whenever its transport can \
             take one; latency is the receiver's read time minus the sender's write time (one \
             process, one clock)."
        }
        (false, _) => {
            "Each variant streams layered video (its section below says how); a latency \
             is a window's, from the capture of its first frame until it arrived whole."
        }
        (true, true) => {
            "A latency-stream variant writes a 1448-byte message whenever its transport \
             can take one (latency: the receiver's read time minus the sender's write time, one \
             process, one clock); a video variant streams layered video (its section below), and \
             its latency is a window's, from capture until it arrived whole."
        }
    };
    out.push_str(&format!(
        "<p><b>Network:</b> {}. {apps} The network floor is a UDP probe every 10 ms through the \
         same bottleneck; sender-side latency is a latency minus the floor at that moment. \
         Statistics cover what was sent (captured) from {} s to {} s of {} s.</p>",
        e(&s.network),
        s.window.from_s,
        s.window.to_s,
        s.duration_s
    ));
    if s.quick {
        out.push_str("<p><b>This is a --quick run</b>: times scaled down and one run; quote the full-scale run.</p>");
    }
    let p = &s.paper;
    if !p.figure.is_empty() || !p.text.is_empty() {
        out.push_str(&format!(
            "<p><b>Paper ({}):</b> {}</p>",
            e(&p.figure),
            e(&p.text)
        ));
    }
    if !p.differences.is_empty() {
        out.push_str(&format!(
            "<p><b>Differences from the paper:</b> {}</p>",
            e(&p.differences)
        ));
    }
    let f = &s.floor.latency_ms;
    out.push_str(&format!(
        "<p><b>Network floor</b> (UDP probe): p50 {} ms, p99 {} ms, {} over 160 ms, {} over 500 ms; \
         {} probes sent, {} lost, {} could not be sent.</p>",
        f.show("p50", 0),
        f.show("p99", 0),
        f.show_share(160.0),
        f.show_share(500.0),
        s.floor.probes_sent,
        s.floor.lost,
        s.floor.send_errors,
    ));
    if s.variants.iter().any(|v| v.latency_ms.censored > 0) {
        out.push_str(
            "<p><b>Undelivered messages</b> count in every latency number with the time they had \
             waited when the measurement ended (censored): a number marked ≥ is only a lower bound. \
             The plots show delivered messages only.</p>",
        );
    }
    out
}

/// A failed run and failed measurements, first thing on the page.
fn problems(s: &LabSummary) -> String {
    let mut out = String::new();
    if let Some(why) = &s.failed {
        out.push_str(&format!(
            "<p class=\"fail\"><b>This run failed:</b> {}. The numbers below cover what was \
             measured before.</p>",
            report::escape(why)
        ));
    }
    if !s.measurement_errors.is_empty() {
        out.push_str("<p class=\"fail\"><b>Measurements that failed:</b></p><ul>");
        for e in &s.measurement_errors {
            out.push_str(&format!("<li>{}</li>", report::escape(e)));
        }
        out.push_str("</ul>");
    }
    out
}

fn share_of(m: Measured) -> String {
    m.value.map_or(NO_DATA.into(), pct)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// What the paper reports for a variant, in words.
pub(crate) fn paper_text(p: Option<&PaperNumbers>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    let mut parts = vec![];
    if let Some(x) = p.share_over_160 {
        parts.push(format!("≈{} over 160 ms", pct(x)));
    }
    if let Some(x) = p.share_over_500 {
        parts.push(format!("≈{} over 500 ms", pct(x)));
    }
    if let Some(x) = p.windows_within_500 {
        parts.push(format!("≈{} of windows whole within 500 ms", pct(x)));
    }
    if let Some(x) = p.dropped_windows {
        parts.push(format!("{} of windows dropped", pct(x)));
    }
    if let Some(x) = p.goodput_vs_baseline {
        parts.push(format!("≈{:.0}% of TCP's throughput", x * 100.0));
    }
    if let Some(x) = p.max_latency_ms {
        parts.push(format!("max one-way latency ≈{:.0} s", x / 1e3));
    }
    if let Some(x) = p.switches {
        parts.push(format!("{x} switch{}", if x == 1 { "" } else { "es" }));
    }
    if let Some(t) = &p.text {
        parts.push(t.clone());
    }
    parts.join("; ")
}

/// A ratio to the baseline, with its 95% interval over runs.
fn ratio_ci(m: Option<MeanCi>) -> String {
    match m {
        Some(n) if n.runs > 1 => format!(
            "{:.0}% [{:.0}, {:.0}]",
            n.mean * 100.0,
            n.ci95_low * 100.0,
            n.ci95_high * 100.0
        ),
        Some(n) => format!("{:.0}%", n.mean * 100.0),
        None => "-".into(),
    }
}

fn transport_cell(v: &VariantSummary) -> String {
    let t = &v.transport;
    let n = |m: Measured, d: usize| m.value.map_or(NO_DATA.into(), |x| format!("{x:.d$}"));
    format!(
        "{} / {} / {}",
        n(t.retransmitted_segments, 0),
        n(t.timeouts, 0),
        n(t.srtt_p50_ms, 1)
    )
}

fn variant_table(variants: &[&VariantSummary], s: &LabSummary) -> String {
    let rows: Vec<Vec<String>> = variants
        .iter()
        .map(|v| {
            let l = &v.latency_ms;
            let ss = &v.sender_side_ms;
            vec![
                v.name.clone(),
                format!(
                    "{} / {}{}",
                    v.controller,
                    v.congestion,
                    if v.ecn { " / ECN" } else { "" }
                ),
                format!("{} ({} undelivered)", l.count, l.censored),
                l.show("p50", 0),
                l.show("p90", 0),
                l.show("p99", 0),
                l.show("p999", 0),
                l.show_share(160.0),
                l.show_share(500.0),
                format!(
                    "{} / {}{}{}",
                    &ss.latency.show("p50", 0),
                    &ss.latency.show("p99", 0),
                    if ss.without_floor + ss.clamped > 0 {
                        format!(
                            " ({} without a fresh probe, {} below the floor)",
                            ss.without_floor, ss.clamped
                        )
                    } else {
                        String::new()
                    },
                    if v.own_part_ms.count > 0 {
                        format!(
                            "; lowtide's own part p99 {} (n = {})",
                            v.own_part_ms.show("p99", 0),
                            v.own_part_ms.count
                        )
                    } else {
                        String::new()
                    }
                ),
                v.goodput_bps
                    .map_or(NO_DATA.into(), |g| format!("{:.2}", g / 1e6)),
                ratio_ci(v.normalized_throughput),
                transport_cell(v),
                paper_text(v.paper.as_ref()),
            ]
        })
        .collect();
    let baseline = format!("vs {}", s.baseline.as_deref().unwrap_or("baseline"));
    report::html_table(
        &[
            "variant",
            "controller / cc",
            "messages sent",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "over 160 ms",
            "over 500 ms",
            "sender-side p50 / p99 ms",
            "delivered Mbit/s",
            &baseline,
            "TCP: retransmitted segments / timeouts / srtt p50 ms",
            "paper",
        ],
        &rows,
    )
}

/// Paceline's videoconference (Erbad and Krasic, Fig. 5 and 6): frame rate, layers, and the
/// latency of each importance bucket.
fn conference_section(variants: &[&VariantSummary]) -> String {
    let rows: Vec<Vec<String>> = variants
        .iter()
        .filter_map(|v| Some((v, v.conference.as_ref()?)))
        .map(|(v, c)| {
            let mut row = vec![
                v.name.clone(),
                format!("{:.0} ms", c.threshold_ms),
                c.fps.map_or(NO_DATA.into(), |f| {
                    if f.runs > 1 {
                        format!("{:.1} ± {:.1}", f.mean, f.ci95_high - f.mean)
                    } else {
                        format!("{:.1}", f.mean)
                    }
                }),
                c.mean_layers.map_or(NO_DATA.into(), |l| format!("{l:.2}")),
                format!(
                    "{} of {} (over the run the sender cancelled {} of {} at their deadline, {} as superseded, {} at the age budget)",
                    c.adus_arrived, c.adus, c.adus_cancelled, c.adus_sent, c.adus_superseded, c.adus_aged
                ),
            ];
            for importance in (0..8).rev() {
                row.push(
                    match c.latency_by_importance_ms.get(&importance.to_string()) {
                        Some(l) => format!(
                            "{} / {} / {} (n = {})",
                            l.show("p50", 0),
                            l.show("p99", 0),
                            l.show("p999", 0),
                            l.count
                        ),
                        None => NO_DATA.into(),
                    },
                );
            }
            row
        })
        .collect();
    let mut headers = vec![
        "variant".to_string(),
        "latency threshold".into(),
        "frames shown per s".into(),
        "layers per shown frame".into(),
        "ADUs arrived (captured in the window)".into(),
    ];
    headers.extend((0..8).rev().map(|i| {
        let what = if i == 7 { "base" } else { "enhancement" };
        format!("importance {i} ({what}): p50 / p99 / p99.9 ms")
    }));
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    format!(
        "<h3>Videoconference (Erbad and Krasic, Fig. 5 and 6)</h3><p>Frames of eight ADUs (a base \
         layer and seven enhancement layers, importance 7 down to 0), each cancelled at the sender \
         unless written by its capture plus the latency threshold. A frame is shown when its base \
         ADU arrives within the threshold, with the enhancement layers whose whole prefix did. \
         Latency: capture to arrival of the ADUs that arrived.</p>{}",
        report::html_table(&headers, &rows)
    )
}

/// Of the messages over 160 ms, the share each cause explains (`crate::tail`).
fn tail_table(variants: &[&VariantSummary]) -> String {
    let rows: Vec<Vec<String>> = variants
        .iter()
        .map(|v| {
            let c = &v.tail_causes;
            let share = |n: usize| {
                c.share(n)
                    .map_or(NO_DATA.into(), |x| format!("{} ({n})", pct(x)))
            };
            vec![
                v.name.clone(),
                format!(
                    "{} {}",
                    c.over,
                    if v.video.is_some() {
                        "windows"
                    } else {
                        "messages"
                    }
                ),
                share(c.rto),
                share(c.fast_retransmit),
                share(c.sender_queue),
                share(c.network_queue),
                share(c.unknown),
            ]
        })
        .collect();
    format!(
        "<h3>Where the tail comes from</h3><p>Each message (video: window) sent in the window          and over {:.0} ms, put down to one cause from the stream's TCP_INFO and the floor probe          while it was in flight: a retransmission timeout, else a fast retransmit, else the          larger of the network's part (the floor probe: propagation and bottleneck queue) and          the sender's (send buffer and TCP). Samples are 10 ms apart; both limits err towards          loss recovery.</p>{}",
        crate::tail::THRESHOLD_MS,
        report::html_table(
            &[
                "variant",
                "over the threshold",
                "RTO",
                "fast retransmit",
                "sender queue",
                "network queue",
                "unknown",
            ],
            &rows,
        )
    )
}

/// Goel et al. Section 7: windows on time (Fig. 8/9), sender throughput (Table II), dropped
/// windows (Table III), and what a viewer saw.
fn video_section(
    dir: &Path,
    tag: &str,
    mode: Mode,
    variants: &[&VariantSummary],
    s: &LabSummary,
    records: &[TrialRecord],
) -> Result<String, LabError> {
    let videos: Vec<(&VariantSummary, &VideoSummary)> = variants
        .iter()
        .filter_map(|v| Some((*v, v.video.as_ref()?)))
        .collect();
    let (window_frames, tolerance) = videos
        .first()
        .map_or((0, 0.0), |(_, x)| (x.window_frames, x.display_tolerance_ms));
    let ci = |m: Option<MeanCi>, scale: f64, digits: usize| match m {
        Some(m) if m.runs > 1 => format!(
            "{:.d$} ± {:.d$}",
            m.mean * scale,
            (m.ci95_high - m.mean) * scale,
            d = digits
        ),
        Some(m) => format!("{:.d$}", m.mean * scale, d = digits),
        None => NO_DATA.into(),
    };
    let rows: Vec<Vec<String>> = videos
        .iter()
        .map(|(v, x)| {
            vec![
                v.name.clone(),
                v.controller.clone(),
                format!("{} / {}", x.transmitted_windows, x.windows),
                share_of(x.within(250.0)),
                share_of(x.within(500.0)),
                share_of(x.within(1000.0)),
                format!(
                    "{} ({})",
                    share_of(x.dropped()),
                    ci(x.dropped_windows_runs, 100.0, 1)
                ),
                x.mean_layers.map_or(NO_DATA.into(), |m| format!("{m:.2}")),
                x.fps.map_or(NO_DATA.into(), |f| format!("{f:.1}")),
                ci(v.sent_bps, 1e-6, 2),
                ratio_ci(v.sent_vs_baseline),
                v.goodput_bps
                    .map_or(NO_DATA.into(), |g| format!("{:.2}", g / 1e6)),
                ratio_ci(v.normalized_throughput),
                paper_text(v.paper.as_ref()),
            ]
        })
        .collect();
    let table = report::html_table(
        &[
            "variant",
            "controller",
            "windows transmitted / captured",
            "whole ≤ 250 ms",
            "whole ≤ 500 ms",
            "whole ≤ 1000 ms",
            "dropped (pooled; per run ± 95% CI, %)",
            "mean layers",
            "frames/s",
            "sent Mbit/s (written to the kernel, Table II)",
            "sent vs plain TCP",
            "delivered Mbit/s",
            "delivered vs plain TCP",
            "paper",
        ],
        &rows,
    );
    let trials: Vec<&TrialRecord> = records.iter().filter(|r| r.mode == Some(mode)).collect();
    let curves: Vec<report::WindowCurve> = videos
        .iter()
        .map(|(v, x)| report::WindowCurve {
            name: &v.name,
            whole_latency_ms: trials
                .iter()
                .filter_map(|t| t.windows_of(&v.name))
                .flatten()
                .filter(|w| s.window.contains(w.capture_s) && w.transmitted())
                .filter_map(|w| w.latency_ms)
                .collect(),
            transmitted: x.transmitted_windows,
        })
        .collect();
    report::windows_on_time(
        &dir.join(format!("windows-{tag}.svg")),
        "Windows whole within the latency tolerance (Goel et al. Fig. 8/9)",
        &curves,
    )?;
    Ok(format!(
        "<h3>Layered video: priority-progress streaming (Goel et al. Section 7)</h3>\
         <p>Adaptation windows of {window_frames} frames ({:.0} ms) at 30 frames/s; in each window \
         the sender sends every frame's base layer, then layer 1, and so on, and cancels what is \
         unsent when the next window is ready; a window of which nothing was written is dropped. \
         A window is on time when every message the sender wrote for it arrived within the \
         tolerance after the capture of its first frame (the application's own delay of two \
         windows included); the share counts transmitted windows, as the paper does. Frames are \
         shown {tolerance:.0} ms after capture with the layers that arrived by then. <i>Sent</i> is what \
         the sender wrote to the kernel for the windows captured in the measurement window (the \
         paper's Table II), <i>delivered</i> what of it arrived. In the latency plots below, a \
         video point is a window that arrived whole.</p>{table}{}",
        f64::from(window_frames) * 1000.0 / 30.0,
        report::figure(&format!("windows-{tag}.svg"), "windows on time")
    ))
}

/// `x` per `writev` call (Table I's per-call cost and poll ratio).
fn per_write(x: Option<f64>, writes: f64, digits: usize) -> String {
    match x {
        Some(x) if writes > 0.0 => format!("{:.d$}", x / writes, d = digits),
        _ => NO_DATA.into(),
    }
}

fn cost_table(variants: &[&VariantSummary]) -> String {
    let rows: Vec<Vec<String>> = variants
        .iter()
        .filter_map(|v| {
            let c = v.sender_cost?;
            let cpu = |x: Option<f64>, d: usize| x.map_or(NO_DATA.into(), |x| format!("{x:.d$}"));
            Some(vec![
                v.name.clone(),
                cpu(c.cpu_user_s, 2),
                cpu(c.cpu_system_s, 2),
                format!("{:.0}", c.messages),
                format!("{:.0}", c.write_calls),
                format!("{:.0}", c.driver_wakeups),
                cpu(c.wakeups_per_message, 2),
                cpu(c.cpu_us_per_message, 1),
                per_write(Some(c.driver_wakeups), c.write_calls, 2),
                per_write(c.cpu_system_s.map(|x| x * 1e6), c.write_calls, 1),
            ])
        })
        .collect();
    report::html_table(
        &[
            "variant",
            "user CPU s",
            "system CPU s",
            "messages",
            "write calls",
            "driver wake-ups",
            "wake-ups per message",
            "CPU µs per message",
            "wake-ups per write call",
            "system µs per write call",
        ],
        &rows,
    )
}

/// The duplicate lane's counters of the variants that wrote copies; `None` when none did.
fn lane_table(variants: &[&VariantSummary]) -> Option<String> {
    let rows: Vec<Vec<String>> = variants
        .iter()
        .filter_map(|v| {
            let c = v.sender_cost.filter(|c| c.copies_sent > 0.0)?;
            Some(vec![
                v.name.clone(),
                format!("{:.0}", c.copies_sent),
                format!("{:.0}", c.copy_bytes / 1000.0),
                format!("{:.0}", c.copies_first),
                format!("{:.0}", c.copies_late),
                format!("{:.0}", c.quick_acks),
            ])
        })
        .collect();
    (!rows.is_empty()).then(|| {
        report::html_table(
            &[
                "variant",
                "copies sent",
                "copy kB",
                "copies first",
                "copies second",
                "quick ACKs",
            ],
            &rows,
        )
    })
}

fn goal_table(s: &LabSummary) -> String {
    let rows: Vec<Vec<String>> = s
        .goals
        .iter()
        .map(|g| {
            vec![
                g.goal.variant.clone(),
                g.mode.as_str().into(),
                goals::describe(&g.goal),
                g.measured.map_or(NO_DATA.into(), |m| {
                    format!("{m:.3} ({} samples)", g.samples)
                }),
                if g.met { "met" } else { "NOT met" }.into(),
                g.goal.why.clone(),
            ]
        })
        .collect();
    report::html_table(&["variant", "mode", "goal", "measured", "", "why"], &rows)
}

fn trial_table(s: &LabSummary) -> String {
    let two_paths = s.trials.iter().any(|t| t.path_b_forward_packets.is_some());
    let rows: Vec<Vec<String>> = s
        .trials
        .iter()
        .map(|t| {
            let mut row = vec![
                t.mode.map_or("-", Mode::as_str).into(),
                t.run.to_string(),
                t.variants.join(", "),
                t.forward_drops.to_string(),
                t.forward_marks.to_string(),
                t.reverse_drops.to_string(),
                t.forward_max_queue_packets.to_string(),
                t.forward_sojourn_p99_ms
                    .map_or(NO_DATA.into(), |x| format!("{x:.0}")),
                if t.cross_traffic_bps.is_finite() {
                    format!("{:.2}", t.cross_traffic_bps / 1e6)
                } else {
                    NO_DATA.into()
                },
            ];
            if two_paths {
                let n = |x: Option<u64>| x.map_or(NO_DATA.into(), |x| x.to_string());
                row.push(n(t.path_b_forward_packets));
                row.push(n(t.path_b_drops));
            }
            row
        })
        .collect();
    let mut header = vec![
        "mode",
        "run",
        "streams",
        "forward drops",
        "forward ECN marks",
        "reverse drops",
        "forward max queue (packets)",
        "forward sojourn p99 ms",
        "cross traffic Mbit/s",
    ];
    if two_paths {
        header.extend(["path B forward packets", "path B drops"]);
    }
    report::html_table(&header, &rows)
}

/// Run 1 of a mode: its streams' delivered messages (each variant's own network,
/// sequentially) and one floor.
fn first_run(mode: Mode, records: &[TrialRecord]) -> (Vec<(&str, Vec<Sample>)>, &[Sample]) {
    let trials: Vec<&TrialRecord> = records
        .iter()
        .filter(|r| r.mode == Some(mode) && r.run == 1)
        .collect();
    let streams = trials
        .iter()
        .flat_map(|t| t.streams.iter())
        .map(|(n, s)| {
            (
                n.as_str(),
                s.iter().copied().filter(|x| !x.censored).collect(),
            )
        })
        .collect();
    let floor = trials.first().map_or(&[][..], |t| t.floor.as_slice());
    (streams, floor)
}

fn latency_plot(
    dir: &Path,
    tag: &str,
    mode: Mode,
    s: &LabSummary,
    records: &[TrialRecord],
) -> Result<(), LabError> {
    let (streams, floor) = first_run(mode, records);
    let mut series: Vec<Series> = streams
        .iter()
        .map(|(name, samples)| Series { name, samples })
        .collect();
    series.push(Series {
        name: FLOOR,
        samples: floor,
    });
    // One shade per path and window: an outage of both directions is one event.
    let mut outages: Vec<(f64, f64, String)> = vec![];
    for o in &s.outages {
        let path = o.link.split(" forward").next().unwrap_or(&o.link);
        let path = path.split(" reverse").next().unwrap_or(path);
        let mark = (o.from_s, o.to_s, format!("{path} {}", o.kind));
        if !outages.contains(&mark) {
            outages.push(mark);
        }
    }
    report::latency_over_time(
        &dir.join(format!("latency-{tag}.svg")),
        "Latency of every delivered message against its send time (lines at 160 and 500 ms)",
        &series,
        s.duration_s,
        &outages,
    )
}

fn cdf_plot(
    dir: &Path,
    tag: &str,
    mode: Mode,
    s: &LabSummary,
    records: &[TrialRecord],
) -> Result<(), LabError> {
    let in_window = |v: &[Sample]| -> Vec<Sample> {
        v.iter()
            .copied()
            .filter(|x| s.window.contains(x.sent_s) && !x.censored)
            .collect()
    };
    let trials: Vec<&TrialRecord> = records.iter().filter(|r| r.mode == Some(mode)).collect();
    let mut pooled: Vec<(String, Vec<Sample>)> = vec![];
    for v in s.variants.iter().filter(|v| v.mode == mode) {
        let all: Vec<Sample> = trials
            .iter()
            .flat_map(|t| t.streams.iter().filter(|(n, _)| *n == v.name))
            .flat_map(|(_, x)| in_window(x))
            .collect();
        pooled.push((v.name.clone(), all));
    }
    pooled.push((
        FLOOR.into(),
        trials.iter().flat_map(|t| in_window(&t.floor)).collect(),
    ));
    let series: Vec<Series> = pooled
        .iter()
        .map(|(n, x)| Series {
            name: n,
            samples: x,
        })
        .collect();
    report::latency_cdf(
        &dir.join(format!("cdf-{tag}.svg")),
        "Latency distribution of delivered messages under load (log x)",
        &series,
    )
}
