//! The RDC run's `report.html`: the paper's figure and what it says beside our numbers (Fig. 3
//! settling and oscillation, Table 1 timeouts and loss, Fig. 7 queue, Fig. 6/8/10 layers), the
//! goals, the agents' health, the plots and the provenance. Built from the summary alone.

use super::summary::{main_cells, show, RdcSummary, VariantSummary};
use crate::report::{escape, figure, html_table, page};
use lowtide_rdc::driver::sched::Scheduling;

/// The plots a run folder may hold, with what each shows; only those written are linked.
pub const PLOTS: [(&str, &str); 4] = [
    (
        super::PLOT,
        "packets per bin of every flow (Fig. 3), sent, retransmissions included",
    ),
    (
        super::LAYERS_PLOT,
        "layers each video stream sent over time (Fig. 6 and 8; Fig. 10 with RTT groups)",
    ),
    (
        super::QUEUE_PLOT,
        "bottleneck queue after each dequeue, packets (Fig. 7)",
    ),
    (
        super::LAYERS_BY_RTT_PLOT,
        "each RTT group's mean layers over time (Fig. 9)",
    ),
];

fn main_row(v: &VariantSummary) -> Vec<String> {
    let mut row = vec![v.name.clone()];
    row.extend(main_cells(v));
    row.push(v.paper.clone());
    row
}

