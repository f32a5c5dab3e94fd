#!/usr/bin/env bash
# The docs check (.ci/run runs it): the docs and doc comments may not name what does not exist.
#   - every repository path named in a *.md file (in backticks or as a link) or in a doc
#     comment (`//!`, `///`) of the Rust sources exists (globs must match something);
#   - every flag named for bootlet in the docs is in `bootlet [SUBCOMMAND] --help`, and every
#     flag `--help` lists is named somewhere in README.md or docs/;
#   - every relative link in a *.md file resolves, and so does its #anchor (GitHub's
#     heading slugs);
#   - `RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps`: no broken intra-doc link, no warning.
#
#   bash tests/docs-check.sh               # the check (builds target/debug/bootlet if missing)
#   bash tests/docs-check.sh --no-cargo-doc  # without the cargo doc step (quick)
#   bash tests/docs-check.sh --self-test   # plants a bad path, a bad link, a bad anchor and
#                                          # an unknown flag in a scratch tree; fails unless
#                                          # each is caught and a clean tree passes
# BOOTLET=/path/to/bootlet checks the flags of that binary. Exit status 1 on a finding.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
cargo_doc=true
for arg in "$@"; do
  case $arg in
    --self-test) mode=self-test ;;
    --no-cargo-doc) cargo_doc=false ;;
    *) echo "tests/docs-check.sh: unknown argument $arg (--self-test, --no-cargo-doc)" >&2; exit 2 ;;
  esac
done

