//! Rewritten answers, for hostile-server tests: a rule picks answers by method, path and
//! whether they are watches, and replaces the body with something that is not JSON, pads it
//! past a client's size cap, or edits every object in it (each event of a watch as it is
//! streamed). The status, the request's effect on the store and the request log stay.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::Response;
use serde_json::Value;

use crate::types::{Body, Resp};

/// An edit applied to every object of an answer.
pub type Edit = Arc<dyn Fn(&mut Value) + Send + Sync>;

/// What a rewritten answer carries instead.
#[derive(Clone)]
pub enum Answer {
    /// These bytes instead of the body, as `text/plain`.
    Body(Bytes),
    /// This many spaces before the body: the same JSON, larger than a client's cap.
    Pad(usize),
    /// Every object edited: a watch event's `object` (line by line, as streamed), each of a
    /// list's `items`, or the body itself.
    EditObjects(Edit),
}

// === impl Answer ===

impl Answer {
    /// A body that is not JSON at all (an HTML error page, a truncated write).
    pub fn not_json(text: &str) -> Answer {
        Answer::Body(Bytes::from(text.to_string()))
    }

    /// The answer padded with `n` spaces in front.
    pub fn pad(n: usize) -> Answer {
        Answer::Pad(n)
    }

    pub fn edit_objects(f: impl Fn(&mut Value) + Send + Sync + 'static) -> Answer {
        Answer::EditObjects(Arc::new(f))
    }

    /// An issued CSR's `status.certificate` (a base64 string in JSON) replaced by `raw`,
    /// e.g. text that is not base64. Objects without a certificate are left alone.
    pub fn csr_certificate(raw: &str) -> Answer {
        let raw = raw.to_string();
        Answer::edit_objects(move |o| {
            if let Some(c) = o.pointer_mut("/status/certificate") {
                *c = Value::String(raw.clone());
            }
        })
    }

    /// Every object answered under another `metadata.name`.
    pub fn rename(name: &str) -> Answer {
        let name = name.to_string();
        Answer::edit_objects(move |o| {
            if let Some(n) = o.pointer_mut("/metadata/name") {
                *n = Value::String(name.clone());
            }
        })
    }

    /// Every object answered with a fresh `metadata.uid`: another object under the same name.
    pub fn new_uid() -> Answer {
        Answer::edit_objects(|o| {
            if let Some(u) = o.pointer_mut("/metadata/uid") {
                *u = Value::String(crate::store::new_uid());
            }
        })
    }

    /// `resp` with its body rewritten (the length header dropped: the size changes).
    pub(crate) fn apply(self, resp: Resp) -> Resp {
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(CONTENT_LENGTH);
        let body: Body = match self {
            Answer::Body(bytes) => {
                parts
                    .headers
                    .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                Full::new(bytes).boxed()
            }
            Answer::Pad(n) => {
                let pad = Ok(Frame::data(Bytes::from(vec![b' '; n])));
                let frames = futures_util::stream::iter([pad]).chain(BodyStream::new(body));
                BodyExt::boxed(StreamBody::new(frames))
            }
            Answer::EditObjects(edit) => {
                let frames = BodyStream::new(body).map(move |frame| {
                    frame.map(|f| match f.into_data() {
                        Ok(data) => Frame::data(edit_documents(&edit, &data)),
                        Err(other) => other,
                    })
                });
                BodyExt::boxed(StreamBody::new(frames))
            }
        };
        Response::from_parts(parts, body)
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Body(b) => write!(f, "Body({} bytes)", b.len()),
            Answer::Pad(n) => write!(f, "Pad({n})"),
            Answer::EditObjects(_) => f.write_str("EditObjects"),
        }
    }
}

