//! Logging: tracing to stderr, under journald through its native protocol (journal.rs) or as
//! `<N>`-prefixed lines, coloured text on a terminal, plain text elsewhere, or JSON. Owns
//! the level filter; not metrics (metrics.rs).

use std::fmt;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::{
    fmt::{format::Writer, FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter},
    layer::SubscriberExt,
    registry::LookupSpan,
    reload,
    util::SubscriberInitExt,
    EnvFilter, Layer, Registry,
};

/// How log lines are written to stderr.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (priority-prefixed under journald, coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

pub mod journal;

/// The live level filter, swapped by [`set_verbosity`] on reload.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the global subscriber writing to stderr. `RUST_LOG` (an `EnvFilter`) wins when
/// set and valid; otherwise `verbosity` picks the level (0 info, 1 debug, 2+ trace).
/// Calling it again is a no-op: the first subscriber stays.
pub fn init(format: LogFormat, verbosity: u8) {
    let (filter, bad_rust_log) = match rust_log() {
        Some(Ok(filter)) => (filter, None),
        Some(Err(error)) => (EnvFilter::new(default_directives(verbosity)), Some(error)),
        None => (EnvFilter::new(default_directives(verbosity)), None),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(OneLineFields)
        .with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Json => layer.json().boxed(),
        // Under journald: the native protocol with structured fields when its socket is
        // there, else `<N>`-prefixed stderr lines.
        LogFormat::Text if stderr_is_journal() => {
            match journal::JournalLayer::connect(std::path::Path::new(journal::SOCKET)) {
                Ok(native) => native.boxed(),
                Err(_) => layer.with_ansi(false).event_format(JournaldFormat).boxed(),
            }
        }
        LogFormat::Text => layer.with_ansi(std::io::stderr().is_terminal()).boxed(),
    };
    // `try_init` fails only when a subscriber is already installed (tests, double init):
    // keeping the first one is the intended behaviour.
    if tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init()
        .is_ok()
    {
        let _ = FILTER.set(handle);
    }
    if let Some(error) = bad_rust_log {
        tracing::warn!(%error, "ignoring invalid RUST_LOG; using the -v level");
    }
}

/// Applies a new `-v`/`verbosity` level to the running subscriber (config reload).
/// Returns false when nothing changed because a valid `RUST_LOG` overrides the level, or
/// no subscriber was installed by [`init`].
pub fn set_verbosity(verbosity: u8) -> bool {
    if matches!(rust_log(), Some(Ok(_))) {
        return false;
    }
    FILTER.get().is_some_and(|handle| {
        handle
            .reload(EnvFilter::new(default_directives(verbosity)))
            .is_ok()
    })
}

/// `RUST_LOG` as a filter, when set and not blank.
fn rust_log() -> Option<Result<EnvFilter, tracing_subscriber::filter::ParseError>> {
    let directives = std::env::var("RUST_LOG").ok()?;
    if directives.trim().is_empty() {
        return None;
    }
    Some(EnvFilter::try_new(&directives))
}

/// The filter used when `RUST_LOG` is unset: our own crate gets more detail with `-v`,
/// dependencies (hyper, rustls) only at `-vvv`.
pub fn default_directives(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "info",
        1 => "info,bootlet=debug",
        2 => "info,bootlet=trace",
        _ => "trace",
    }
}

/// The syslog priority prefix journald reads from the start of a stderr line.
pub fn priority_prefix(level: Level) -> &'static str {
    match level {
        Level::ERROR => "<3>",
        Level::WARN => "<4>",
        Level::INFO => "<6>",
        Level::DEBUG | Level::TRACE => "<7>",
    }
}

/// Whether `JOURNAL_STREAM` (`"<device>:<inode>"`, decimal, as systemd sets it) names the
/// file with this device and inode.
pub fn journald_stream_matches(env: Option<&str>, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = env.and_then(|v| v.trim().split_once(':')) else {
        return false;
    };
    d.parse::<u64>() == Ok(dev) && i.parse::<u64>() == Ok(ino)
}

/// Whether our stderr is the stream systemd connected to journald.
pub fn stderr_is_journal() -> bool {
    let Ok(env) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    stderr_identity().is_some_and(|(dev, ino)| journald_stream_matches(Some(&env), dev, ino))
}

/// The (device, inode) of fd 2, through a duplicated descriptor (no unsafe).
fn stderr_identity() -> Option<(u64, u64)> {
    let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// A field's value as every text sink shows it (stderr lines, the journal's `MESSAGE` and
/// its structured fields): its `Debug` form (strings quoted and escaped, `%display` values
/// as they are), then made one line (`text::one_line`). The one escaping of server text in
/// logs: a deny message or a proxy's error page can start no line, entry or escape of its own.
pub fn field_text(value: &dyn fmt::Debug) -> String {
    let text = format!("{value:?}");
    match crate::runtime::text::one_line(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(safe) => safe,
    }
}

/// Text-mode fields (`message key=value …`) with every value made one line
/// (`text::one_line`): a value built from server text (a deny message, a proxy's error page)
/// can neither start a log line of its own nor carry terminal escapes.
#[derive(Debug, Default)]
pub struct OneLineFields;

// === impl OneLineFields ===

impl<'w> FormatFields<'w> for OneLineFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = OneLineVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct OneLineVisitor<'w> {
    writer: Writer<'w>,
    result: fmt::Result,
    first: bool,
}

