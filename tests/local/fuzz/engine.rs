//! A small mutation fuzzer for the stable toolchain: no coverage instrumentation, so it
//! keeps an input when it produces an outcome not seen before (an error kind, an accepted
//! shape) and mutates from that growing corpus. Cases run under `catch_unwind`; a watchdog
//! thread turns a case that runs too long into a reported hang. Findings are saved under
//! `FUZZ_OUT` (default `target/fuzz-findings/TARGET/`) for a regression test.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// What one case found: `Ok(outcome)` names the behaviour for the corpus (an error kind, an
/// accepted shape: cheap pseudo-coverage); `Err(finding)` is an invariant broken.
pub type Verdict = Result<String, String>;

/// The largest input the mutator grows to.
const MAX_INPUT: usize = 64 << 10;
/// The most inputs kept in the corpus (seeds plus new outcomes).
const MAX_CORPUS: usize = 2000;

/// How long a target runs: `FUZZ_SECONDS` (wall time per target) wins over `FUZZ_CASES`.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    Cases(u64),
    Time(Duration),
}

impl Budget {
    /// From the environment, else `default_cases` (what `cargo test` runs).
    pub fn from_env(default_cases: u64) -> Budget {
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        if let Some(s) = num("FUZZ_SECONDS").filter(|s| *s > 0.0) {
            return Budget::Time(Duration::from_secs_f64(s));
        }
        match num("FUZZ_CASES") {
            Some(n) if n >= 1.0 => Budget::Cases(n as u64),
            _ => Budget::Cases(default_cases),
        }
    }
}

/// A format-aware mutation of one input.
pub type Mutator = dyn Fn(&mut StdRng, &mut Vec<u8>);

/// One target: seeds, a dictionary of tokens the format cares about, an optional
/// structure-aware mutation, and the function under test.
pub struct Target<'a> {
    pub name: &'static str,
    pub seeds: Vec<Vec<u8>>,
    pub dict: Vec<Vec<u8>>,
    /// Applied instead of a byte-level mutation in a quarter of the steps.
    pub structured: Option<&'a Mutator>,
    pub run: &'a dyn Fn(&[u8]) -> Verdict,
}

/// What a run did.
#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub execs: u64,
    pub elapsed: Duration,
    pub corpus: usize,
    pub outcomes: usize,
    pub seed: u64,
    /// Distinct findings: description → the first input that showed it.
    pub findings: BTreeMap<String, Vec<u8>>,
}

impl Report {
    /// The line bench/fuzz.sh reads.
    pub fn summary(&self) -> String {
        format!(
            "fuzz-summary target={} execs={} seconds={:.1} execs_per_sec={:.0} corpus={} outcomes={} findings={} seed={:#x}",
            self.target,
            self.execs,
            self.elapsed.as_secs_f64(),
            self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.corpus,
            self.outcomes,
            self.findings.len(),
            self.seed
        )
    }

    /// Fails the test with every finding, each with its saved input.
    pub fn assert_clean(&self) {
        if self.findings.is_empty() {
            return;
        }
        let mut msg = format!("{}\n", self.summary());
        for (what, input) in &self.findings {
            let saved = save(self.target, what, input);
            msg.push_str(&format!(
                "- {what}\n  input ({} bytes, saved to {}): {}\n",
                input.len(),
                saved.display(),
                preview(input)
            ));
        }
        panic!("{msg}");
    }
}

thread_local! {
    static IN_CASE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Panics inside a case are findings, reported once by the engine, not printed by the hook.
fn quiet_panics_in_cases() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CASE.with(|c| c.get()) {
                default(info);
            }
        }));
    });
}

/// The seed: `FUZZ_SEED` (decimal or 0x-hex), else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(default)
}

