//! Runs `lowtide_bench` and prints the JSON report (same as `lowtide bench --json`).
//! Usage: `cargo run --release -p lowtide-bench --example bench [seconds]`

fn main() -> Result<(), lowtide::Error> {
    let mut cfg = lowtide_bench::BenchConfig::default();
    if let Some(s) = std::env::args().nth(1).and_then(|s| s.parse().ok()) {
        cfg.seconds = s;
    }
    let report = lowtide_bench::run(&cfg)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("report serialises")
    );
    Ok(())
}