/// Each newline-separated JSON document in `data` with `edit` applied to its objects;
/// what does not parse passes unchanged.
fn edit_documents(edit: &Edit, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len());
    for (i, doc) in data.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        match serde_json::from_slice::<Value>(doc) {
            Ok(mut v) => {
                for_each_object(&mut v, &**edit);
                out.extend(serde_json::to_vec(&v).unwrap_or_else(|_| doc.to_vec()));
            }
            Err(_) => out.extend_from_slice(doc),
        }
    }
    Bytes::from(out)
}

/// A watch event's `object`, a list's `items`, or the document itself.
fn for_each_object(doc: &mut Value, edit: &(dyn Fn(&mut Value) + Send + Sync)) {
    if doc.get("type").is_some() && doc.get("object").is_some() {
        edit(&mut doc["object"]);
    } else if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(edit);
    } else {
        edit(doc);
    }
}

/// Which answers an [`Answer`] replaces.
#[derive(Clone, Debug)]
pub struct AnswerRule {
    method: Option<String>,
    path: String,
    watch: Option<bool>,
    pub(super) answer: Answer,
}

// === impl AnswerRule ===

impl AnswerRule {
    /// Every API answer whose path (query included) contains `path`, watches or not.
    pub fn new(path: &str, answer: Answer) -> AnswerRule {
        AnswerRule {
            method: None,
            path: path.to_string(),
            watch: None,
            answer,
        }
    }

    /// Only answers to this HTTP method (`GET`, `PUT`, ...).
    pub fn method(mut self, method: &str) -> AnswerRule {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only watches (`true`) or only everything else (`false`).
    pub fn watch(mut self, watch: bool) -> AnswerRule {
        self.watch = Some(watch);
        self
    }

    pub(super) fn matches(&self, method: &str, path: &str, watch: bool) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && path.contains(&self.path)
            && self.watch.is_none_or(|w| w == watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edited(answer: &Answer, doc: &str) -> String {
        let Answer::EditObjects(edit) = answer else {
            panic!("not an edit")
        };
        String::from_utf8(edit_documents(edit, doc.as_bytes()).to_vec()).unwrap()
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn edits_reach_watch_events_list_items_and_plain_objects() {
        let cert = Answer::csr_certificate("%%%");
        let event = "{\"type\":\"MODIFIED\",\"object\":{\"status\":{\"certificate\":\"QUJD\"}}}\n";
        let out = edited(&cert, event);
        assert!(out.ends_with('\n'), "one line stays one line: {out:?}");
        assert_eq!(
            json(&out),
            json("{\"type\":\"MODIFIED\",\"object\":{\"status\":{\"certificate\":\"%%%\"}}}")
        );
        let list = "{\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{\"name\":\"b\"}}]}";
        assert_eq!(
            json(&edited(&Answer::rename("x"), list)),
            json("{\"items\":[{\"metadata\":{\"name\":\"x\"}},{\"metadata\":{\"name\":\"x\"}}]}")
        );
        // Objects without the field, and text that is not JSON, pass unchanged.
        assert_eq!(edited(&cert, "{\"status\":{}}"), "{\"status\":{}}");
        assert_eq!(edited(&cert, "not json\n"), "not json\n");
        let uid = edited(&Answer::new_uid(), "{\"metadata\":{\"uid\":\"u\"}}");
        assert!(!uid.contains("\"u\""), "{uid}");
    }

    #[test]
    fn rules_match_method_path_and_watch() {
        let rule = AnswerRule::new("/leases/", Answer::pad(1)).method("put");
        assert!(rule.matches("PUT", "/apis/x/leases/n1", false));
        assert!(!rule.matches("GET", "/apis/x/leases/n1", false));
        assert!(!rule.matches("PUT", "/api/v1/nodes/n1", false));
        let watches = AnswerRule::new("certificatesigningrequests", Answer::pad(1)).watch(true);
        assert!(watches.matches("GET", "/apis/c/certificatesigningrequests?watch=true", true));
        assert!(!watches.matches("GET", "/apis/c/certificatesigningrequests", false));
    }
}
