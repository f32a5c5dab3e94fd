//! The native journal protocol: one datagram per event on journald's socket, with PRIORITY,
//! MESSAGE (the same text as a stderr line) and each field as a structured journal field
//! (`node` → NODE_NAME, `csr` → CSR_NAME, `not_after` → CERT_NOT_AFTER, …). Chosen by
//! telemetry.rs only when stderr is journald's and the socket exists. Values are escaped as
//! on stderr (`field_text`): server text cannot forge a field, an entry or a line.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::priority_prefix;

/// journald's native protocol socket.
pub const SOCKET: &str = "/run/systemd/journal/socket";

/// Writes events to journald; falls back to a prefixed stderr line if a send fails.
pub struct JournalLayer {
    sock: UnixDatagram,
}

/// A span's fields, kept in its extensions for the events inside it.
struct SpanFields(Vec<(&'static str, String)>);

// === impl JournalLayer ===

impl JournalLayer {
    /// Connects to the journal socket at `path` (normally [`SOCKET`]).
    pub fn connect(path: &Path) -> std::io::Result<JournalLayer> {
        let sock = UnixDatagram::unbound()?;
        sock.connect(path)?;
        Ok(JournalLayer { sock })
    }
}

impl<S> Layer<S> for JournalLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.0));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut ext = span.extensions_mut();
        match ext.get_mut::<SpanFields>() {
            Some(existing) => existing.0.extend(fields.0),
            None => ext.insert(SpanFields(fields.0)),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut all = fields.0;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    all.extend(f.0.iter().cloned());
                }
            }
        }
        let meta = event.metadata();
        let prefix = priority_prefix(*meta.level());
        // Every part is already one line (`field_text`); the whole is made one line again,
        // as the stderr format does, so the sink is the last line of defence.
        let text = message_text(fields.1.as_deref().unwrap_or(""), &all);
        let text = crate::runtime::text::one_line(&text);
        let datagram = encode(&prefix[1..2], &text, meta.target(), &all);
        if self.sock.send(&datagram).is_err() {
            let _ = writeln!(std::io::stderr(), "{prefix}{text}");
        }
    }
}

