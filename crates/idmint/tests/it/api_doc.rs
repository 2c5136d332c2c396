//! docs/api.md stays true to the code: every route of the HTTP router and
//! every stable error code is documented there (and in its Chinese twin,
//! docs/zh-CN/api.md), nothing documented is gone from the code, and every
//! documented GET route answers a real `idmint serve`.
//!
//! What is read from the code:
//! - **Routes**: each `.route("PATH", METHODS)` in crates/idmint-server/src
//!   (today in `http.rs` and `http/tinyid.rs`), with its methods (`get`,
//!   `post`, ...; `any` is documented as `GET, POST`). A `.nest(` or
//!   `.route_service(` fails the test: it doesn't read them yet.
//! - **Codes**: the string literals of every `fn code(&self) -> &'static str`
//!   of the library crates' error types (`idmint-embed`'s, under the
//!   bindings, included), and the literal code passed to an
//!   `IssueError`/`ApiError` constructor anywhere in the server (`new`'s
//!   second argument, `bad_input`'s, `bad_request`'s and `unavailable`'s
//!   first). A code passed through a variable is not seen here; it must come
//!   from one of those literals too.
//!
//! Test modules (`#[cfg(test)] mod … { … }` and `*tests.rs` files) are left
//! out: their codes are samples.
//!
//! What is read from the docs: the `### METHOD[, METHOD] /path` headings
//! under `## Routes` (`## 接口` in Chinese), and the first backticked word
//! of each table row under `## Error codes` (`## 错误码`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::Value;

use crate::serve::{Served, client};

/// The crates whose error types' `code()` are the stable codes (the client
/// crate's codes are its own, not the server's).
const ERROR_CRATES: &[&str] = &[
    "idmint-core",
    "idmint-registry",
    "idmint-segment",
    "idmint-sql",
    "idmint-redis",
    "idmint-server",
    "idmint-embed",
];

/// A doc, with its routes and codes sections' headings.
struct Doc {
    path: &'static str,
    routes: &'static str,
    codes: &'static str,
}

const ENGLISH: Doc = Doc {
    path: "docs/api.md",
    routes: "## Routes",
    codes: "## Error codes",
};

