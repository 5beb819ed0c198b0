//! The invariants, checked after every run (and by the tests on databases they break).

use super::*;

/// One violated row, and the pool it concerns when there is one.
pub(super) struct Violation {
    pub(super) invariant: &'static str,
    pub(super) pool: Option<i64>,
    pub(super) message: String,
}

/// Every violated invariant, one message per violating row (empty: all hold).
pub async fn check_invariants(admin: &PgPool) -> anyhow::Result<Vec<String>> {
    Ok(find_violations(admin).await?.into_iter().map(|v| v.message).collect())
}

/// The invariants' queries (src/stress/invariants.sql), each returning (pool, message) per
/// violating row: (name, query) in the file's order.
pub fn invariant_queries() -> Vec<(&'static str, &'static str)> {
    const FILE: &str = include_str!("invariants.sql");
    FILE.split("\n-- invariant: ")
        .skip(1)
        .filter_map(|block| {
            let (name, query) = block.split_once('\n')?;
            Some((name.trim(), query.trim().trim_end_matches(';')))
        })
        .collect()
}

pub(super) async fn find_violations(admin: &PgPool) -> anyhow::Result<Vec<Violation>> {
    let mut out = vec![];
    // (1) Materialized entitlements equal a fresh computation.
    pub(super) const FRESH: &str = "(1) materialized entitlements equal a fresh computation";
    let mut conn = admin.acquire().await?;
    for pool in ent_store::pools_out_of_date(&mut conn).await? {
        let stored = ent_store::pool_entitlements(&mut conn, pool).await?;
        let fresh = ent_store::computed_entitlements(&mut conn, pool).await?;
        out.push(Violation {
            invariant: FRESH,
            pool: Some(pool.0),
            message: format!(
                "{FRESH}: pool {pool} materialized {} but a fresh computation gives {}",
                show_values(&stored),
                show_values(&fresh)
            ),
        });
    }
    for (name, sql) in invariant_queries() {
        let rows: Vec<(Option<i64>, String)> = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_all(&mut *conn)
            .await
            .with_context(|| format!("checking {name}"))?;
        out.extend(rows.into_iter().map(|(pool, message)| Violation {
            invariant: name,
            pool,
            message: format!("{name}: {message}"),
        }));
    }
    Ok(out)
}

