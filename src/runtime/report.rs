//! `report()`: any error with its whole source chain on one line. A leaf every layer logs
//! through, so no module needs the top-level error type to say what went wrong.

use std::error::Error as StdError;

/// `error: cause: cause`, each source once (Display never repeats its source), on one line:
/// server text inside (a deny message, a `Status.message`) has its controls escaped.
pub fn report(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    match crate::runtime::text::one_line(&out) {
        std::borrow::Cow::Owned(safe) => safe,
        std::borrow::Cow::Borrowed(_) => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn report_joins_the_chain() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(report(&e), "outer: inner");
    }

    #[test]
    fn report_is_one_line_whatever_the_server_said() {
        let e = Outer(std::io::Error::other("policy says no\nREADY=1"));
        assert_eq!(report(&e), "outer: policy says no\\nREADY=1");
    }
}
