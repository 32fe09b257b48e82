//! Certificates for a trial's TLS variants (`tls = true`): one self-signed certificate made
//! with rcgen for the receiver's address, written as PEM files (lowtide loads its TLS
//! configuration from files, as a deployment does) into a directory removed on drop.

use std::net::IpAddr;
use std::path::PathBuf;

use lowtide::TlsConfig;

use crate::LabError;

/// The trial's certificate and key files.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
}

impl TlsFiles {
    /// A certificate for `addr` (the receiver host) with its key, in a fresh directory.
    pub fn generate(addr: IpAddr) -> Result<Self, LabError> {
        let err =
            |e: &dyn std::fmt::Display| LabError::io("making the TLS variant's certificate", e);
        let c = rcgen::generate_simple_self_signed(vec![addr.to_string()]).map_err(|e| err(&e))?;
        let dir = std::env::temp_dir().join(format!(
            "lowtide-lab-tls-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let files = Self { dir };
        std::fs::create_dir_all(&files.dir).map_err(|e| err(&e))?;
        std::fs::write(files.dir.join("cert.pem"), c.cert.pem()).map_err(|e| err(&e))?;
        std::fs::write(files.dir.join("key.pem"), c.key_pair.serialize_pem())
            .map_err(|e| err(&e))?;
        Ok(files)
    }

    /// The sender's side: trusts the certificate.
    pub fn client(&self) -> TlsConfig {
        TlsConfig::client(self.dir.join("cert.pem"), None)
    }

    /// The receiver's side: presents it.
    pub fn server(&self) -> TlsConfig {
        TlsConfig::server(self.dir.join("cert.pem"), self.dir.join("key.pem"))
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
