//! `lowtide bench`: transport benchmarks over loopback against raw TCP in the same run
//! (logic in the `lowtide-bench` crate).

use clap::{Args, ValueEnum};

use lowtide_bench::channels::ChannelsConfig;
use lowtide_bench::{BenchConfig, BenchReport, MachineCpu, Part, ThreadPlacement, Versus};

/// A part of the benchmark, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartArg {
    /// Bulk goodput and its CPU cost.
    Goodput,
    /// Small-message rate.
    Small,
    /// CPU per GB at a paced rate.
    Cpu,
}

/// Where the bench's threads run, as named on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlacementArg {
    /// Wherever the scheduler puts them.
    Scheduler,
    /// Both threads on the first CPU.
    OneCpu,
    /// The sender on the first CPU, the receiver on the second.
    TwoCpus,
}

/// Loopback benchmarks against raw TCP: goodput, small-message rate, CPU per GB.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seconds per measurement (all rounds of one variant).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Rounds per measurement; variants alternate round by round, medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The goodput part's rounds: A/B pairs (lowtide, raw TCP back to back), each transfer
    /// seconds/rounds long; each pair's ratios are printed.
    #[arg(long, default_value_t = 9)]
    pub bulk_pairs: usize,
    /// Where each transfer's sender and receiver threads run, lowtide and raw TCP alike:
    /// scheduler (wherever it puts them), one-cpu (both on the first CPU), two-cpus (sender
    /// on the first, receiver on the second).
    #[arg(long, value_enum, default_value_t = PlacementArg::Scheduler)]
    pub placement: PlacementArg,
    /// Run only these parts (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<PartArg>,
    /// Congestion control for every socket ("default" keeps the system's).
    #[arg(long, default_value = "cubic")]
    pub congestion: String,
    /// Paced rate for the CPU comparison, MB/s.
    #[arg(long, default_value_t = 200.0)]
    pub paced_rate_mb: f64,
    /// Message size for the CPU comparison, bytes.
    #[arg(long, default_value_t = 8192)]
    pub paced_message: usize,
    /// MSS for the CPU comparison (0 keeps loopback's 64 KB).
    #[arg(long, default_value_t = 1448)]
    pub paced_mss: u32,
    /// Many channels instead: one server thread streaming to N channels at once, for each N
    /// given (comma-separated, e.g. 10,100,1000), against N raw TCP connections.
    #[arg(long, value_delimiter = ',')]
    pub channels: Vec<usize>,
    /// Rate per channel for --channels, Mbit/s.
    #[arg(long, default_value_t = 1.0)]
    pub channel_rate_mbit: f64,
    /// Message size for --channels, bytes.
    #[arg(long, default_value_t = 1250)]
    pub channel_message: usize,
    /// For --channels: the p99 message latency, ms, that N channels must keep to hold.
    #[arg(long, default_value_t = 50.0)]
    pub channel_p99_ms: f64,
    /// For --channels: after the counts, search for the largest N (lowtide only, up to this
    /// many channels) where every offered message is sent and delivered within the p99 bound:
    /// doubling while N holds, bisecting once it does not (at most four more measurements).
    #[arg(long)]
    pub headroom: Option<usize>,
}

/// Runs the benchmarks and prints the report.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !args.channels.is_empty() {
        return run_channels(&args);
    }
    let mut cfg = BenchConfig {
        seconds: args.seconds,
        rounds: args.rounds,
        bulk_pairs: args.bulk_pairs,
        placement: match args.placement {
            PlacementArg::Scheduler => ThreadPlacement::Scheduler,
            PlacementArg::OneCpu => ThreadPlacement::OneCpu,
            PlacementArg::TwoCpus => ThreadPlacement::TwoCpus,
        },
        paced_rate: args.paced_rate_mb * 1e6,
        paced_message: args.paced_message,
        paced_mss: (args.paced_mss > 0).then_some(args.paced_mss),
        congestion: (args.congestion != "default").then(|| args.congestion.clone()),
        ..BenchConfig::default()
    };
    if !args.only.is_empty() {
        cfg.parts = args
            .only
            .iter()
            .map(|p| match p {
                PartArg::Goodput => Part::Goodput,
                PartArg::Small => Part::Small,
                PartArg::Cpu => Part::Cpu,
            })
            .collect();
    }
    let command_line: Vec<String> = std::env::args().collect();
    if !args.json {
        println!("# {}", command_line.join(" "));
    }
    let report = lowtide_bench::run(&cfg)?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["provenance"]["command_line"] = serde_json::json!(command_line);
        println!("{v}");
    } else {
        print_table(&report);
    }
    Ok(())
}

