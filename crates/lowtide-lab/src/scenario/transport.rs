//! The transport a variant runs over, as one typed value ([`VariantTransport`]): lowtide's
//! `ChannelConfig` as lowtide takes it, QUIC's settings or TFRC's. The scenario file keeps its
//! loose fields (`controller`, `failover`, `quic`, `tfrc`, `sndbuf`, ...; old files parse as
//! before); they become one value here, checked once by the library's own `validate()`, and
//! the trial starts its pipe from that value ([`crate::pipe::Transport`]).

use lowtide::ChannelConfig;
use lowtide_tfrc::TfrcConfig;

use super::{invalid, ScenarioError, Variant};
use crate::pipe::quic::QuicConfig;

/// What a variant runs over.
#[derive(Debug, Clone, PartialEq)]
pub enum VariantTransport {
    /// lowtide over TCP. What the trial decides is left out: the congestion control when the
    /// variant names none (the topology's), the conference's fairness, TLS files and the
    /// addresses of the variant's paths.
    Lowtide(Box<ChannelConfig>),
    /// QUIC (quinn), the clean-slate reference.
    Quic(QuicConfig),
    /// TFRC over UDP (`lowtide-tfrc`, RFC 5348).
    Tfrc(TfrcConfig),
}

impl Variant {
    /// The variant's transport from its fields: `quic`, else `tfrc`, else lowtide with the
    /// channel settings the variant names.
    pub fn transport(&self) -> VariantTransport {
        if let Some(q) = &self.quic {
            return VariantTransport::Quic(q.clone());
        }
        if let Some(t) = self.tfrc {
            return VariantTransport::Tfrc(t);
        }
        let mut cfg = ChannelConfig::with_controller(self.controller);
        cfg.transport.failover = self.failover;
        cfg.transport.importance_reserve = self.importance_reserve;
        cfg.transport.duplicate = self.duplicate;
        cfg.congestion = self.congestion.clone();
        cfg.sndbuf = self.sndbuf;
        cfg.mptcp = self.mptcp.is_some();
        VariantTransport::Lowtide(Box::new(cfg))
    }

    /// Whether the variant runs over lowtide's TCP channel.
    pub fn is_lowtide(&self) -> bool {
        self.quic.is_none() && self.tfrc.is_none()
    }
}

impl VariantTransport {
    /// Checks the settings with the library's own `validate()` (QUIC's: the lab's
    /// [`QuicConfig::check`]); the error names the field as the file does, under `at`
    /// (`variant[2]`).
    pub fn validate(&self, at: &str) -> Result<(), ScenarioError> {
        match self {
            VariantTransport::Lowtide(cfg) => cfg
                .validate()
                .map_err(|e| invalid(format!("{at}.{}", e.field), e.value, e.allowed)),
            VariantTransport::Quic(q) => {
                q.check().map_err(|e| invalid(format!("{at}.quic"), "", e))
            }
            VariantTransport::Tfrc(t) => t.validate().map_err(|e| {
                let field = e.field.strip_prefix("tfrc.").unwrap_or(e.field);
                invalid(format!("{at}.tfrc.{field}"), e.value, e.allowed)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn variant(extra: &str) -> String {
        format!(
            "{}[[variant]]\nname = \"X\"\n{extra}\n",
            crate::scenario::tests::GOOD
        )
    }

    #[test]
    fn the_loose_fields_become_one_channel_config() {
        let s = Scenario::from_toml(&variant(
            "controller = { min_buf = { a = 1, b = 3 } }\nfailover = { backups = 1 }\n\
             duplicate = { min_importance = 7 }\nsndbuf = 65536\ncongestion = \"reno\"",
        ))
        .unwrap();
        let VariantTransport::Lowtide(cfg) = s.scenario.variants[2].transport() else {
            panic!("a lowtide variant");
        };
        assert_eq!(
            cfg.transport.controller,
            lowtide::ControllerConfig::MinBuf { a: 1, b: 3 }
        );
        assert_eq!(cfg.transport.failover.map(|f| f.backups), Some(1));
        assert!(cfg.transport.duplicate.is_some());
        assert_eq!(
            (cfg.sndbuf, cfg.congestion.as_deref()),
            (Some(65536), Some("reno"))
        );
    }

    #[test]
    fn an_error_names_the_field_as_the_file_does() {
        let e = Scenario::from_toml(&variant("controller = { min_buf = { a = 0, b = 3 } }"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("variant[2].controller.min_buf.a"), "{e}");
        let e = Scenario::from_toml(&variant(
            "tfrc = { buffer = { fixed = { bytes = 16384 } }, segment_size = 10 }",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("variant[2].tfrc.segment_size"), "{e}");
    }
}