/// `message key="value" …`, the same shape as the prefixed stderr line.
fn message_text(message: &str, fields: &[(&'static str, String)]) -> String {
    let mut text = message.to_string();
    for (key, value) in fields {
        let _ = write!(text, " {key}={value}");
    }
    text
}

/// The journal field name for a tracing field: the documented names for ours, else upper case
/// with anything outside `[A-Z0-9_]` as `_`, and never a trusted (`_`) or reserved name.
pub fn field_name(key: &str) -> String {
    match key {
        "node" => return "NODE_NAME".into(),
        "csr" => return "CSR_NAME".into(),
        "not_after" => return "CERT_NOT_AFTER".into(),
        "serial" => return "CERT_SERIAL".into(),
        "rotate_at" => return "CERT_ROTATE_AT".into(),
        _ => {}
    }
    let mut name: String = key
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            c @ ('A'..='Z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect();
    let reserved = matches!(
        name.as_str(),
        "MESSAGE" | "PRIORITY" | "SYSLOG_IDENTIFIER" | "TARGET"
    );
    if reserved || name.starts_with(['_', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
        name.insert_str(0, "BOOTLET_");
    }
    name
}

/// One datagram: `KEY=value\n` per field, or `KEY\n<u64 LE length>value\n` for a value
/// containing a newline (the protocol's binary-safe form).
pub fn encode(
    priority: &str,
    message: &str,
    target: &str,
    fields: &[(&'static str, String)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    put(&mut out, "PRIORITY", priority);
    put(&mut out, "SYSLOG_IDENTIFIER", "bootlet");
    put(&mut out, "TARGET", target);
    put(&mut out, "MESSAGE", message);
    for (key, value) in fields {
        put(&mut out, &field_name(key), value.trim_matches('"'));
    }
    out
}

fn put(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    if value.contains('\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

/// Collects fields as text, escaped exactly as the stderr format shows them
/// ([`super::field_text`]), and the event's `message` separately.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>, Option<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = super::field_text(value);
        if field.name() == "message" {
            self.1 = Some(text);
        } else {
            self.0.push((field.name(), text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Parses a datagram back into (key, value) pairs, binary-safe values included.
    fn decode(mut b: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let nl = b.iter().position(|c| *c == b'\n').unwrap();
            let line = &b[..nl];
            if let Some(eq) = line.iter().position(|c| *c == b'=') {
                let (k, v) = (&line[..eq], &line[eq + 1..]);
                out.push((
                    String::from_utf8_lossy(k).into(),
                    String::from_utf8_lossy(v).into(),
                ));
                b = &b[nl + 1..];
            } else {
                let key = String::from_utf8_lossy(line).to_string();
                let len = u64::from_le_bytes(b[nl + 1..nl + 9].try_into().unwrap()) as usize;
                let value = &b[nl + 9..nl + 9 + len];
                out.push((key, String::from_utf8_lossy(value).into()));
                b = &b[nl + 9 + len + 1..];
            }
        }
        out
    }

    #[test]
    fn events_arrive_as_structured_journal_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let layer = JournalLayer::connect(&path).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("bootstrap", node = "n1");
            let _g = span.enter();
            tracing::error!(
                csr = "node-csr-x",
                not_after = "2027-01-01T00:00:00Z",
                "CSR denied"
            );
            tracing::debug!(detail = "two\nlines", "multi");
        });
        let mut buf = vec![0u8; 65536];
        let n = server.recv(&mut buf).unwrap();
        let fields = decode(&buf[..n]);
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("PRIORITY"), Some("3"));
        assert_eq!(get("SYSLOG_IDENTIFIER"), Some("bootlet"));
        assert_eq!(get("NODE_NAME"), Some("n1"));
        assert_eq!(get("CSR_NAME"), Some("node-csr-x"));
        assert_eq!(get("CERT_NOT_AFTER"), Some("2027-01-01T00:00:00Z"));
        assert_eq!(
            get("MESSAGE"),
            Some("CSR denied csr=\"node-csr-x\" not_after=\"2027-01-01T00:00:00Z\" node=\"n1\"")
        );
        let n = server.recv(&mut buf).unwrap();
        let fields = decode(&buf[..n]);
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("PRIORITY"), Some("7"));
        assert_eq!(
            get("DETAIL"),
            Some("two\\nlines"),
            "Debug-escaped in text fields"
        );
    }

    /// Server text (a deny message, a proxy's error page) in a Display field or in the
    /// message itself reaches MESSAGE and the structured fields escaped exactly as a stderr
    /// line escapes it: nothing can start an entry, a line or a terminal escape of its own.
    #[test]
    fn server_text_is_escaped_in_message_and_fields_as_on_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let layer = JournalLayer::connect(&path).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        let hostile = "policy says no\nMESSAGE=forged\r\n\u{1b}[2J\u{202e}PRIORITY=0";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("bootstrap", node = "n1", why = %hostile);
            let _g = span.enter();
            tracing::warn!(reason = %hostile, "CSR denied: {hostile}");
        });
        let mut buf = vec![0u8; 65536];
        let n = server.recv(&mut buf).unwrap();
        let fields = decode(&buf[..n]);
        let escaped = crate::runtime::text::one_line(hostile).into_owned();
        assert_eq!(
            escaped,
            "policy says no\\nMESSAGE=forged\\r\\n\\u{1b}[2J\\u{202e}PRIORITY=0"
        );
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            get("MESSAGE").unwrap(),
            format!("CSR denied: {escaped} reason={escaped} node=\"n1\" why={escaped}")
        );
        // The same text a prefixed stderr line carries.
        let line = super::super::tests::capture(|| {
            let span = tracing::info_span!("bootstrap", node = "n1", why = %hostile);
            let _g = span.enter();
            tracing::warn!(reason = %hostile, "CSR denied: {hostile}");
        });
        assert_eq!(line, format!("<4>{}\n", get("MESSAGE").unwrap()));
        assert_eq!(get("REASON").unwrap(), escaped);
        assert_eq!(get("WHY").unwrap(), escaped);
        assert_eq!(get("PRIORITY").as_deref(), Some("4"), "{fields:?}");
        assert_eq!(
            fields.iter().filter(|(k, _)| k == "MESSAGE").count(),
            1,
            "{fields:?}"
        );
        for (key, value) in &fields {
            assert!(
                !value.chars().any(|c| c.is_control() || c == '\u{202e}'),
                "{key}={value:?}"
            );
        }
    }

    #[test]
    fn binary_safe_values_and_field_names() {
        let d = encode("6", "a\nb", "bootlet", &[]);
        let fields = decode(&d);
        assert!(fields.contains(&("MESSAGE".into(), "a\nb".into())));
        assert_eq!(field_name("node"), "NODE_NAME");
        assert_eq!(field_name("retry_in"), "RETRY_IN");
        assert_eq!(field_name("message"), "BOOTLET_MESSAGE");
        assert_eq!(field_name("_x"), "BOOTLET__X");
        assert_eq!(field_name("a.b"), "A_B");
    }

    #[test]
    fn connecting_to_a_missing_socket_fails() {
        assert!(JournalLayer::connect(Path::new("/nonexistent/journal.sock")).is_err());
    }
}
