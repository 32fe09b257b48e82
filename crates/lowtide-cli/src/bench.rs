//! `lowtide bench`: transport benchmarks over loopback against raw TCP in the same run
//! (logic in `lowtide::bench`).

use clap::Args;

use lowtide::bench::{BenchConfig, BenchReport};

/// Loopback benchmarks: goodput, small-message rate, CPU per GB (MinBuf vs Unlimited).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seconds per measurement (seven measurements in all).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Rounds per measurement; variants alternate round by round, medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
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
}

/// Runs the benchmarks and prints the report.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let cfg = BenchConfig {
        seconds: args.seconds,
        rounds: args.rounds,
        paced_rate: args.paced_rate_mb * 1e6,
        paced_message: args.paced_message,
        paced_mss: (args.paced_mss > 0).then_some(args.paced_mss),
        congestion: (args.congestion != "default").then(|| args.congestion.clone()),
        ..BenchConfig::default()
    };
    let command_line: Vec<String> = std::env::args().collect();
    if !args.json {
        println!("# {}", command_line.join(" "));
    }
    let report = lowtide::bench::run(&cfg)?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["provenance"]["command_line"] = serde_json::json!(command_line);
        println!("{v}");
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &BenchReport) {
    let p = &r.provenance;
    println!(
        "# lowtide {} on Linux {}, congestion {:?}, {} s x {} rounds per measurement",
        p.version, p.kernel, p.config.congestion, p.config.seconds, p.config.rounds
    );
    let g = &r.goodput;
    println!(
        "goodput, {} B messages:   lowtide {:9.1} MB/s   raw TCP {:9.1} MB/s   ratio {:.3} (goal >= 0.9)",
        p.config.bulk_message, g.lowtide_mb_s, g.raw_tcp_mb_s, g.ratio
    );
    let s = &r.small_messages;
    println!(
        "{} B messages:           lowtide {:9.0} msg/s  raw TCP {:9.0} msg/s  ratio {:.3} (goal >= 1e6 msg/s)",
        p.config.small_message, s.lowtide_msgs_s, s.raw_tcp_msgs_s, s.ratio
    );
    let c = &r.cpu;
    println!(
        "CPU at {:.0} MB/s:         MinBuf(1,3) {:.3} s/GB  Unlimited {:.3} s/GB  raw TCP {:.3} s/GB  ratio {:.3} (goal <= 1.3)",
        p.config.paced_rate / 1e6,
        c.min_buf_cpu_s_per_gb,
        c.unlimited_cpu_s_per_gb,
        c.raw_tcp_cpu_s_per_gb,
        c.ratio
    );
}
