//! A throwaway certificate authority for the TLS conformance run (`conformance --tls`): a CA
//! and a server certificate for `localhost` and `127.0.0.1` it signed, both P-256, made with
//! the `openssl` command in a scratch directory (milliseconds; nothing to build).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;

/// How many days the certificates are valid: a run lasts minutes.
const VALID_DAYS: &str = "2";
/// The extensions of the server certificate: what Deno's webpki and Node's OpenSSL check.
const SERVER_EXTENSIONS: &str = "\
subjectAltName = DNS:localhost, IP:127.0.0.1
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
";

/// The files [`make`] wrote.
#[derive(Debug)]
pub(crate) struct CaFiles {
    /// The CA's certificate, for the clients to trust.
    pub(crate) ca: PathBuf,
    /// The server's certificate (PEM).
    pub(crate) cert: PathBuf,
    /// The server's private key (PKCS#8 PEM).
    pub(crate) key: PathBuf,
}

/// Writes a fresh CA and a server certificate it signed into `dir`.
pub(crate) fn make(dir: &Path) -> Result<CaFiles> {
    let path = |name: &str| dir.join(name);
    let (ca, ca_key) = (path("ca.pem"), path("ca.key"));
    let (cert, key, csr) = (path("cert.pem"), path("key.pem"), path("server.csr"));
    let extensions = path("server.ext");
    fs::write(&extensions, SERVER_EXTENSIONS)
        .with_context(|| format!("writing {}", extensions.display()))?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        Command::new("openssl")
            .args(["req", "-x509"])
            .args(ec)
            .args(["-days", VALID_DAYS, "-subj", "/CN=tuplekv conformance CA"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            .arg("-keyout")
            .arg(&ca_key)
            .arg("-out")
            .arg(&ca),
    )?;
    openssl(
        Command::new("openssl")
            .arg("req")
            .args(ec)
            .args(["-subj", "/CN=localhost"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&csr),
    )?;
    openssl(
        Command::new("openssl")
            .args(["x509", "-req", "-days", VALID_DAYS, "-set_serial", "2"])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(&ca)
            .arg("-CAkey")
            .arg(&ca_key)
            .arg("-extfile")
            .arg(&extensions)
            .arg("-out")
            .arg(&cert),
    )?;
    Ok(CaFiles { ca, cert, key })
}

/// Runs one `openssl` command quietly, saying how to get it when it is missing.
fn openssl(command: &mut Command) -> Result<()> {
    let shown = cmd::display(command);
    let output = command.output().with_context(|| {
        format!(
            "could not run `{shown}`: is the openssl command installed (apt-get install openssl)?"
        )
    })?;
    if !output.status.success() {
        anyhow::bail!(
            "`{shown}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_process::scratch_dir;

    #[test]
    fn makes_a_ca_and_a_server_certificate_it_signed_for_localhost() {
        let dir = scratch_dir("test-ca").expect("dir");
        let files = make(&dir).expect("openssl makes the files");
        let verify = Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(&files.ca)
            .args(["-purpose", "sslserver", "-verify_hostname", "localhost"])
            .arg(&files.cert)
            .output()
            .expect("openssl verify");
        assert!(
            verify.status.success(),
            "{}",
            String::from_utf8_lossy(&verify.stderr)
        );
        let key = fs::read_to_string(&files.key).expect("key");
        assert!(key.contains("BEGIN PRIVATE KEY"), "{key}");
        let _ = fs::remove_dir_all(dir);
    }
}