impl tracing::field::Visit for OneLineVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let text = field_text(value);
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{sep}{text}"),
            name => write!(self.writer, "{sep}{}={text}", name.trim_start_matches("r#")),
        };
    }
}

/// Builds a journald-format subscriber writing to `writer`; used by tests and tools that
/// want the exact stderr line shape without touching the global subscriber.
pub fn journald_subscriber<W>(writer: W, level: Level) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(writer)
        .fmt_fields(OneLineFields)
        .event_format(JournaldFormat)
        .finish()
}

/// `<N>message key=value ... span_key=value`: one line per event, no timestamp (journald
/// stamps lines), no ANSI; embedded newlines are escaped so a line stays one entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournaldFormat;

// === impl JournaldFormat ===

impl<S, N> FormatEvent<S, N> for JournaldFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        ctx.format_fields(Writer::new(&mut line), event)?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>() {
                    if !fields.fields.is_empty() {
                        line.push(' ');
                        line.push_str(&fields.fields);
                    }
                }
            }
        }
        let prefix = priority_prefix(*event.metadata().level());
        writeln!(writer, "{prefix}{}", crate::runtime::text::one_line(&line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    /// What the prefixed stderr format writes for the events `f` emits (journal.rs compares
    /// its MESSAGE with it).
    pub(super) fn capture(f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let subscriber = journald_subscriber(buf.clone(), Level::TRACE);
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn prefixes_follow_syslog_priorities() {
        assert_eq!(priority_prefix(Level::ERROR), "<3>");
        assert_eq!(priority_prefix(Level::WARN), "<4>");
        assert_eq!(priority_prefix(Level::INFO), "<6>");
        assert_eq!(priority_prefix(Level::DEBUG), "<7>");
        assert_eq!(priority_prefix(Level::TRACE), "<7>");
    }

    #[test]
    fn journal_stream_must_name_this_device_and_inode() {
        assert!(journald_stream_matches(Some("8:12345"), 8, 12345));
        assert!(journald_stream_matches(Some("64769:9\n"), 64769, 9));
        assert!(!journald_stream_matches(Some("8:12346"), 8, 12345));
        assert!(!journald_stream_matches(Some("9:12345"), 8, 12345));
        assert!(!journald_stream_matches(None, 8, 12345));
        for garbage in ["", ":", "8", "8:", ":12345", "a:b", "8:12345:1", "-8:12345"] {
            assert!(
                !journald_stream_matches(Some(garbage), 8, 12345),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn stderr_identity_matches_its_own_journal_stream() {
        let (dev, ino) = stderr_identity().expect("fd 2 is open under cargo test");
        assert!(journald_stream_matches(
            Some(&format!("{dev}:{ino}")),
            dev,
            ino
        ));
    }

    #[test]
    fn journald_lines_carry_priority_fields_and_span_context() {
        let out = capture(|| {
            let span = tracing::info_span!("lease", node = "n1");
            let _guard = span.enter();
            tracing::error!(serial = "0a", "identity lost");
            tracing::warn!("csr denied");
            tracing::info!(next = "10s", "rotation scheduled");
            tracing::debug!("lease renewed");
            tracing::trace!("GET /version");
            tracing::info!("two\nlines");
            tracing::warn!(reason = %"no\nREADY=1\u{1b}[31m", "CSR denied");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "<3>identity lost serial=\"0a\" node=\"n1\"",
                "<4>csr denied node=\"n1\"",
                "<6>rotation scheduled next=\"10s\" node=\"n1\"",
                "<7>lease renewed node=\"n1\"",
                "<7>GET /version node=\"n1\"",
                "<6>two\\nlines node=\"n1\"",
                "<4>CSR denied reason=no\\nREADY=1\\u{1b}[31m node=\"n1\"",
            ]
        );
        assert!(!out.contains('\u{1b}'), "no ANSI escapes: {out:?}");
    }

    #[test]
    fn verbosity_maps_to_levels() {
        assert_eq!(default_directives(0), "info");
        assert_eq!(default_directives(1), "info,bootlet=debug");
        assert_eq!(default_directives(2), "info,bootlet=trace");
        assert_eq!(default_directives(9), "trace");
    }

    #[test]
    fn log_format_is_lowercase_in_yaml() {
        assert_eq!(
            serde_saphyr::to_string(&LogFormat::Json).unwrap().trim(),
            "json"
        );
        let parsed: LogFormat = serde_saphyr::from_str("text").unwrap();
        assert_eq!(parsed, LogFormat::Text);
    }
}
