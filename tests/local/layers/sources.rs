//! The non-test source files of a crate as module paths and the module paths each one
//! names (`crate::…`, `super::…`, `self::…`, `use` groups expanded), comments and string
//! literals left out: the raw material of the import graphs in `layers.rs`.

use std::collections::BTreeMap;
use std::path::Path;

/// A module path from the crate root: `["identity", "bootstrap"]`; the root is `[]`.
pub type ModPath = Vec<String>;

/// Every non-test source file under `root` (a crate's `src/`): its module path → the
/// absolute paths its code names.
pub fn crate_paths(root: &Path) -> BTreeMap<ModPath, Vec<ModPath>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            let test_file = rel.ends_with("tests.rs") || rel.contains("/tests/");
            if !rel.ends_with(".rs") || test_file || rel.starts_with("bin/") {
                continue;
            }
            let module = module_of(&rel);
            let text = std::fs::read_to_string(&path).unwrap();
            let code = strip(&text);
            let code = code.split("#[cfg(test)]").next().unwrap_or("");
            out.insert(module.clone(), named_paths(code, &module));
        }
    }
    out
}

/// `identity/bootstrap.rs` → `[identity, bootstrap]`; `api/mod.rs` and `api.rs` → `[api]`;
/// `lib.rs`, `main.rs` → `[]`.
fn module_of(rel: &str) -> ModPath {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code without comments and with every string and char literal emptied.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body
                + rest[body..]
                    .find(&close)
                    .map_or(rest.len() - body, |e| e + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap();
            out.push_str("' '");
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`…: the number of `#`s, if `s` starts a raw string.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a char literal at the start of `s` (`'a'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        let end = s[2..].find('\'')?;
        return Some(2 + end + 1);
    }
    let (j, close) = chars.next()?;
    (close == '\'').then_some(j + 1)
}

/// The absolute module paths the code of module `at` names.
fn named_paths(code: &str, at: &ModPath) -> Vec<ModPath> {
    let mut out = vec![];
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            let before = code[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let base = match start {
                "crate::" => vec![],
                "self::" => at.clone(),
                _ => at[..at.len().saturating_sub(1)].to_vec(),
            };
            for tail in expand(&code[i + start.len()..]) {
                let mut path = base.clone();
                for seg in tail {
                    if seg == "super" {
                        path.pop();
                    } else {
                        path.push(seg);
                    }
                }
                out.push(path);
            }
        }
    }
    out
}

/// The paths a path tail names: `a::b::X` → `[[a, b, X]]`; `a::{b, c::{d, e}}` →
/// `[[a, b], [a, c, d], [a, c, e]]`.
fn expand(s: &str) -> Vec<Vec<String>> {
    let ident: String = s
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let rest = &s[ident.len()..];
    if ident.is_empty() {
        let Some(inner) = rest.strip_prefix('{') else {
            return vec![vec![]];
        };
        let mut out = vec![];
        let (mut depth, mut from) = (0, 0);
        for (j, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.extend(expand(inner[from..j].trim_start()));
                    return out;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(expand(inner[from..j].trim_start()));
                    from = j + 1;
                }
                _ => {}
            }
        }
        return out;
    }
    match rest.strip_prefix("::") {
        Some(more) => expand(more)
            .into_iter()
            .map(|mut tail| {
                tail.insert(0, ident.clone());
                tail
            })
            .collect(),
        None => vec![vec![ident]],
    }
}

#[test]
fn groups_expand_and_literals_and_comments_name_nothing() {
    let code = strip(
        "use super::{client, csr::{a, b}}; // crate::nope\n let s = \"crate::nope\"; \
         let r = r#\"self::nope\"#; let c = '\"'; fn f<'a>() { crate::pki::x(); }",
    );
    let at = vec!["identity".to_string(), "bootstrap".to_string()];
    let got = named_paths(&code, &at);
    let want: Vec<Vec<&str>> = vec![
        vec!["pki", "x"],
        vec!["identity", "client"],
        vec!["identity", "csr", "a"],
        vec!["identity", "csr", "b"],
    ];
    assert_eq!(got, want);
}