/// The seconds one case may take before it counts as a hang (`FUZZ_HANG_SECONDS`, 20).
fn hang_limit() -> Duration {
    let secs = std::env::var("FUZZ_HANG_SECONDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// Runs `t` within `budget` from `seed`. Seeds run first, unmutated.
pub fn fuzz(t: &Target<'_>, budget: Budget, seed: u64) -> Report {
    quiet_panics_in_cases();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut corpus: Vec<Vec<u8>> = t.seeds.clone();
    let mut outcomes: BTreeSet<String> = BTreeSet::new();
    let mut findings: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let started = Instant::now();

    // The watchdog: the input in flight and when it started, checked once a second.
    let current = Arc::new(Mutex::new((Instant::now(), Vec::<u8>::new())));
    let done = Arc::new(AtomicBool::new(false));
    let execs = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (current, done, execs) = (current.clone(), done.clone(), execs.clone());
        let (name, limit) = (t.name, hang_limit());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_secs(1));
                let (since, input) = {
                    let g = current.lock().unwrap_or_else(|e| e.into_inner());
                    (g.0, g.1.clone())
                };
                if !done.load(Ordering::Relaxed) && since.elapsed() > limit {
                    let saved = save(name, "hang", &input);
                    eprintln!(
                        "fuzz-summary target={name} execs={} findings=1 HANG: one case ran over {limit:?}; input ({} bytes) saved to {}: {}",
                        execs.load(Ordering::Relaxed),
                        input.len(),
                        saved.display(),
                        preview(&input)
                    );
                    std::process::exit(3);
                }
            }
        })
    };

    let mut n: u64 = 0;
    loop {
        let more = match budget {
            Budget::Cases(max) => n < max.max(t.seeds.len() as u64),
            Budget::Time(d) => started.elapsed() < d || (n as usize) < t.seeds.len(),
        };
        if !more {
            break;
        }
        let input = if (n as usize) < t.seeds.len() {
            t.seeds[n as usize].clone()
        } else {
            let mut input = corpus[rng.random_range(0..corpus.len())].clone();
            let steps = 1 + rng.random_range(0..6);
            for _ in 0..steps {
                match t.structured {
                    Some(s) if rng.random_bool(0.25) => s(&mut rng, &mut input),
                    _ => mutate(&mut rng, &mut input, &t.dict, &corpus),
                }
            }
            input.truncate(MAX_INPUT);
            input
        };
        {
            let mut g = current.lock().unwrap_or_else(|e| e.into_inner());
            g.0 = Instant::now();
            g.1.clone_from(&input);
        }
        IN_CASE.with(|c| c.set(true));
        let verdict = catch_unwind(AssertUnwindSafe(|| (t.run)(&input)));
        IN_CASE.with(|c| c.set(false));
        n += 1;
        execs.store(n, Ordering::Relaxed);
        match verdict {
            Ok(Ok(outcome)) => {
                if outcomes.insert(outcome) {
                    if corpus.len() < MAX_CORPUS {
                        corpus.push(input);
                    } else {
                        // Full: a new outcome takes the place of a random non-seed entry,
                        // so the corpus keeps moving instead of freezing on its first fill.
                        let i = rng.random_range(t.seeds.len().min(MAX_CORPUS - 1)..MAX_CORPUS);
                        corpus[i] = input;
                    }
                }
            }
            Ok(Err(finding)) => {
                findings.entry(finding).or_insert(input);
            }
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "non-string panic".into());
                findings.entry(format!("panic: {msg}")).or_insert(input);
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    watchdog.thread().unpark();
    let _ = watchdog.join();
    let report = Report {
        target: t.name,
        execs: n,
        elapsed: started.elapsed(),
        corpus: corpus.len(),
        outcomes: outcomes.len(),
        seed,
        findings,
    };
    for (what, input) in &report.findings {
        save(t.name, what, input);
    }
    eprintln!("{}", report.summary());
    report
}

/// Bytes that matter to most text formats.
const INTERESTING: &[u8] = b"\0\n\r\t \"'#:-[]{},&*!|>%@`\\=.0179AZaz\x7f\x80\xff";

