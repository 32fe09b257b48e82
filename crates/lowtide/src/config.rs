//! Channel configuration: the protocol's [`Config`] plus socket options.

use serde::{Deserialize, Serialize};

use lowtide_proto::{Config, ConfigError};

use crate::tls::TlsConfig;

/// Everything a channel needs to know, typed and validated ([`ChannelConfig::validate`]).
///
/// ```
/// use lowtide::{ChannelConfig, ControllerConfig};
/// // In code ...
/// let cfg = ChannelConfig {
///     congestion: Some("cubic".into()),
///     mss: Some(1448),
///     ..ChannelConfig::with_controller(ControllerConfig::MinBuf { a: 1, b: 3 })
/// };
/// cfg.validate()?;
/// // ... or from a file (serde; unknown fields are refused).
/// let from_file: ChannelConfig = serde_json::from_str(
///     r#"{ "congestion": "cubic", "mss": 1448, "transport": { "controller": { "min_buf": { "a": 1, "b": 3 } } } }"#,
/// ).unwrap();
/// assert_eq!(from_file, cfg);
/// # Ok::<(), lowtide::proto::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelConfig {
    /// Protocol configuration (limits, controller, fairness).
    pub transport: Config,
    /// Congestion control set on the socket (`TCP_CONGESTION`), e.g. `"cubic"`, `"reno"`,
    /// `"bbr"`. `None` keeps the system default.
    pub congestion: Option<String>,
    /// `TCP_NODELAY` (default on: lowtide batches writes itself).
    pub nodelay: bool,
    /// `TCP_CORK` (default off).
    pub cork: bool,
    /// `TCP_MAXSEG`, bytes (`None`: path MTU). Caps the MSS, e.g. 1448 to emulate Ethernet on
    /// loopback.
    pub mss: Option<u32>,
    /// `SO_SNDBUF`, bytes (`None`: autotuning).
    pub sndbuf: Option<u32>,
    /// `SO_RCVBUF`, bytes (`None`: autotuning).
    pub rcvbuf: Option<u32>,
    /// Largest single `read`, bytes.
    pub read_chunk: usize,
    /// Events kept for the application before the oldest are dropped (and counted).
    pub max_events: usize,
    /// Controller decisions kept for [`Channel::drain_decisions`](crate::Channel::drain_decisions) (0: off).
    pub record_decisions: usize,
    /// TLS 1.3 on the channel (`None`: plaintext). See [`TlsConfig`].
    pub tls: Option<TlsConfig>,
    /// Connecting side: the local addresses of the host's network paths (one per uplink,
    /// e.g. Wi-Fi and cellular). The primary connection leaves from the first; with
    /// failover, each backup and the duplicate lane leave from an address other than the
    /// connection in use's, so they cross another path. Empty: the kernel chooses. The host
    /// routes by source address (a policy rule per address, as a multihomed host needs).
    pub local_addrs: Vec<std::net::IpAddr>,
    /// Multipath TCP (`IPPROTO_MPTCP`, RFC 8684) instead of TCP on both ends: the kernel's
    /// path manager spreads the connection over subflows on the host's endpoints (`ip mptcp
    /// endpoint`). A peer without MPTCP falls back to TCP. Not with `transport.failover`
    /// (lowtide's own paths).
    pub mptcp: bool,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            transport: Config::default(),
            congestion: None,
            nodelay: true,
            cork: false,
            mss: None,
            sndbuf: None,
            rcvbuf: None,
            read_chunk: 256 << 10,
            max_events: 1 << 20,
            record_decisions: 0,
            tls: None,
            local_addrs: vec![],
            mptcp: false,
        }
    }
}

impl ChannelConfig {
    /// Defaults with the given latency controller.
    ///
    /// ```
    /// use lowtide::{ChannelConfig, ControllerConfig};
    /// let cfg = ChannelConfig::with_controller(ControllerConfig::Unlimited);
    /// assert_eq!(cfg.transport.controller, ControllerConfig::Unlimited);
    /// assert!(cfg.validate().is_ok());
    /// ```
    pub fn with_controller(controller: lowtide_proto::ControllerConfig) -> Self {
        let mut c = Self::default();
        c.transport.controller = controller;
        c
    }

