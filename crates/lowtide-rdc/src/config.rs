//! The agent's configuration, checked when the agent is built: every error names the field,
//! the value and the allowed range.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which notification the routers on the path send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Exact RDC: each packet carries the delay to impose ([`crate::wire`]).
    Exact,
    /// 1-bit RDC: CE marks; the receiver learns the delay ([`crate::one_bit`]).
    OneBit,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::OneBit => "one_bit",
        }
    }
}

/// The receiver agent's settings. [`AgentConfig::default`] is the paper's 1-bit RDC.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub mode: Mode,
    /// 1-bit: a period with at least this share of CE-marked data packets increases the delay
    /// (the paper's a = 0.9).
    pub increase_above: f64,
    /// 1-bit: a period with at most this share decreases it (the paper's b = 0.1).
    pub decrease_below: f64,
    /// The largest delay imposed on an ACK (exact notifications above it are clamped, counted).
    pub max_delay: Duration,
    /// 1-bit: the most one increase may add to the delay; `None` (the default) is the
    /// paper's doubling (`crate::one_bit`: why a step may be wanted on Linux).
    pub max_increase: Option<Duration>,
    /// 1-bit: the routers' delay at which every packet is marked (the 1-bit cell's
    /// `thresh_tb` at its link's rate). Set: the delay is estimated from the mark share
    /// (`crate::one_bit`, "The delay estimate"); `None` (the default): the paper's a/b law.
    pub full_mark_delay: Option<Duration>,
    /// 1-bit: a delay decreased below this becomes zero, so the next increase starts again
    /// from one RTT (Eq. (3) alone only approaches zero).
    pub zero_below: Duration,
    /// The RTT assumed for a flow without TCP timestamps whose handshake the agent did not see.
    pub default_rtt: Duration,
    /// How long RTT samples are kept for the windowed minimum.
    pub rtt_window: Duration,
    /// At most this many flows are tracked; later flows pass untouched (counted).
    pub max_flows: usize,
    /// At most this many packets are held at once; beyond, packets pass at once (counted).
    pub max_held: usize,
    /// A flow with no packet for this long is forgotten.
    pub idle_timeout: Duration,
    /// Mark the packets this host sends on tracked flows as the agent's echo
    /// ([`crate::wire::set_echo`]), so an RDC router knows the flow answers (not in the paper:
    /// the router needs it to delay the flows that do not; docs/rdc.md, "TCP-friendliness").
    pub echo: bool,
    /// Pace each flow's held ACKs: they leave no closer together than the flow's mean gap
    /// between held ACKs divided by this factor ([`crate::pacing`]; not in the paper).
    /// `None` (the default): each leaves at its time, bunches and all.
    pub release_pacing: Option<f64>,
    /// Hold no ACK past the sender's smallest possible RTO less this margin
    /// ([`crate::rto_guard`]; not in the paper). `None` (the default): the paper's agent,
    /// whose holds may outrun the sender's RTO after a jump of the delay or a loss.
    pub rto_guard: Option<Duration>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            mode: Mode::OneBit,
            increase_above: 0.9,
            decrease_below: 0.1,
            max_delay: Duration::from_secs(4),
            max_increase: None,
            full_mark_delay: None,
            zero_below: Duration::from_millis(1),
            default_rtt: Duration::from_millis(100),
            rtt_window: Duration::from_secs(10),
            max_flows: 4096,
            max_held: 4096,
            idle_timeout: Duration::from_secs(60),
            echo: true,
            release_pacing: None,
            rto_guard: None,
        }
    }
}

/// A setting outside what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid `{field}` = {value}: allowed is {allowed}")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: String,
}

fn check(
    ok: bool,
    field: &'static str,
    value: impl ToString,
    allowed: impl Into<String>,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError {
            field,
            value: value.to_string(),
            allowed: allowed.into(),
        })
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_secs_f64() * 1000.0)
}