# The checker proper: ROOT, the --help texts in HELP_DIR (one file per command), and the
# files to read from ROOT (git ls-files there, or every file for a scratch tree).
check() {
  python3 - "$@" <<'PY'
import glob, os, re, subprocess, sys

root, help_dir = sys.argv[1], sys.argv[2]
os.chdir(root)
try:
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    if not files:
        raise ValueError
except Exception:
    files = [os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs]
files = [f for f in files if os.path.exists(f)]
md = sorted(f for f in files if f.endswith(".md"))
rs = sorted(f for f in files if f.endswith(".rs"))
problems = []

def bad(where, what):
    problems.append(f"{where}: {what}")

# Top-level entries a path may start with, and the files at the top.
TOP = ("src/", "tests/", "docs/", "bench/", "config/", "systemd/", "packaging/", "testplane/", ".ci/")
TOP_FILES = {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Cargo.toml", "Cargo.lock", "LICENSE",
             "build.rs", "clippy.toml"}

def exists(path, bases):
    path = path.rstrip("/")
    for base in bases:
        p = os.path.normpath(os.path.join(base, path))
        if any(c in p for c in "*?["):
            if glob.glob(p):
                return True
        elif os.path.exists(p):
            return True
    return False

def path_like(token):
    """The repository path a backticked token names, or None."""
    token = token.strip().rstrip(".,;:)")
    token = token.split("::")[0]              # tests/local/lease.rs::a_test_name
    if " " in token or token.startswith(("/", "http", "~", "$")) or "{" in token:
        return None
    bare = token
    while bare.startswith("../"):
        bare = bare[3:]
    if bare in TOP_FILES:
        return token
    if not bare.startswith(TOP):
        return None
    # A file (an extension), a folder (a trailing '/') or a glob; not a Secret type such as
    # `testplane/static-token`, nor a placeholder such as `tests/snapshots/NAME`.
    last = bare.rstrip("/").rsplit("/", 1)[-1]
    if re.fullmatch(r"[A-Z][A-Z_]*", last):
        return None
    if bare.endswith("/") or "." in last or any(c in bare for c in "*?["):
        return token
    return None

# --- paths and links in the markdown files ---------------------------------------------
def slug(heading):
    # GitHub's rule: lower case, drop what is not a word character, '-' or ' ', then
    # spaces become '-'. A link in a heading counts by its text.
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

anchors = {}
def anchors_of(path):
    if path not in anchors:
        seen, out, fence = {}, set(), False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                out.add(s if n == 0 else f"{s}-{n}")
                seen[s] = n + 1
        anchors[path] = out
    return anchors[path]

for f in md:
    here = os.path.dirname(f) or "."
    text = open(f, encoding="utf-8").read()
    # Code blocks name commands, not files; their paths are still checked below.
    for n, line in enumerate(text.split("\n"), 1):
        for tok in re.findall(r"`([^`\n]+)`", line):
            p = path_like(tok)
            if p and not exists(p, [".", here]):
                bad(f"{f}:{n}", f"names {p!r}, which does not exist")
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, path)) if path else f
            if not os.path.exists(dest):
                bad(f"{f}:{n}", f"links to {target!r}: {dest} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                bad(f"{f}:{n}", f"links to {target!r}: {dest} has no heading #{anchor}")

# --- paths in doc comments ------------------------------------------------------------
for f in rs:
    here = os.path.dirname(f)
    module_dir = f[:-3]
    crate_src = f.split("/src/")[0] + "/src" if "/src/" in f else "src"
    for n, line in enumerate(open(f, encoding="utf-8"), 1):
        s = line.strip()
        if not (s.startswith("//!") or s.startswith("///")):
            continue
        for tok in re.findall(r"`([^`]+)`", s):
            p = path_like(tok)
            if p:
                if not exists(p, ["."]):
                    bad(f"{f}:{n}", f"doc comment names {p!r}, which does not exist")
            elif re.fullmatch(r"[\w.-]+(/[\w.-]+)+\.rs", tok):
                # A module file named relative to its folder: `conn/sender.rs`.
                if not exists(tok, [here, module_dir, crate_src, "."]):
                    bad(f"{f}:{n}", f"doc comment names {tok!r}, which does not exist")

# --- flags ----------------------------------------------------------------------------
helps = {}
for name in os.listdir(help_dir):
    helps[name] = open(os.path.join(help_dir, name), encoding="utf-8").read()
known = set()
for text in helps.values():
    known |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?=[ ,=\[<]|$)", text, re.M))
known.discard("-h")
# Flags of the other programs the docs show (the kubelet, kubeadm, kubectl, systemctl,
# apt, cargo, ...): named in their own command lines, never as bootlet's.
FOREIGN = {
    # the kubelet
    "--hostname-override", "--tls-cert-file", "--tls-private-key-file",
    # kubeadm
    "--ignore-preflight-errors",
    # kube-apiserver (and kube-controller-manager's --cluster-signing-*, by prefix below)
    "--goaway-chance", "--kubelet-certificate-authority", "--max-requests-inflight",
    # systemd/install.sh and tests/run.sh
    "--destdir", "--serving", "--kubelet-config", "--prefix", "--bin", "--serial",
    "--install-only", "--self-test", "--no-cargo-doc",
}
doc_files = [f for f in md if f == "README.md" or f.startswith("docs/")]
named = set()
for f in doc_files:
    text = open(f, encoding="utf-8").read()
    for n, line in enumerate(text.split("\n"), 1):
        spans = re.findall(r"`([^`\n]+)`", line)
        # A bootlet command line (in backticks, or a shell line of a code block).
        commands = [s for s in spans if re.match(r"^(sudo )?(/usr/bin/)?bootlet( |$)", s)]
        if re.match(r"^\s*(\$ )?(/usr/bin/)?bootlet ", line):
            commands.append(line)
        for cmd in commands:
            cmd = cmd.split("#")[0].split("|")[0].split("&&")[0]
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", cmd):
                named.add(flag)
                if flag not in known and not flag.startswith("--test-"):
                    bad(f"{f}:{n}", f"bootlet {flag} is not in `bootlet --help` of any subcommand")
        # A flag on its own in backticks: bootlet's, or one of another program's listed in
        # FOREIGN; anything else is a flag bootlet does not have.
        for s in spans:
            m = re.fullmatch(r"(--[a-z][a-z0-9-]*)(?:[=: ][^`]*)?", s)
            if not m:
                continue
            named.add(m.group(1))
            if m.group(1) not in known and m.group(1) not in FOREIGN \
                    and not m.group(1).startswith(("--test-", "--cluster-signing-")):
                bad(f"{f}:{n}", f"{m.group(1)} is neither in bootlet's `--help` nor a flag "
                                f"the docs name for another program (FOREIGN in tests/docs-check.sh)")
for flag in sorted(known):
    if flag.startswith("--") and flag not in ("--help", "--version") and flag not in named:
        bad("README.md, docs/", f"{flag} is in `--help` but no doc names it")

for p in problems:
    print(p)
print(f"docs check: {len(md)} markdown files, {len(rs)} Rust files, {len(known)} flags: "
      f"{len(problems)} problem(s)", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
}

helps=$(mktemp -d)
scratch=$(mktemp -d)
trap 'rm -rf "$helps" "$scratch"' EXIT

if [ "$mode" = self-test ]; then
  # A scratch tree with one clean file, then each fault planted on its own.
  printf 'Usage: bootlet run [OPTIONS]\n      --cert-dir <DIR>  Directory\n  -v, --verbose  More\n' >"$helps/run"
  mkdir -p "$scratch/docs" "$scratch/src"
  : >"$scratch/src/lib.rs"
  clean='# Title\n\n## A heading\n\n`src/lib.rs`, [self](#a-heading), `bootlet run --cert-dir /x`, `--verbose`.\n'
  expect() { # NAME CONTENT: the check must fail on CONTENT, naming WHAT
    printf "$clean" >"$scratch/docs/a.md"
    printf '%s\n' "$2" >>"$scratch/docs/a.md"
    if out=$(check "$scratch" "$helps" 2>&1); then
      echo "docs-check self-test: $1 was not caught:"; echo "$out"; exit 1
    fi
    grep -q "$3" <<<"$out" || { echo "docs-check self-test: $1 failed for another reason:"; echo "$out"; exit 1; }
    echo "self-test: caught $1"
  }
  printf "$clean" >"$scratch/docs/a.md"
  check "$scratch" "$helps" >/dev/null 2>&1 || { echo "docs-check self-test: the clean tree fails:"; check "$scratch" "$helps"; exit 1; }
  expect "a bad path" 'See `src/no-such-file.rs`.' "src/no-such-file.rs"
  expect "a bad link" 'See [it](no-such.md).' "no-such.md"
  expect "a bad anchor" 'See [it](#no-such-heading).' "no-such-heading"
  printf '//! Owns nothing; see `src/gone.rs`.\n' >"$scratch/src/lib.rs"
  printf "$clean" >"$scratch/docs/a.md"
  if check "$scratch" "$helps" >/dev/null 2>&1; then echo "docs-check self-test: a bad doc-comment path was not caught"; exit 1; fi
  echo "self-test: caught a bad doc-comment path"
  : >"$scratch/src/lib.rs"
  expect "an unknown flag" '`bootlet run --no-such-flag`' "no-such-flag"
  echo "docs-check self-test: ok"
  exit 0
fi

bin=${BOOTLET:-target/debug/bootlet}
[ -x "$bin" ] || cargo build --quiet --bin bootlet
"$bin" --help >"$helps/bootlet"
for sub in run doctor check-identity rejoin approve version; do
  "$bin" "$sub" --help >"$helps/$sub"
done
status=0
check "$PWD" "$helps" || status=1
if $cargo_doc; then
  echo "== RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps" >&2
  RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --workspace --quiet || status=1
fi
exit $status