/// One byte-level or line-level mutation.
pub fn mutate(rng: &mut StdRng, data: &mut Vec<u8>, dict: &[Vec<u8>], corpus: &[Vec<u8>]) {
    let len = data.len();
    let pos = |rng: &mut StdRng, len: usize| rng.random_range(0..=len);
    match rng.random_range(0..14) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            data[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let i = rng.random_range(0..len);
            data[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
        }
        2 => {
            let at = pos(rng, len);
            let n = 1 + rng.random_range(0..8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            data.splice(at..at, bytes);
        }
        3 if len > 0 => {
            let a = rng.random_range(0..len);
            let b = (a + 1 + rng.random_range(0..64)).min(len);
            data.drain(a..b);
        }
        4 if len > 0 => {
            let a = rng.random_range(0..len);
            let b = (a + 1 + rng.random_range(0..128)).min(len);
            let chunk = data[a..b].to_vec();
            let at = pos(rng, len);
            data.splice(at..at, chunk);
        }
        5 | 6 if !dict.is_empty() => {
            let token = &dict[rng.random_range(0..dict.len())];
            let at = pos(rng, len);
            data.splice(at..at, token.iter().copied());
        }
        7 if !dict.is_empty() && len > 0 => {
            let token = &dict[rng.random_range(0..dict.len())];
            let a = rng.random_range(0..len);
            let b = (a + 1 + rng.random_range(0..16)).min(len);
            data.splice(a..b, token.iter().copied());
        }
        8 if !corpus.is_empty() => {
            let other = &corpus[rng.random_range(0..corpus.len())];
            if !other.is_empty() {
                let a = rng.random_range(0..other.len());
                let b = (a + 1 + rng.random_range(0..256)).min(other.len());
                let at = pos(rng, len);
                data.splice(at..at, other[a..b].iter().copied());
            }
        }
        9 if len > 0 => data.truncate(rng.random_range(0..len)),
        10 if len > 0 => {
            // Repeat a short range many times: long lines, deep nesting, big counts.
            let a = rng.random_range(0..len);
            let b = (a + 1 + rng.random_range(0..4)).min(len);
            let times = 1usize << rng.random_range(1..12);
            let chunk = data[a..b].repeat(times);
            data.splice(a..a, chunk);
        }
        11 => line_mutation(rng, data),
        12 if len > 0 => {
            // A number in the text becomes an extreme one.
            let extremes: [&[u8]; 8] = [
                b"0",
                b"-1",
                b"4294967296",
                b"18446744073709551616",
                b"9223372036854775807",
                b"1e309",
                b"-0",
                b"340282366920938463463374607431768211456",
            ];
            if let Some(i) = (0..len)
                .map(|_| rng.random_range(0..len))
                .take(8)
                .find(|&i| data[i].is_ascii_digit())
            {
                let end = (i..len).find(|&j| !data[j].is_ascii_digit()).unwrap_or(len);
                let e = extremes[rng.random_range(0..extremes.len())];
                data.splice(i..end, e.iter().copied());
            }
        }
        _ => {
            // Swap two ranges.
            if len > 2 {
                let a = rng.random_range(0..len / 2);
                let b = rng.random_range(len / 2..len);
                data.swap(a, b);
            }
        }
    }
}

/// Line-aware edits for line-structured formats (YAML, PEM, JSON lines).
fn line_mutation(rng: &mut StdRng, data: &mut Vec<u8>) {
    let mut lines: Vec<Vec<u8>> = data.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.is_empty() {
        return;
    }
    let i = rng.random_range(0..lines.len());
    match rng.random_range(0..5) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        2 => {
            let j = rng.random_range(0..lines.len());
            lines.swap(i, j);
        }
        3 => {
            let n = rng.random_range(1..5);
            lines[i].splice(0..0, std::iter::repeat_n(b' ', n));
        }
        _ => {
            let n = lines[i].iter().take_while(|b| **b == b' ').count();
            lines[i].drain(..n.min(rng.random_range(1..5))); // dedent
        }
    }
    *data = lines.join(&b'\n');
}

/// Where findings are written: `FUZZ_OUT`, else the test's target tmpdir.
fn findings_dir(target: &str) -> PathBuf {
    let base = std::env::var_os("FUZZ_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings"));
    base.join(target)
}

fn save(target: &str, what: &str, input: &[u8]) -> PathBuf {
    use sha2::Digest as _;
    let dir = findings_dir(target);
    let _ = std::fs::create_dir_all(&dir);
    let hash = sha2::Sha256::digest(what.as_bytes());
    let name: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{name}.input"));
    let _ = std::fs::write(&path, input);
    let _ = std::fs::write(dir.join(format!("{name}.txt")), what);
    path
}

/// The input escaped, at most 400 characters.
pub fn preview(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    let escaped: String = text.escape_debug().collect();
    if escaped.chars().count() > 400 {
        format!("{}…", escaped.chars().take(400).collect::<String>())
    } else {
        escaped
    }
}

/// An error message as an outcome name: digits and quoted values (`"…"`, `` `…` ``, `'…'`)
/// dropped and the rest cut at 80 characters, so each error kind counts once however its
/// values vary.
pub fn outcome(kind: &str, message: &str) -> String {
    let mut out = String::from(kind);
    out.push(':');
    let mut quote = None;
    for c in message.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '`' | '\'') => quote = Some(c),
            (None, c) if c.is_ascii_digit() => {}
            (None, c) => out.push(c),
        }
        if out.len() >= kind.len() + 80 {
            break;
        }
    }
    out
}

/// Whether `text` is one line with no control characters (what `report()` promises).
pub fn one_clean_line(text: &str) -> bool {
    !text.chars().any(|c| {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    })
}