impl AgentConfig {
    pub fn exact() -> Self {
        Self {
            mode: Mode::Exact,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let (a, b) = (self.increase_above, self.decrease_below);
        check(
            a > 0.0 && a <= 1.0,
            "increase_above",
            a,
            "a share above 0, at most 1",
        )?;
        check(
            (0.0..a).contains(&b),
            "decrease_below",
            b,
            format!("a share from 0 up to increase_above ({a}), exclusive"),
        )?;
        let max = self.max_delay;
        check(
            max >= Duration::from_millis(1) && max <= Duration::from_secs(60),
            "max_delay",
            ms(max),
            "1 ms to 60 s",
        )?;
        if let Some(step) = self.max_increase {
            check(
                step >= Duration::from_millis(1) && step <= max,
                "max_increase",
                ms(step),
                format!("1 ms up to max_delay ({})", ms(max)),
            )?;
        }
        if let Some(full) = self.full_mark_delay {
            check(
                full >= Duration::from_millis(1) && full <= max,
                "full_mark_delay",
                ms(full),
                format!("1 ms up to max_delay ({})", ms(max)),
            )?;
        }
        check(
            self.zero_below < max,
            "zero_below",
            ms(self.zero_below),
            format!("below max_delay ({})", ms(max)),
        )?;
        for (field, d) in [
            ("default_rtt", self.default_rtt),
            ("rtt_window", self.rtt_window),
        ] {
            check(
                d >= Duration::from_millis(1) && d <= Duration::from_secs(600),
                field,
                ms(d),
                "1 ms to 600 s",
            )?;
        }
        check(
            (1..=1_000_000).contains(&self.max_flows),
            "max_flows",
            self.max_flows,
            "1 to 1000000 flows",
        )?;
        check(
            (1..=1_000_000).contains(&self.max_held),
            "max_held",
            self.max_held,
            "1 to 1000000 packets",
        )?;
        if let Some(f) = self.release_pacing {
            check(
                (1.0..=10.0).contains(&f),
                "release_pacing",
                f,
                "a factor from 1 to 10 over the flow's ACK rate",
            )?;
        }
        if let Some(g) = self.rto_guard {
            check(
                g < crate::rto_guard::RTO_MIN,
                "rto_guard",
                ms(g),
                format!(
                    "below the sender's RTO floor ({})",
                    ms(crate::rto_guard::RTO_MIN)
                ),
            )?;
        }
        check(
            self.idle_timeout >= Duration::from_secs(1),
            "idle_timeout",
            ms(self.idle_timeout),
            "at least 1 s",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers_and_valid() {
        let c = AgentConfig::default();
        assert_eq!((c.increase_above, c.decrease_below), (0.9, 0.1));
        c.validate().unwrap();
        AgentConfig::exact().validate().unwrap();
    }

    #[test]
    fn errors_name_field_value_and_range() {
        let c = AgentConfig {
            decrease_below: 0.95,
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("decrease_below") && e.contains("0.95") && e.contains("0.9"),
            "{e}"
        );
        let c = AgentConfig {
            max_held: 0,
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("max_held") && e.contains("1 to"), "{e}");
        let c = AgentConfig {
            max_delay: Duration::from_secs(100),
            ..AgentConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("max_delay"));
        let c = AgentConfig {
            max_increase: Some(Duration::from_secs(5)),
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("max_increase") && e.contains("up to max_delay"),
            "{e}"
        );
        let c = AgentConfig {
            full_mark_delay: Some(Duration::ZERO),
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("full_mark_delay") && e.contains("0 ms"), "{e}");
        let c = AgentConfig {
            release_pacing: Some(0.5),
            ..AgentConfig::exact()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("release_pacing") && e.contains("0.5"), "{e}");
        let c = AgentConfig {
            rto_guard: Some(Duration::from_millis(200)),
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("rto_guard") && e.contains("RTO floor"), "{e}");
    }
}
