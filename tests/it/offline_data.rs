//! The query macros' offline data (`.sqlx/`, read by every build) is current: each file belongs
//! to a query in the source, and each query still describes, against a freshly migrated
//! database, as its file says. Either failure says to run `scripts/sqlx-prepare`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use common::TestDb;
use proc_macro2::{Delimiter, TokenStream, TokenTree};
use sqlx::{Executor, SqlSafeStr};

const PREPARE: &str =
    "run scripts/sqlx-prepare (DATABASE_URL=<a PostgreSQL server> scripts/sqlx-prepare) and commit .sqlx/";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The committed files: name → (query, describe).
fn committed() -> BTreeMap<String, (String, serde_json::Value)> {
    let dir = root().join(".sqlx");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}; {PREPARE}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("query-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut data: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not query data ({e}); {PREPARE}"));
        let query = data["query"].as_str().unwrap_or_else(|| panic!("{name} has no query; {PREPARE}")).to_owned();
        files.insert(name, (query, data["describe"].take()));
    }
    files
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The SQL of every query macro (`query!`, `query_as!`, `query_scalar!` and their `_unchecked`
/// forms) in the workspace's sources, as the macro sees it (a literal, or literals joined by `+`).
fn source_queries() -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for dir in ["src", "tests", "views/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut queries = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let tokens = TokenStream::from_str(&text).unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        collect_queries(tokens, &file, &mut queries);
    }
    queries
}

const QUERY_MACROS: [&str; 3] = ["query", "query_as", "query_scalar"];

fn collect_queries(tokens: TokenStream, file: &Path, out: &mut Vec<(String, PathBuf)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, t) in tokens.iter().enumerate() {
        let TokenTree::Group(g) = t else { continue };
        let called = match i.checked_sub(2).map(|j| (&tokens[j], &tokens[j + 1])) {
            Some((TokenTree::Ident(name), TokenTree::Punct(bang)))
                if bang.as_char() == '!' && g.delimiter() == Delimiter::Parenthesis =>
            {
                Some(name.to_string())
            }
            _ => None,
        };
        match called.filter(|n| QUERY_MACROS.contains(&n.trim_end_matches("_unchecked"))) {
            Some(name) => {
                let sql = macro_sql(g.stream(), name.starts_with("query_as"))
                    .unwrap_or_else(|| panic!("{}: a {name}! whose SQL is not literals", file.display()));
                out.push((sql, file.to_owned()));
            }
            None => collect_queries(g.stream(), file, out),
        }
    }
}

/// The SQL argument of one macro call: the first argument, or the second for `query_as!`.
fn macro_sql(args: TokenStream, skip_type: bool) -> Option<String> {
    let mut tokens = args.into_iter().peekable();
    if skip_type {
        // The record type: up to the first comma outside angle brackets.
        let mut depth = 0;
        for t in tokens.by_ref() {
            match t {
                TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
                TokenTree::Punct(p) if p.as_char() == '>' => depth -= 1,
                TokenTree::Punct(p) if p.as_char() == ',' && depth == 0 => break,
                _ => {}
            }
        }
    }
    let mut sql = String::new();
    loop {
        let TokenTree::Literal(lit) = tokens.next()? else { return None };
        let syn::Lit::Str(s) = syn::Lit::new(lit) else { return None };
        sql.push_str(&s.value());
        match tokens.next() {
            Some(TokenTree::Punct(p)) if p.as_char() == '+' => continue,
            None => return Some(sql),
            Some(TokenTree::Punct(p)) if p.as_char() == ',' => return Some(sql),
            Some(_) => return None,
        }
    }
}

#[test]
fn every_committed_query_file_belongs_to_a_query_in_the_source_and_back() {
    let files = committed();
    let queries = source_queries();
    assert!(!queries.is_empty(), "found no query macro in the sources");
    let stale: Vec<String> = files
        .iter()
        .filter(|(_, (sql, _))| !queries.iter().any(|(q, _)| q == sql))
        .map(|(name, (sql, _))| format!("  .sqlx/{name}: {}", first_line(sql)))
        .collect();
    let missing: Vec<String> = queries
        .iter()
        .filter(|(q, _)| !files.values().any(|(sql, _)| sql == q))
        .map(|(q, file)| format!("  {}: {}", file.strip_prefix(root()).unwrap_or(file).display(), first_line(q)))
        .collect();
    assert!(
        stale.is_empty() && missing.is_empty(),
        "the offline query data is not the source's: {PREPARE}\nfiles no query uses:\n{}\nqueries without a file:\n{}",
        stale.join("\n"),
        missing.join("\n")
    );
}

#[tokio::test]
async fn every_committed_query_describes_as_the_migrated_database_does() {
    let t = TestDb::new().await;
    let mut conn = t.admin.acquire().await.unwrap();
    let mut drifted = Vec::new();
    for (name, (sql, stored)) in committed() {
        let now = match conn.describe(sqlx::AssertSqlSafe(sql.clone()).into_sql_str()).await {
            Ok(d) => serde_json::to_value(&d).unwrap(),
            Err(e) => {
                drifted.push(format!("  .sqlx/{name}: no longer prepares ({e}): {}", first_line(&sql)));
                continue;
            }
        };
        if let Some(what) = difference(&stored, &now) {
            drifted.push(format!("  .sqlx/{name}: {what}: {}", first_line(&sql)));
        }
    }
    assert!(
        drifted.is_empty(),
        "the offline query data does not describe the migrated schema: {PREPARE}\n{}",
        drifted.join("\n")
    );
}

/// What differs between the stored and the fresh description of a query, if anything that
/// decides the code the macro writes: the columns (name, type, origin), the parameters' types,
/// and each column's nullability, except where the column's name overrides it (`name!`, `name?`,
/// with or without `: Type`): its Rust type then does not depend on it. A column of the inner
/// side of an outer join needs that override: sqlx reads its nullability from the plan, which
/// may change with the tables' statistics.
fn difference(stored: &serde_json::Value, now: &serde_json::Value) -> Option<String> {
    if stored["columns"] != now["columns"] {
        return Some(format!("columns were {} and are {}", stored["columns"], now["columns"]));
    }
    if stored["parameters"] != now["parameters"] {
        return Some(format!("parameters were {} and are {}", stored["parameters"], now["parameters"]));
    }
    let columns = now["columns"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (i, column) in columns.iter().enumerate() {
        let name = column["name"].as_str().unwrap_or_default();
        let overridden = name.split(':').next().is_some_and(|n| n.trim_end().ends_with(['!', '?']));
        if !overridden && stored["nullable"][i] != now["nullable"][i] {
            return Some(format!(
                "column {name} was nullable: {} and is nullable: {}",
                stored["nullable"][i], now["nullable"][i]
            ));
        }
    }
    None
}

fn first_line(sql: &str) -> String {
    let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(90) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}