fn row(what: &str, unit: &str, v: &Versus) {
    println!(
        "{what:<42} lowtide {:>11.3}  raw TCP {:>11.3}  ratio {:.3}   {unit}",
        v.lowtide, v.raw_tcp, v.ratio
    );
}

/// A figure that may have no data: printed as such, never as 0.
fn row_opt(what: &str, unit: &str, v: &Option<Versus>) {
    match v {
        Some(v) => row(what, unit, v),
        None => println!("{what:<42} no data"),
    }
}

fn machine_rows(m: &MachineCpu) {
    row_opt(
        "  both ends (process + ksoftirqd) CPU",
        "s/GB",
        &m.both_ends_s_per_gb,
    );
    row_opt(
        "  whole process (both ends) CPU",
        "s/GB",
        &m.process_s_per_gb,
    );
    row_opt("  every CPU's busy time", "s/GB", &m.machine_s_per_gb);
    row_opt("  ksoftirqd", "s/GB", &m.ksoftirqd_s_per_gb);
    if m.sender_side_s_per_gb.is_some() || m.receiver_side_s_per_gb.is_some() {
        row_opt("  sender's CPU busy", "s/GB", &m.sender_side_s_per_gb);
        row_opt("  receiver's CPU busy", "s/GB", &m.receiver_side_s_per_gb);
    }
}

fn print_table(r: &BenchReport) {
    let p = &r.provenance;
    println!(
        "# lowtide {} on Linux {}, congestion {:?}, {} s in {} rounds per measurement, goodput in {} pairs, threads placed by {:?}",
        p.version, p.kernel, p.config.congestion, p.config.seconds, p.config.rounds, p.config.bulk_pairs, p.config.placement
    );
    if let Some(g) = &r.goodput {
        let what = format!("goodput, {} B messages", p.config.bulk_message);
        row(&what, "MB/s", &g.mb_s);
        row("  sender CPU", "s/GB", &g.sender_cpu_s_per_gb);
        row("  receiver CPU", "s/GB", &g.receiver_cpu_s_per_gb);
        row("  receiver wake-ups", "per GB", &g.receiver_wakeups_per_gb);
        row("  sender + receiver CPU", "s/GB", &g.both_cpu_s_per_gb);
        machine_rows(&g.machine);
        let ratios = |f: fn(&lowtide_bench::BulkPair) -> Option<f64>| {
            let v: Vec<String> = g
                .pairs
                .iter()
                .map(|p| f(p).map_or("-".into(), |r| format!("{r:.2}")))
                .collect();
            v.join(" ")
        };
        println!(
            "  per pair: receiver CPU ratio {}",
            ratios(|p| Some(p.receiver_cpu_s_per_gb.ratio))
        );
        println!(
            "  per pair: sender + receiver CPU ratio {}",
            ratios(|p| Some(p.both_cpu_s_per_gb.ratio))
        );
        println!(
            "  per pair: both ends CPU ratio {}",
            ratios(|p| Some(p.machine.both_ends_s_per_gb?.ratio))
        );
        println!(
            "  per pair: every CPU's busy time ratio {}",
            ratios(|p| Some(p.machine.machine_s_per_gb?.ratio))
        );
        if g.machine.receiver_side_s_per_gb.is_some() {
            println!(
                "  per pair: receiver's CPU busy ratio {}",
                ratios(|p| Some(p.machine.receiver_side_s_per_gb?.ratio))
            );
        }
        println!(
            "  per pair: goodput ratio {}",
            ratios(|p| Some(p.mb_s.ratio))
        );
    }
    if let Some(s) = &r.small_messages {
        let what = format!("{} B messages", p.config.small_message);
        row(&what, "msg/s", &s.msgs_s);
        row(
            "  sender CPU",
            "s per 10^6 msgs",
            &s.sender_cpu_s_per_m_msgs,
        );
    }
    if let Some(c) = &r.cpu {
        let at = format!("at {:.0} MB/s", p.config.paced_rate / 1e6);
        row(&format!("sender CPU {at}, MinBuf(1,3)"), "s/GB", &c.min_buf);
        row(&format!("sender CPU {at}, Unlimited"), "s/GB", &c.unlimited);
        row("  receiver CPU, MinBuf(1,3)", "s/GB", &c.receiver_min_buf);
        row(
            "  sender + receiver CPU, MinBuf(1,3)",
            "s/GB",
            &c.both_min_buf,
        );
        machine_rows(&c.machine_min_buf);
        println!(
            "  MinBuf / Unlimited {:.3}; achieved MB/s: MinBuf {:.1}, Unlimited {:.1}, raw TCP {:.1}",
            c.min_buf_vs_unlimited, c.achieved_mb_s[0], c.achieved_mb_s[1], c.achieved_mb_s[2]
        );
    }
    for g in &r.goals {
        let verdict = match (g.judged, g.met) {
            (true, true) => "met",
            (true, false) => "NOT met",
            (false, true) => "(thread share, not judged) within",
            (false, false) => "(thread share, not judged) above",
        };
        println!(
            "goal: {:<44} {:>8} {:<8} {verdict} ({} rounds)",
            g.what,
            g.shown(),
            g.bound,
            g.samples
        );
    }
}

