//! `fieldSelector`: which stored objects a list or a watch selects (metadata.name and
//! metadata.namespace equality, as kubectl and the kubelet use it; spec.signerName, as
//! `bootlet approve` narrows its CSR list and watch).

use serde_json::Value;

use super::{ApiError, Ctx};
use crate::store::meta_str;

/// `fieldSelector` support: metadata.name, metadata.namespace and spec.signerName equality.
pub fn field_filter(ctx: &Ctx) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = vec![];
    for term in ctx
        .q("fieldSelector")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| ApiError::bad_request(format!("invalid selector: '{term}'")))?;
        if !matches!(
            k,
            "metadata.name" | "metadata.namespace" | "spec.signerName"
        ) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {k}"
            )));
        }
        out.push((k.trim_start_matches("metadata.").to_string(), v.to_string()));
    }
    Ok(out)
}

pub fn matches(obj: &Value, filter: &[(String, String)]) -> bool {
    filter.iter().all(|(k, v)| match k.as_str() {
        "spec.signerName" => obj["spec"]["signerName"].as_str() == Some(v.as_str()),
        _ => meta_str(obj, k) == v,
    })
}