fn counts(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The page. `written` says which of [`PLOTS`] exist in the run folder.
pub fn html(summary: &RdcSummary, written: &dyn Fn(&str) -> bool) -> String {
    let mut sections = vec![format!(
        "<h2>{}</h2><p>{}</p><p><b>Where we differ:</b> {}</p>",
        escape(&summary.paper_figure),
        escape(&summary.paper_text),
        escape(&summary.differences)
    )];
    if !summary.errors.is_empty() {
        let items: String = summary
            .errors
            .iter()
            .map(|e| format!("<li>{}</li>", escape(e)))
            .collect();
        sections.push(format!("<h2>Errors</h2><ul>{items}</ul>"));
    }
    let rows: Vec<Vec<String>> = summary.variants.iter().map(main_row).collect();
    sections.push(format!(
        "<h2>Per variant</h2>{}",
        html_table(
            &[
                "variant",
                "settling s",
                "oscillation (cv)",
                "RTOs",
                "loss",
                "queue p50",
                "queue p99",
                "utilization",
                "share ratio",
                "paper",
            ],
            &rows
        )
    ));
    let drops: Vec<Vec<String>> = summary
        .variants
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                counts(&v.drops),
                counts(&v.marks),
                counts(&v.spares),
                v.rdc_delay_ms.as_ref().map_or("-".into(), |d| {
                    format!("p50 {:.1}, p99 {:.1}", d.p50, d.p99)
                }),
                counts(&v.holds),
                v.rdc_hold_ms.as_ref().map_or("-".into(), |d| {
                    format!("p50 {:.1}, p99 {:.1}", d.p50, d.p99)
                }),
                v.rdc_answering.as_ref().map_or("-".into(), |a| {
                    format!(
                        "{} now; {} echoes, {} learned, {} forgotten, {} refused",
                        a.flows_now, a.echoes, a.learned, a.forgotten, a.refused
                    )
                }),
                v.emulator_lateness_ms.as_ref().map_or("-".into(), |l| {
                    format!("p99 {:.3}, max {:.1} ({} packets)", l.p99, l.max, l.count)
                }),
            ]
        })
        .collect();
    sections.push(format!(
        "<h2>The bottleneck</h2>{}",
        html_table(
            &[
                "variant",
                "drops by reason",
                "marks by reason",
                "spared by reason",
                "RDC delay written, ms",
                "held (flows not answering)",
                "RDC hold, ms",
                "answering flows",
                "emulator lateness, ms",
            ],
            &drops
        )
    ));
    let layers: Vec<Vec<String>> = summary
        .variants
        .iter()
        .filter_map(|v| {
            let l = v.layers.as_ref()?;
            Some(vec![
                v.name.clone(),
                show(&l.mean, |x| format!("{x:.2}")),
                show(&l.spread, |x| format!("{x:.2}")),
                format!(
                    "{} to {}",
                    show(&l.min_stream, |x| format!("{x:.2}")),
                    show(&l.max_stream, |x| format!("{x:.2}"))
                ),
                show(&l.changes_per_min, |x| format!("{x:.2}")),
                format!("{} / {}", l.adds, l.drops),
                l.skipped_segments.to_string(),
                v.rtt_groups.as_ref().map_or("-".into(), |g| {
                    show(&g.layer_disparity, |x| format!("{x:.2}"))
                }),
            ])
        })
        .collect();
    if !layers.is_empty() {
        sections.push(format!(
            "<h2>Layered video</h2>{}",
            html_table(
                &[
                    "variant",
                    "mean layers",
                    "spread (sd of streams)",
                    "lowest to highest stream",
                    "changes/stream/min",
                    "adds / drops",
                    "skipped segments",
                    "disparity between RTT groups",
                ],
                &layers
            )
        ));
    }
    if !summary.goals.is_empty() {
        sections.push(crate::goals::experiment_goals_html(&summary.goals));
    }
    let agents: Vec<Vec<String>> = summary
        .variants
        .iter()
        .flat_map(|v| {
            v.agents.iter().map(|a| {
                let d = a.status.as_ref().map(|s| s.driver);
                vec![
                    v.name.clone(),
                    a.receiver.to_string(),
                    a.ports.len().to_string(),
                    d.map_or("-".into(), |d| format!("{:.2}", d.cpu_seconds)),
                    d.map_or("-".into(), |d| scheduling(d.scheduling).into()),
                    d.map_or("-".into(), |d| {
                        format!("{} / {}", d.woke_late, d.max_wake_lateness_us)
                    }),
                    d.map_or("-".into(), |d| {
                        format!("{} / {} / {}", d.overruns, d.user_dropped, d.verdict_errors)
                    }),
                    if a.chains_left.is_empty() {
                        "none".into()
                    } else {
                        a.chains_left.join(", ")
                    },
                    a.error.clone().unwrap_or_default(),
                ]
            })
        })
        .collect();
    if !agents.is_empty() {
        sections.push(format!(
            "<h2>Receiver agents</h2>{}<p>Every counter of every agent is in \
             <code>summary.json</code> (<code>agents</code>).</p>",
            html_table(
                &[
                    "variant",
                    "receiver",
                    "flows",
                    "CPU s",
                    "scheduling",
                    "wake-ups > 1 ms late / latest µs",
                    "overruns / user drops / verdict errors",
                    "iptables chains left",
                    "error",
                ],
                &agents
            )
        ));
    }
    for (svg, what) in PLOTS {
        if written(svg) {
            sections.push(format!("<h2>{}</h2>{}", escape(what), figure(svg, what)));
        }
    }
    sections.push(
        "<p>Raw data: <code>flows.csv</code> (packets sent and bytes received per flow per \
         bin), <code>layers.csv</code> for video, <code>scenario-as-run.toml</code>.</p>"
            .into(),
    );
    page(
        &format!("lowtide lab: {} (RDC)", summary.scenario),
        &summary.provenance,
        &sections,
    )
}

/// How an agent's thread ran, as the report says it: refused real-time priority shows.
fn scheduling(s: Scheduling) -> &'static str {
    match s {
        Scheduling::Realtime => "real-time (SCHED_FIFO)",
        Scheduling::Ordinary => "ordinary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_lists_errors_and_links_only_written_plots() {
        let summary = RdcSummary {
            scenario: "s<1>".into(),
            paper_figure: "Fig. 3".into(),
            paper_text: "settles".into(),
            differences: "real TCP".into(),
            variants: vec![],
            goals: vec![],
            provenance: vec![("command".into(), "lowtide lab run".into())],
            errors: vec!["variant x: no network".into()],
        };
        let page = html(&summary, &|svg| svg == super::super::PLOT);
        assert!(page.contains("s&lt;1&gt;"));
        assert!(page.contains("variant x: no network"));
        assert!(page.contains(super::super::PLOT));
        assert!(!page.contains(super::super::QUEUE_PLOT));
    }
}