const CHINESE: Doc = Doc {
    path: "docs/zh-CN/api.md",
    routes: "## 接口",
    codes: "## 错误码",
};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn repo_dir() -> PathBuf {
    crates_dir().join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---- Reading Rust source ----

/// Rust source with comments and the insides of string and char literals
/// blanked (so braces and commas in them don't count), and where each string
/// literal's contents are.
struct Source {
    masked: Vec<char>,
    text: Vec<char>,
    /// (start, end) of each string literal's contents in `text`.
    strings: Vec<(usize, usize)>,
}

impl Source {
    fn new(text: &str) -> Source {
        let text: Vec<char> = text.chars().collect();
        let mut masked = text.clone();
        let mut strings = Vec::new();
        let mut i = 0;
        let blank = |masked: &mut Vec<char>, from: usize, to: usize| {
            for c in &mut masked[from..to] {
                if *c != '\n' {
                    *c = ' ';
                }
            }
        };
        while i < text.len() {
            let c = text[i];
            let next = text.get(i + 1).copied();
            if c == '/' && next == Some('/') {
                let end = text[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(text.len(), |p| i + p);
                blank(&mut masked, i, end);
                i = end;
            } else if c == '/' && next == Some('*') {
                let mut depth = 0;
                let mut j = i;
                while j < text.len() {
                    if text[j] == '/' && text.get(j + 1) == Some(&'*') {
                        depth += 1;
                        j += 2;
                    } else if text[j] == '*' && text.get(j + 1) == Some(&'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut masked, i, j);
                i = j;
            } else if c == 'r'
                && (next == Some('"') || next == Some('#'))
                && !text[..i]
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_')
            {
                // A raw string: r"…" or r#"…"#.
                let hashes = text[i + 1..].iter().take_while(|&&c| c == '#').count();
                let open = i + 1 + hashes;
                if text.get(open) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let mut j = open + 1;
                loop {
                    if j >= text.len() {
                        break;
                    }
                    if text[j] == '"' && text[j + 1..].iter().take(hashes).all(|&c| c == '#') {
                        break;
                    }
                    j += 1;
                }
                strings.push((open + 1, j));
                blank(&mut masked, open + 1, j);
                i = j + 1 + hashes;
            } else if c == '"' {
                let mut j = i + 1;
                while j < text.len() && text[j] != '"' {
                    j += if text[j] == '\\' { 2 } else { 1 };
                }
                strings.push((i + 1, j));
                blank(&mut masked, i + 1, j);
                i = j + 1;
            } else if c == '\'' {
                // A char literal ('x', '\n', '\u{7f}'), or a lifetime ('a).
                let end = if next == Some('\\') {
                    text.get(i + 3..)
                        .and_then(|rest| rest.iter().position(|&c| c == '\''))
                        .map(|p| i + 3 + p)
                } else if text.get(i + 2) == Some(&'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        blank(&mut masked, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            } else {
                i += 1;
            }
        }
        Source {
            masked,
            text,
            strings,
        }
    }

    /// Where each occurrence of `needle` in the code (not in comments or
    /// literals) starts.
    fn find_all(&self, needle: &str) -> Vec<usize> {
        let needle: Vec<char> = needle.chars().collect();
        (0..self.masked.len())
            .filter(|&i| self.masked[i..].starts_with(&needle))
            .collect()
    }

    /// The index just past the bracket that closes the one at `open`.
    fn closing(&self, open: usize) -> usize {
        let mut depth = 0i32;
        for (i, &c) in self.masked.iter().enumerate().skip(open) {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
        }
        self.masked.len()
    }

    /// The top-level arguments of the call whose `(` is at `open`, as
    /// (start, end) spans.
    fn arguments(&self, open: usize) -> Vec<(usize, usize)> {
        let close = self.closing(open) - 1;
        let mut args = Vec::new();
        let mut depth = 0i32;
        let mut start = open + 1;
        for i in open + 1..close {
            match self.masked[i] {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    args.push((start, i));
                    start = i + 1;
                }
                _ => {}
            }
        }
        if self.masked[start..close].iter().any(|c| !c.is_whitespace()) {
            args.push((start, close));
        }
        args
    }

    /// The string literals within `span`, as text.
    fn strings_in(&self, (from, to): (usize, usize)) -> Vec<String> {
        self.strings
            .iter()
            .filter(|&&(s, e)| s >= from && e <= to)
            .map(|&(s, e)| self.text[s..e].iter().collect())
            .collect()
    }

    /// The literal an argument is, when it is exactly one string literal.
    fn literal(&self, (from, to): (usize, usize)) -> Option<String> {
        let code: String = self.masked[from..to].iter().collect();
        let trimmed = code.trim();
        let is_literal = trimmed.starts_with('"')
            && trimmed.ends_with('"')
            && trimmed[1..trimmed.len() - 1].trim().is_empty();
        is_literal.then(|| self.strings_in((from, to)).into_iter().next())?
    }

    /// The source without its `#[cfg(test)] mod … { … }` blocks.
    fn without_tests(text: &str) -> String {
        let source = Source::new(text);
        let mut keep = vec![true; source.text.len()];
        for at in source.find_all("#[cfg(test)]") {
            let rest: String = source.masked[at + "#[cfg(test)]".len()..]
                .iter()
                .take(200)
                .collect();
            let rest = rest.trim_start();
            let Some(after_mod) = rest.strip_prefix("mod ") else {
                continue;
            };
            // `mod name;` is a file of its own (skipped by name).
            let at_of = |c: char| after_mod.find(c).unwrap_or(usize::MAX);
            if at_of(';') < at_of('{') {
                continue;
            }
            let open = (at..source.masked.len())
                .find(|&i| source.masked[i] == '{')
                .expect("a test module has a body");
            let end = source.closing(open);
            keep[at..end].iter_mut().for_each(|k| *k = false);
        }
        source
            .text
            .iter()
            .zip(keep)
            .filter_map(|(c, k)| k.then_some(*c))
            .collect()
    }
}

/// The non-test `.rs` files under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .ends_with("tests.rs")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A code's form: lower case and underscores.
fn is_code(text: &str) -> bool {
    !text.is_empty()
        && text.starts_with(|c: char| c.is_ascii_lowercase())
        && text.chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

/// Every route of the router: path → methods (upper case).
fn router_routes() -> BTreeMap<String, BTreeSet<String>> {
    let mut routes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(&crates_dir().join("idmint-server/src")) {
        let source = Source::new(&Source::without_tests(&read(&path)));
        for unread in [".nest(", ".route_service(", ".nest_service("] {
            assert!(
                source.find_all(unread).is_empty(),
                "{}: a router built with {unread}…): teach api_doc.rs to read it",
                path.display()
            );
        }
        for at in source.find_all(".route(") {
            let open = at + ".route".len();
            let args = source.arguments(open);
            let route = args
                .first()
                .and_then(|&a| source.literal(a))
                .unwrap_or_else(|| panic!("{}: a .route( without a literal path", path.display()));
            let methods: String = args
                .get(1)
                .map_or_else(String::new, |&(s, e)| source.masked[s..e].iter().collect());
            let mut found = BTreeSet::new();
            for (name, as_documented) in [
                ("get", &["GET"][..]),
                ("post", &["POST"]),
                ("put", &["PUT"]),
                ("delete", &["DELETE"]),
                ("patch", &["PATCH"]),
                ("any", &["GET", "POST"]),
            ] {
                let called = methods.match_indices(&format!("{name}(")).any(|(i, _)| {
                    !methods[..i]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if called {
                    found.extend(as_documented.iter().map(|m| (*m).to_owned()));
                }
            }
            assert!(
                !found.is_empty(),
                "{}: route {route:?} with no method this test knows: {methods}",
                path.display()
            );
            routes.entry(route).or_default().extend(found);
        }
    }
    assert!(routes.len() > 10, "too few routes found: {routes:?}");
    routes
}

/// Every stable error code of the code, with where it was found.
fn code_codes() -> BTreeMap<String, String> {
    let mut codes = BTreeMap::new();
    for krate in ERROR_CRATES {
        let src = crates_dir().join(krate).join("src");
        for file in rust_files(&src) {
            let shown = file
                .strip_prefix(crates_dir())
                .unwrap()
                .display()
                .to_string();
            let source = Source::new(&Source::without_tests(&read(&file)));
            for at in source.find_all("fn code(&self) -> &'static str") {
                let open = (at..source.masked.len())
                    .find(|&i| source.masked[i] == '{')
                    .unwrap();
                for code in source.strings_in((open, source.closing(open))) {
                    assert!(is_code(&code), "{shown}: code() answers {code:?}");
                    codes.entry(code).or_insert_with(|| shown.clone());
                }
            }
            if *krate != "idmint-server" {
                continue;
            }
            for (call, index) in [
                ("IssueError::new(", 1),
                ("ApiError::new(", 1),
                ("IssueError::bad_input(", 0),
                ("IssueError::unavailable(", 0),
                ("ApiError::bad_request(", 0),
                ("ApiError::unavailable(", 0),
            ] {
                for at in source.find_all(call) {
                    let open = at + call.len() - 1;
                    let Some(&arg) = source.arguments(open).get(index) else {
                        continue;
                    };
                    if let Some(code) = source.literal(arg) {
                        assert!(is_code(&code), "{shown}: {call}…) with code {code:?}");
                        codes.entry(code).or_insert_with(|| shown.clone());
                    }
                }
            }
        }
    }
    assert!(codes.len() > 40, "too few codes found: {codes:?}");
    codes
}

// ---- Reading the docs ----

/// The lines of `text` from `heading` to the next heading of its level.
fn section<'a>(text: &'a str, heading: &str, path: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "{path} has no heading {heading:?}");
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

/// A doc's route headings: path → methods, and the headings as written.
fn doc_routes(doc: &Doc, text: &str) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let mut routes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut headings = Vec::new();
    for line in section(text, doc.routes, doc.path) {
        let Some(heading) = line.strip_prefix("### ") else {
            continue;
        };
        let heading = heading.trim();
        let slash = heading
            .find('/')
            .unwrap_or_else(|| panic!("{}: route heading {heading:?} has no path", doc.path));
        let path = heading[slash..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        let methods: BTreeSet<String> = heading[..slash]
            .split(',')
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        assert!(
            !methods.is_empty()
                && methods
                    .iter()
                    .all(|m| m.chars().all(|c| c.is_ascii_uppercase())),
            "{}: route heading {heading:?} is not `METHOD[, METHOD] /path`",
            doc.path
        );
        routes.entry(path).or_default().extend(methods);
        headings.push(heading.to_owned());
    }
    (routes, headings)
}

/// The codes a doc's error-code tables list (the first backticked word of
/// each row), in order.
fn doc_codes(doc: &Doc, text: &str) -> Vec<String> {
    section(text, doc.codes, doc.path)
        .into_iter()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|rest| rest.split('`').next().unwrap().to_owned())
        .collect()
}

/// Every backticked code-like word in the status tables of the routes
/// section (rows starting with a status), with its line.
fn codes_in_route_tables(doc: &Doc, text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in section(text, doc.routes, doc.path) {
        let Some(rest) = line.strip_prefix("| ") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let code_column = rest.split('|').nth(1).unwrap_or_default();
        for (i, word) in code_column.split('`').enumerate() {
            if i % 2 == 1 && is_code(word) {
                found.push((word.to_owned(), line.to_owned()));
            }
        }
    }
    found
}

fn describe(routes: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    routes
        .iter()
        .flat_map(|(path, methods)| methods.iter().map(move |m| format!("{m} {path}")))
        .collect()
}

#[test]
fn api_doc_lists_every_route_and_no_other() {
    let code = describe(&router_routes());
    for doc in [ENGLISH, CHINESE] {
        let (routes, _) = doc_routes(&doc, &read(&repo_dir().join(doc.path)));
        let documented = describe(&routes);
        let missing: Vec<_> = code.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&code).collect();
        assert!(
            missing.is_empty(),
            "{}: routes the router has and the doc doesn't (add a `### METHOD /path` \
             heading under {:?}): {missing:?}",
            doc.path,
            doc.routes
        );
        assert!(
            stale.is_empty(),
            "{}: routes documented that the router doesn't have: {stale:?}",
            doc.path
        );
    }
}

#[test]
fn api_doc_lists_every_error_code_and_no_other() {
    let code = code_codes();
    let known: BTreeSet<&str> = code.keys().map(String::as_str).collect();
    for doc in [ENGLISH, CHINESE] {
        let text = read(&repo_dir().join(doc.path));
        let listed = doc_codes(&doc, &text);
        let mut seen = BTreeSet::new();
        let twice: Vec<_> = listed.iter().filter(|c| !seen.insert(*c)).collect();
        assert!(
            twice.is_empty(),
            "{}: codes listed twice: {twice:?}",
            doc.path
        );
        let missing: Vec<String> = code
            .iter()
            .filter(|(c, _)| !seen.contains(c))
            .map(|(c, at)| format!("{c} ({at})"))
            .collect();
        assert!(
            missing.is_empty(),
            "{}: error codes the code has and {:?} doesn't list: {missing:?}",
            doc.path,
            doc.codes
        );
        let stale: Vec<_> = seen
            .iter()
            .filter(|c| !known.contains(c.as_str()))
            .collect();
        assert!(
            stale.is_empty(),
            "{}: error codes listed that no code has: {stale:?}",
            doc.path
        );
        for (word, line) in codes_in_route_tables(&doc, &text) {
            assert!(
                known.contains(word.as_str()),
                "{}: a route's table names {word:?}, which is no error code: {line}",
                doc.path
            );
        }
    }
}

#[test]
fn api_doc_twin_has_the_same_routes_and_codes() {
    let english = read(&repo_dir().join(ENGLISH.path));
    let chinese = read(&repo_dir().join(CHINESE.path));
    assert_eq!(
        doc_routes(&ENGLISH, &english).1,
        doc_routes(&CHINESE, &chinese).1,
        "{} and {} must have the same route headings, in the same order",
        ENGLISH.path,
        CHINESE.path
    );
    assert_eq!(
        doc_codes(&ENGLISH, &english),
        doc_codes(&CHINESE, &chinese),
        "{} and {} must list the same error codes, in the same order",
        ENGLISH.path,
        CHINESE.path
    );
}

const ADMIN: &str = "api-doc-admin";

const CONFIG: &str = r#"
[segment.keys.order]
step = 100

[keys.sf]
strategy = "snowflake"
"#;

/// The sample a documented GET route is asked with: its path parameters
/// filled in and the query it needs.
fn sample(path: &str) -> String {
    // Leaf's snowflake route answers 409 for a segment key.
    let key = if path.starts_with("/api/snowflake/") {
        "sf"
    } else {
        "order"
    };
    let filled = path.replace("{key}", key).replace("{id}", "1");
    let query = match path {
        "/decodeSnowflakeId" => "?snowflakeId=1",
        p if p.starts_with("/tinyid/") => "?bizType=order",
        _ => "",
    };
    format!("{filled}{query}")
}

#[test]
fn api_doc_get_routes_answer_a_real_server() {
    let (routes, _) = doc_routes(&ENGLISH, &read(&repo_dir().join(ENGLISH.path)));
    let dir = tempfile::tempdir().unwrap();
    let server = Served::start(
        &dir.path().join("data"),
        Some(CONFIG),
        &[("IDMINT_ADMIN_TOKEN", ADMIN)],
    );
    let c = client();
    let mut asked = 0;
    for (path, methods) in &routes {
        if !methods.contains("GET") {
            continue;
        }
        let url = server.url(&sample(path));
        let admin = path.starts_with("/v1/admin/");
        let mut request = c.get(&url);
        if admin {
            request = request.bearer_auth(ADMIN);
        }
        let response = request.send().unwrap();
        let status = response.status();
        let body = response.text().unwrap();
        assert_eq!(status, StatusCode::OK, "GET {url}: {body}");
        if path.starts_with("/tinyid/id/next") && !path.ends_with("Simple") {
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["code"], 200, "GET {url}: {body}");
        }
        if admin {
            // Documented: 401 `unauthorized` without the token.
            let response = c.get(&url).send().unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "GET {url}");
            let body: Value = response.json().unwrap();
            assert_eq!(body["error"]["code"], "unauthorized", "GET {url}: {body}");
        }
        asked += 1;
    }
    assert!(asked >= 15, "only {asked} GET routes documented");
    // Documented: an unknown path is 404 `not_found`, a known path with a
    // method it doesn't take 405 `method_not_allowed`.
    let response = c.get(server.url("/v1/nothing")).send().unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = c.delete(server.url("/v1/uuid")).send().unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}
