//! Text from the server is data, not protocol: a CSR's deny message, a `Status.message` or a
//! proxy's error page may carry newlines or escape sequences. `one_line` makes any text safe
//! for a one-line sink (`STATUS=`, a log line, `report()`); `clip` bounds its length. A
//! leaf: imports nothing of ours.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` could break a line-oriented sink or mislead a reader: C0/C1 controls and DEL
/// (newline, carriage return, ESC…), the Unicode line and paragraph separators, and the
/// bidirectional overrides and isolates that reorder what a terminal shows.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character escaped (`\n`, `\r`, `\t`, else `\u{1b}`), so it stays
/// one line and shows what was sent. Borrowed when there is nothing to escape.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` cut to at most `max` characters, the cut marked with "…" (counted in `max`), so
/// a sink with a size limit (a `STATUS=` datagram rides with `WATCHDOG=1`) never carries
/// an unbounded server message. Borrowed when it fits.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            Cow::Owned(format!("{}…", &text[..end]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let s = "CSR node-csr-abc was denied (Policy: not today — ünïcode ok)";
        assert!(matches!(one_line(s), Cow::Borrowed(x) if x == s));
    }

    #[test]
    fn controls_are_escaped_so_nothing_starts_a_new_line() {
        let hostile =
            "policy says no\nREADY=1\r\nMAINPID=1\u{1b}[2J\u{0}\u{7f}\u{85}\u{2028}\u{202e}x";
        let safe = one_line(hostile);
        assert_eq!(
            safe,
            "policy says no\\nREADY=1\\r\\nMAINPID=1\\u{1b}[2J\\u{0}\\u{7f}\\u{85}\\u{2028}\\u{202e}x"
        );
        assert!(!safe.chars().any(unsafe_char));
        assert_eq!(safe.lines().count(), 1);
    }

    #[test]
    fn clip_bounds_characters_and_marks_the_cut() {
        assert!(matches!(clip("short", 5), Cow::Borrowed("short")));
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("ééééé", 3), "éé…");
        assert_eq!(clip(&"x".repeat(300_000), 100).chars().count(), 100);
    }
}
