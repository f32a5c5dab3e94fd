//! How a kubeconfig error quotes a value from the file: as written, unless the value cannot
//! be the name or URL it claims to be and may hold the lines after it (a token among them).

use std::fmt;

/// A value from the file as an error shows it: quoted and escaped, but only when it could
/// be a name or URL at all (no whitespace, at most [`SHOWN_MAX`] characters). A value with
/// a line break is most likely a quote left open that swallowed the lines after it (a
/// token among them, found by tests/local/fuzz.rs): it is described, never shown.
pub struct Shown<'a>(pub &'a str);

/// The longest value [`Shown`] quotes.
pub const SHOWN_MAX: usize = 256;

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.chars().count();
        if self.0.chars().any(char::is_whitespace) {
            write!(
                f,
                "(a value of {n} characters with whitespace or line breaks: a quote left open?)"
            )
        } else if n > SHOWN_MAX {
            write!(f, "(a value of {n} characters)")
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}