    /// Checks every field; errors name the field and the allowed range.
    ///
    /// ```
    /// use lowtide::ChannelConfig;
    /// assert!(ChannelConfig::default().validate().is_ok());
    /// let bad = ChannelConfig { congestion: Some("no such cc!".into()), ..ChannelConfig::default() };
    /// let err = bad.validate().unwrap_err();
    /// assert!(err.to_string().contains("congestion"), "{err}");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.transport.validate()?;
        if let Some(cc) = &self.congestion {
            if cc.is_empty()
                || cc.len() > 15
                || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(config_error(
                    "congestion",
                    cc,
                    "1..=15 ASCII letters, digits or '_' (e.g. cubic, reno, bbr)",
                ));
            }
        }
        if !(4096..=(16 << 20)).contains(&self.read_chunk) {
            return Err(config_error(
                "read_chunk",
                self.read_chunk,
                "4096..=16777216",
            ));
        }
        if !(16..=(1 << 24)).contains(&self.max_events) {
            return Err(config_error("max_events", self.max_events, "16..=16777216"));
        }
        if let Some(m) = self.mss {
            if !(88..=65495).contains(&m) {
                return Err(config_error("mss", m, "88..=65495"));
            }
        }
        for (field, v) in [("sndbuf", self.sndbuf), ("rcvbuf", self.rcvbuf)] {
            if let Some(v) = v {
                if !(4096..=(1 << 30)).contains(&v) {
                    return Err(config_error(field, v, "4096..=1073741824"));
                }
            }
        }
        if self.local_addrs.len() > 8 {
            return Err(config_error(
                "local_addrs",
                self.local_addrs.len(),
                "at most 8 addresses, one per network path",
            ));
        }
        for (k, a) in self.local_addrs.iter().enumerate() {
            if self.local_addrs[..k].contains(a) {
                return Err(config_error(
                    "local_addrs",
                    a,
                    "each address once: two entries of one address are one path, not two",
                ));
            }
            if a.is_unspecified() || a.is_multicast() {
                return Err(config_error(
                    "local_addrs",
                    a,
                    "an address of one of this host's interfaces",
                ));
            }
        }
        if self.mptcp && self.transport.failover.is_some() {
            return Err(config_error(
                "mptcp",
                "with transport.failover",
                "MPTCP (the kernel's subflows) or lowtide's failover, not both",
            ));
        }
        if let Some(t) = &self.tls {
            t.validate()?;
            // Backup connections would each need their own handshake, and a resend after a
            // switch would cross record boundaries: not built yet.
            if self.transport.failover.is_some() {
                return Err(config_error(
                    "tls",
                    "with transport.failover",
                    "TLS or failover, not both (yet)",
                ));
            }
        }
        Ok(())
    }
}

fn config_error(field: &'static str, value: impl ToString, allowed: &'static str) -> ConfigError {
    ConfigError::new(field, value, allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_fields() {
        ChannelConfig::default().validate().unwrap();
        let c = ChannelConfig {
            congestion: Some("cu bic".into()),
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "congestion");
        let c: ChannelConfig =
            serde_json::from_str(r#"{"transport":{"controller":{"min_buf":{"a":0,"b":3}}}}"#)
                .unwrap();
        assert_eq!(c.validate().unwrap_err().field, "controller.min_buf.a");
        assert!(serde_json::from_str::<ChannelConfig>(r#"{"nodelay":true,"bogus":1}"#).is_err());
        let two = |a: &str, b: &str| ChannelConfig {
            local_addrs: vec![a.parse().unwrap(), b.parse().unwrap()],
            ..Default::default()
        };
        two("10.1.1.1", "10.3.1.1").validate().unwrap();
        let e = two("10.1.1.1", "10.1.1.1").validate().unwrap_err();
        assert_eq!(e.field, "local_addrs");
        assert!(e.to_string().contains("one path"), "{e}");
        assert!(two("0.0.0.0", "10.3.1.1").validate().is_err());
    }
}