pub(super) fn show_values(v: &[ent_store::EntitlementValue]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|e| match (e.numeric_value, e.flag_value) {
            (Some(n), _) => format!("{}={n}", e.resource_key),
            (_, Some(f)) => format!("{}={f}", e.resource_key),
            _ => format!("{}=?", e.resource_key),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The first violations, then the acts on the first few violated pools, in order.
pub(super) fn print_violations(violations: &[Violation], events: &[Event]) {
    if violations.is_empty() {
        eprintln!("stress: every invariant holds");
        return;
    }
    let mut by_invariant: BTreeMap<&str, usize> = BTreeMap::new();
    for v in violations {
        *by_invariant.entry(v.invariant).or_default() += 1;
    }
    eprintln!("stress: {} violations:", violations.len());
    for (invariant, n) in &by_invariant {
        eprintln!("  {n:>6}  {invariant}");
    }
    eprintln!("stress: the first:");
    for v in violations.iter().take(PRINTED_VIOLATIONS) {
        eprintln!("  {}", v.message);
    }
    // The sequence behind the first few: the acts that name the grants and conferrals a
    // violation names, else the last acts on its pool.
    for v in violations.iter().take(PRINTED_SEQUENCES) {
        let ids = named_ids(&v.message);
        let mut acts: Vec<&Event> = if ids.is_empty() {
            events.iter().filter(|e| e.pool.is_some() && e.pool == v.pool).collect()
        } else {
            events.iter().filter(|e| ids.iter().any(|(word, n)| mentions(&e.detail, word, *n))).collect()
        };
        acts.sort_by_key(|e| (e.end_ms, e.start_ms));
        let skip = acts.len().saturating_sub(25);
        eprintln!(
            "stress: the acts behind “{}” (by end time{}):",
            v.message,
            if skip > 0 { "; the last 25" } else { "" }
        );
        for e in &acts[skip..] {
            eprintln!("{e}");
        }
    }
}

/// The ("grant" | "conferral" | "change" | "plan act", id) pairs a message names.
pub(super) fn named_ids(message: &str) -> Vec<(&'static str, i64)> {
    let words: Vec<&str> = message.split(|c: char| c.is_whitespace() || c == '(' || c == ';').collect();
    let mut out = vec![];
    for (i, pair) in words.windows(2).enumerate() {
        let plan = i > 0 && words[i - 1] == "plan";
        for (word, name) in [("grant", "grant"), ("conferral", "conferral"), ("change", "change"), ("act", "plan act")]
        {
            if pair[0] == word
                && (word != "act" || plan)
                && let Ok(n) = pair[1].trim_end_matches([',', ')', ':']).parse::<i64>()
            {
                out.push((name, n));
            }
        }
    }
    out
}

/// Does `detail` name `word n` (and not `word n0`)?
pub(super) fn mentions(detail: &str, word: &str, n: i64) -> bool {
    let needle = format!("{word} {n}");
    detail.match_indices(&needle).any(|(i, _)| {
        let before_ok = i == 0 || !detail[..i].ends_with(|c: char| c.is_alphanumeric());
        let after_ok = !detail[i + needle.len()..].starts_with(|c: char| c.is_ascii_digit());
        before_ok && after_ok
    })
}

/// For the first deadlocks: every act that overlapped it, so the cycle can be read off.
pub(super) fn print_deadlock_sequences(events: &[Event]) {
    for d in events.iter().filter(|e| e.outcome == "deadlock").take(PRINTED_SEQUENCES) {
        let by = d.task.map(|t| format!("task {t}")).unwrap_or_else(|| "a job".into());
        eprintln!("stress: acts overlapping the deadlock in {} ({by}):", d.path.name());
        let mut around: Vec<&Event> =
            events.iter().filter(|e| e.start_ms <= d.end_ms && e.end_ms >= d.start_ms).collect();
        around.sort_by_key(|e| (e.start_ms, e.task));
        for e in around {
            eprintln!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    pub(super) fn the_picker_reaches_every_path_but_the_jobs() {
        let mut rng = Rng::new(7);
        let mut seen = BTreeSet::new();
        for _ in 0..10_000 {
            seen.insert(pick_path(&mut rng));
        }
        let picked: BTreeSet<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
        assert_eq!(seen, picked);
    }

    #[test]
    pub(super) fn the_opening_round_tries_every_picked_path_once_the_drain_and_retry_last() {
        let round = opening_round(&mut Rng::new(11));
        let picked: Vec<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
        assert_eq!(round.len(), picked.len());
        assert_eq!(round.iter().copied().collect::<BTreeSet<_>>(), picked.into_iter().collect::<BTreeSet<_>>());
        let last: BTreeSet<StressPath> = round[round.len() - 2..].iter().copied().collect();
        assert_eq!(last, [StressPath::DrainPlanAct, StressPath::RetryPlanAct].into_iter().collect());
        let commit = round.iter().position(|p| *p == StressPath::RuleChangeBatchCommit).unwrap();
        assert_eq!(round[commit + 1], StressPath::DrainChange, "the drain right after the rule change");
        assert_ne!(round, opening_round(&mut Rng::new(12)), "each task's round has an order of its own");
    }

    #[test]
    pub(super) fn violations_point_at_the_acts_that_name_their_ids() {
        let m = "(4) x: floor grant 43 (product 4) is active but has no holding conferral (pool 6; its last conferral 120 ended: stress)";
        assert_eq!(named_ids(m), vec![("grant", 43), ("conferral", 120)]);
        assert!(mentions("conferral 120: ended true", "conferral", 120));
        assert!(!mentions("conferral 1205: ended true", "conferral", 120));
        assert!(mentions("Basic x1, floor grant 43", "grant", 43));
        assert!(!mentions("Basic x1 as grant 143", "grant", 43));
        let m = "(11) x: plan act 12 (default_change, migrate) is still running: 1 organizations pending, 0 failed, \
                 the first pool 7; act 5 (fedwiki.active_sites) of change 3";
        assert_eq!(named_ids(m), vec![("plan act", 12), ("change", 3)]);
        assert!(mentions("type 3 from ladder Some(1) to ladder 4: plan act 12, in the request", "plan act", 12));
        assert!(!mentions("requeued by plan act 120", "plan act", 12));
    }

    #[test]
    pub(super) fn paths_are_named_as_their_declarations() {
        let declared: Vec<&str> = crate::lock_paths::declared().iter().map(|p| p.path).collect();
        for p in StressPath::ALL {
            let undeclared = p.is_job()
                || matches!(
                    p,
                    StressPath::SyncSourceStatus
                        | StressPath::UpdateConferralBounds
                        | StressPath::DrainPlanAct
                        | StressPath::CreateSite
                        | StressPath::DeleteSite
                        | StressPath::ChangePlan
                        | StressPath::ReadBilling
                        | StressPath::SyncSites
                        | StressPath::ReconcileQuota
                        | StressPath::RepairAtStart
                );
            assert_eq!(declared.contains(&p.name()), !undeclared, "{}", p.name());
        }
        for p in StressPath::GRANT_PATHS
            .into_iter()
            .chain(StressPath::PLAN_ACT_PATHS)
            .chain(StressPath::SITE_PATHS)
            .chain(StressPath::RELAY_PATHS)
        {
            assert!(StressPath::ALL.contains(&p));
        }
        // Every path is counted under a name of its own.
        let names: BTreeSet<&str> = StressPath::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), StressPath::ALL.len());
    }

    #[test]
    pub(super) fn the_report_is_one_json_line_in_the_documented_order() {
        let mut paths = BTreeMap::new();
        paths.insert("RegisterProviders".to_string(), PathCount { done: 2, refused: 1 });
        let r = StressReport {
            seconds: 5,
            orgs: 40,
            connections: 6,
            paths,
            deadlocks: 0,
            errors: 0,
            violations: 3,
            seed: 1,
            database: "x".into(),
            first_errors: vec![],
            first_violations: vec!["v".into()],
            observed_edges: vec![],
            undeclared_edges: vec![],
            lock_cycle: None,
            same_table_order_violations: vec![],
            paths_observed: vec![1],
            paths_unobserved: vec!["2 Drain (DrainChange)".into()],
            require_every_spec_path: false,
        };
        assert_eq!(
            r.json_line(),
            r#"{"seconds":5,"orgs":40,"connections":6,"paths":{"RegisterProviders":{"done":2,"refused":1}},"deadlocks":0,"errors":0,"violations":3,"observed_edges":[],"undeclared_edges":[],"lock_cycle":null,"same_table_order_violations":[],"paths_observed":[1],"paths_unobserved":["2 Drain (DrainChange)"]}"#
        );
        assert!(!r.is_clean());
    }
}

#[cfg(test)]
mod file_tests {
    use super::invariant_queries;

    #[test]
    fn the_invariants_file_reads_as_named_queries() {
        let q = invariant_queries();
        assert!(q.len() >= 30, "{}", q.len());
        let mut names: Vec<&str> = q.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), q.len(), "names are unique");
        for (name, sql) in q {
            assert!(name.starts_with('('), "{name}");
            assert!(sql.starts_with("SELECT") || sql.starts_with("WITH"), "{name}: {sql}");
            assert!(!sql.contains("-- invariant:"), "{name}");
        }
    }
}
