//! The plugin's answer, an `ExecCredential` on stdout, as the credential it carries and
//! when that expires (pure).

use std::time::SystemTime;

use serde::Deserialize;

use super::{BootstrapToken, Issued};
use crate::pki::split_pem;
use crate::runtime::text::{clip, one_line};

/// What the plugin prints: an `ExecCredential` of the requested version.
#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<AnswerStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerStatus {
    expiration_timestamp: Option<String>,
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// The credential in a plugin's stdout and when it expires (pure); the error is the
/// reason, to follow "returned ".
pub fn parse_answer(
    api_version: &str,
    stdout: &[u8],
) -> Result<(Issued, Option<SystemTime>), String> {
    let answer: Answer = serde_json::from_slice(stdout).map_err(|e| {
        let shown = clip(&one_line(&String::from_utf8_lossy(stdout)), 80).into_owned();
        format!("output that is not an ExecCredential ({e}): {shown:?}")
    })?;
    if answer.kind != "ExecCredential" {
        return Err(format!("kind {:?}, not ExecCredential", answer.kind));
    }
    if answer.api_version != api_version {
        return Err(format!(
            "apiVersion {:?}, but the kubeconfig asked for {api_version}",
            answer.api_version
        ));
    }
    let Some(status) = answer.status else {
        return Err("no status".into());
    };
    Ok((issued(&status)?, expiry(&status)?))
}

/// `status.expirationTimestamp`, if set (pure).
fn expiry(status: &AnswerStatus) -> Result<Option<SystemTime>, String> {
    let Some(t) = status
        .expiration_timestamp
        .as_deref()
        .filter(|t| !t.is_empty())
    else {
        return Ok(None);
    };
    match t.parse::<jiff::Timestamp>() {
        Ok(ts) => Ok(Some(SystemTime::from(ts))),
        Err(_) => Err(format!(
            "an expirationTimestamp that is not RFC 3339: {:?}",
            clip(&one_line(t), 40)
        )),
    }
}

/// The token, or the certificate chain and key: exactly one (pure).
fn issued(status: &AnswerStatus) -> Result<Issued, String> {
    let present = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.trim().is_empty());
    let (cert, key) = (
        present(&status.client_certificate_data),
        present(&status.client_key_data),
    );
    match (present(&status.token), cert, key) {
        (_, true, false) | (_, false, true) => {
            Err("only one of clientCertificateData and clientKeyData".into())
        }
        (true, true, true) => Err("both a token and a client certificate; bootlet presents \
                                   exactly one identity"
            .into()),
        (true, false, false) => Ok(Issued::Token(BootstrapToken::new(
            status.token.as_deref().unwrap_or_default(),
        ))),
        (false, true, true) => {
            let cert = status
                .client_certificate_data
                .as_deref()
                .unwrap_or_default();
            let (chain_pem, _) = split_pem(cert);
            if chain_pem.is_empty() {
                return Err("clientCertificateData that holds no PEM certificate".into());
            }
            let key = status.client_key_data.as_deref().unwrap_or_default();
            let Some(key) = split_pem(key).1 else {
                return Err("clientKeyData that holds no PEM private key".into());
            };
            Ok(Issued::ClientCert { chain_pem, key })
        }
        (false, false, false) => Err("no token or client certificate".into()),
    }
}
