//! Go-style durations (`500ms`, `10s`, `1h30m`) for flags and the config file; parsing
//! and printing only, via jiff's friendly format restricted to Go's syntax.

use std::time::Duration;

/// A duration that is not Go syntax, or is negative.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid duration {input:?} (use Go units such as 10s, 5m, 1h)")]
pub struct DurationError {
    pub input: String,
}

/// Parses a Go-style duration: `500ms`, `10s`, `5m`, `1h`, `1h30m`, `1.5h`, `300us`, `0`.
/// Negative durations are rejected.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    static PARSER: jiff::fmt::friendly::SpanParser = jiff::fmt::friendly::SpanParser::new();
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    // Go has no spaces, signs or long unit names; the friendly parser would accept them.
    let go_shaped = !t.is_empty()
        && t.chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && t.chars().all(|c| {
            c.is_ascii_digit() || matches!(c, '.' | 'n' | 's' | 'u' | 'µ' | 'μ' | 'm' | 'h')
        });
    let err = || DurationError {
        input: s.to_owned(),
    };
    if !go_shaped {
        return Err(err());
    }
    PARSER
        .parse_unsigned_duration(t.replace('μ', "µ"))
        .map_err(|_| err())
}

/// Formats a duration so [`parse_duration`] reads it back exactly: `10s`, `1h30m`, `500ms`.
pub fn format_duration(d: Duration) -> String {
    use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
    static PRINTER: SpanPrinter = SpanPrinter::new()
        .designator(Designator::Compact)
        .spacing(Spacing::None);
    PRINTER.unsigned_duration_to_string(&d).replace('µ', "u")
}