fn run_channels(args: &BenchArgs) -> anyhow::Result<()> {
    let cfg = ChannelsConfig {
        counts: args.channels.clone(),
        rate_bits: args.channel_rate_mbit * 1e6,
        message: args.channel_message,
        seconds: args.seconds,
        congestion: (args.congestion != "default").then(|| args.congestion.clone()),
        p99_bound_ms: args.channel_p99_ms,
        headroom_up_to: args.headroom,
    };
    let command_line: Vec<String> = std::env::args().collect();
    if !args.json {
        println!("# {}", command_line.join(" "));
    }
    let report = lowtide_bench::channels::run(&cfg)?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["command_line"] = serde_json::json!(command_line);
        println!("{v}");
        return Ok(());
    }
    println!(
        "# lowtide {} on Linux {}, congestion {:?}; {} B messages at {} Mbit/s per channel for {} s; \
         one server thread; memory counts both ends (clients in this process)",
        report.version,
        report.kernel,
        cfg.congestion,
        cfg.message,
        args.channel_rate_mbit,
        cfg.seconds
    );
    println!(
        "{:>6} {:<8} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>5}",
        "N",
        "variant",
        "idle KB",
        "active KB",
        "srv cpu",
        "cli cpu",
        "cores/Gb",
        "Mbit/s",
        "offered",
        "sent",
        "delivered",
        "p50 ms",
        "p99 ms",
        "holds"
    );
    let ms = |v: Option<f64>| v.map_or("no data".to_owned(), |x| format!("{x:.2}"));
    let bound = cfg.p99_bound_ms;
    for r in &report.rows {
        for (name, m) in [("lowtide", &r.lowtide), ("raw TCP", &r.raw_tcp)] {
            println!(
                "{:>6} {:<8} {:>9.1} {:>9.1} {:>7.3} {:>7.3} {:>9.3} {:>9.1} {:>9} {:>9} {:>9} {:>8} {:>8} {:>5}",
                r.channels,
                name,
                m.idle_kb_per_channel,
                m.active_kb_per_channel,
                m.server_core_share,
                m.client_core_share,
                m.server_cores_per_gbit_s,
                m.delivered_mbit_s,
                m.offered_messages,
                m.sent_messages,
                m.messages,
                ms(m.p50_latency_ms),
                ms(m.p99_latency_ms),
                if m.holds(bound) { "yes" } else { "no" }
            );
        }
    }
    for (n, held) in &report.headroom_search {
        println!(
            "{n:>6} lowtide  {}",
            if *held { "holds" } else { "does not hold" }
        );
    }
    println!(
        "headroom (largest N measured where every offered message was sent and delivered with p99 <= {bound} ms, lowtide): {}",
        report
            .headroom
            .map_or("none".to_owned(), |n| n.to_string())
    );
    for g in &report.goals {
        println!(
            "goal: {:<44} {:>10} {:<8} {} ({} samples)",
            g.what,
            g.shown(),
            g.bound,
            if g.met { "met" } else { "NOT met" },
            g.samples
        );
    }
    Ok(())
}
