//! The observed lock order (issue 36): the lock trace of a run (`core.lock_trace`, see
//! `crate::db::trace`) turned into the graph of what the transactions really did, and checked
//! against the declarations. A run fails on an edge no declaration of the transaction's paths
//! has, on a cycle in the observed graph, on two locks of one table taken out of the key order the
//! spec gives (pools by ascending pool_id, instance locks in recording order, ...), and on a spec
//! path the run never observed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{
    db::{
        locks::{KeyOrder, Lock, PathLocks, cycle_through_unrendezvoused, edges, find_cycle_in},
        trace::TraceRow,
    },
    lock_paths::SpecPath,
};

/// An edge of the observed graph: a transaction of `path` held `from` and then took `to`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObservedEdge {
    pub from: String,
    pub to: String,
    pub path: String,
    /// How many transactions took it.
    pub count: u64,
}

/// Two locks of one table taken out of the spec's key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderViolation {
    pub path: String,
    pub lock: String,
    /// The key taken first, then the one taken after it that should have come before.
    pub first: String,
    pub then: String,
}

/// What the checker found; serialized into the stress report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedOrder {
    pub transactions: u64,
    pub locks: u64,
    pub observed_edges: Vec<ObservedEdge>,
    pub undeclared_edges: Vec<ObservedEdge>,
    pub cycle: Option<Vec<String>>,
    pub same_table_order_violations: Vec<OrderViolation>,
    /// The spec's paths (by number) the trace shows, and those it does not.
    pub paths_observed: Vec<u8>,
    pub paths_unobserved: Vec<String>,
}

impl ObservedOrder {
    /// The failures, as lines a person can read; empty when the run's order was clean.
    pub fn failures(&self) -> Vec<String> {
        let mut out = vec![];
        for e in &self.undeclared_edges {
            out.push(format!("undeclared lock edge: {} then {} in {} ({} times)", e.from, e.to, e.path, e.count));
        }
        if let Some(c) = &self.cycle {
            out.push(format!("a cycle in the observed lock graph: {}", c.join(" -> ")));
        }
        for v in &self.same_table_order_violations {
            out.push(format!("{} took {} {} before {}, out of the spec's key order", v.path, v.lock, v.first, v.then));
        }
        for p in &self.paths_unobserved {
            out.push(format!("spec path never observed: {p}"));
        }
        out
    }
}

/// One lock acquisition of a transaction, as the checker reads it.
struct Acquisition<'a> {
    lock: Lock,
    key: &'a str,
    ordinal: Option<i64>,
}

/// Check a trace (rows in transaction, then sequence order) against the declarations and the
/// spec's paths.
pub fn check(rows: &[TraceRow], declared: &[&PathLocks], spec: &[SpecPath]) -> ObservedOrder {
    let mut declared_edges: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for d in declared {
        declared_edges.entry(d.path).or_default().extend(edges(&[d]).into_iter().map(|e| (e.from, e.to)));
    }
    let mut out = ObservedOrder::default();
    let mut counted: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut seen_names: BTreeSet<String> = BTreeSet::new();
    let mut violations: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    // The edges of transactions under the exclusive rendezvous, under the shared one, and under
    // neither: the first two never run at once (each kind takes its side first), so a cycle is
    // looked for among the exclusive and the unrendezvoused edges, and among the shared and the
    // unrendezvoused ones.
    let mut by_side: [BTreeSet<(&'static str, &'static str)>; 3] = Default::default();
    let mut start = 0;
    while start < rows.len() {
        let mut end = start;
        while end < rows.len() && rows[end].xact == rows[start].xact {
            end += 1;
        }
        let tx = &rows[start..end];
        start = end;
        out.transactions += 1;
        // The transaction's path: the first one named; the names it ran under (paths and steps).
        let path = tx.iter().find_map(|r| r.path.clone()).unwrap_or_else(|| "(no path named)".to_string());
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for r in tx {
            if let Some(p) = &r.path {
                names.insert(p);
            }
            if (r.lock == "path" || r.lock == "step")
                && let Some(k) = &r.key
            {
                names.insert(k);
            }
        }
        seen_names.extend(names.iter().map(|s| s.to_string()));
        let allowed: BTreeSet<(&str, &str)> =
            names.iter().filter_map(|n| declared_edges.get(n)).flat_map(|s| s.iter().copied()).collect();
        // Its acquisitions, a lock already held (its resource and key) taken again left out.
        let mut acq: Vec<Acquisition> = vec![];
        let mut held: BTreeSet<(&str, &str)> = BTreeSet::new();
        for r in tx {
            let Some(lock) = Lock::from_trace_name(&r.lock) else { continue };
            let key = r.key.as_deref().unwrap_or("");
            if held.insert((lock.resource(), key)) {
                acq.push(Acquisition { lock, key, ordinal: r.ordinal });
            }
        }
        out.locks += acq.len() as u64;
        let mut tx_edges: BTreeSet<(&str, &str)> = BTreeSet::new();
        for (i, a) in acq.iter().enumerate() {
            for b in &acq[i + 1..] {
                if a.lock.resource() != b.lock.resource() && !b.lock.never_waits() {
                    tx_edges.insert((a.lock.resource(), b.lock.resource()));
                } else if a.lock.resource() == b.lock.resource() && out_of_order(a, b) {
                    violations.insert((
                        path.clone(),
                        a.lock.trace_name().to_string(),
                        a.key.to_string(),
                        b.key.to_string(),
                    ));
                }
            }
        }
        let side = if acq.iter().any(|a| a.lock == Lock::RendezvousExclusive) {
            0
        } else if acq.iter().any(|a| a.lock == Lock::RendezvousShared) {
            1
        } else {
            2
        };
        for (from, to) in tx_edges {
            *counted.entry((from.to_string(), to.to_string(), path.clone())).or_default() += 1;
            by_side[side].insert((from, to));
        }
        for (from, to) in acq_pairs_not_allowed(&acq, &allowed) {
            out.undeclared_edges.push(ObservedEdge { from, to, path: path.clone(), count: 1 });
        }
    }
    // Fold the undeclared edges' counts.
    let mut undeclared: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for e in out.undeclared_edges.drain(..) {
        *undeclared.entry((e.from, e.to, e.path)).or_default() += e.count;
    }
    out.undeclared_edges =
        undeclared.into_iter().map(|((from, to, path), count)| ObservedEdge { from, to, path, count }).collect();
    out.observed_edges =
        counted.into_iter().map(|((from, to, path), count)| ObservedEdge { from, to, path, count }).collect();
    out.cycle = find_cycle_in(by_side[1].iter().chain(&by_side[2]).copied())
        .or_else(|| cycle_through_unrendezvoused(&by_side[0], &by_side[2]));
    out.same_table_order_violations =
        violations.into_iter().map(|(path, lock, first, then)| OrderViolation { path, lock, first, then }).collect();
    for p in spec {
        if p.names().any(|n| seen_names.contains(n)) {
            out.paths_observed.push(p.number);
        } else {
            out.paths_unobserved.push(format!("{} {}", p.number, p.name));
        }
    }
    out
}

/// The transaction's edges (resource pairs in the order taken) that none of its paths declares.
fn acq_pairs_not_allowed(acq: &[Acquisition], allowed: &BTreeSet<(&str, &str)>) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (i, a) in acq.iter().enumerate() {
        for b in &acq[i + 1..] {
            let pair = (a.lock.resource(), b.lock.resource());
            if pair.0 != pair.1 && !b.lock.never_waits() && !allowed.contains(&pair) {
                out.insert((pair.0.to_string(), pair.1.to_string()));
            }
        }
    }
    out
}

/// Whether `b`, taken after `a` on the same table, breaks the spec's key order.
fn out_of_order(a: &Acquisition, b: &Acquisition) -> bool {
    match (a.lock.key_order(), b.lock.key_order()) {
        (KeyOrder::AscendingOrdinal, KeyOrder::AscendingOrdinal) => {
            matches!((a.ordinal, b.ordinal), (Some(x), Some(y)) if y < x)
        }
        (KeyOrder::AscendingKeyBytes, KeyOrder::AscendingKeyBytes) => b.key.as_bytes() < a.key.as_bytes(),
        _ => false,
    }
}

/// The observed counts per declared edge, for the generated page: (from, to, path) -> count.
pub fn counts(edges: &[ObservedEdge]) -> BTreeMap<(String, String, String), u64> {
    edges.iter().map(|e| ((e.from.clone(), e.to.clone(), e.path.clone()), e.count)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::locks::PathLocks;

    static A: PathLocks = PathLocks {
        path: "A",
        function: "a",
        kind: "Materializing",
        locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantLineageHead],
        why: "",
    };
    static B: PathLocks = PathLocks {
        path: "B",
        function: "b",
        kind: "Plain",
        locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::UsageRow],
        why: "",
    };
    static SPEC: &[SpecPath] = &[
        SpecPath { number: 1, name: "A", declarations: &[&A], markers: &[] },
        SpecPath { number: 2, name: "B", declarations: &[&B], markers: &[] },
        SpecPath { number: 3, name: "B's branch", declarations: &[], markers: &["B branch"] },
    ];

    fn row(xact: &str, seq: i32, path: &str, lock: &str, key: &str, ordinal: Option<i64>) -> TraceRow {
        TraceRow {
            xact: xact.into(),
            seq,
            path: Some(path.into()),
            lock: lock.into(),
            key: Some(key.into()),
            ordinal,
            mode: String::new(),
        }
    }

    /// A clean trace: A and B in their declared orders, B's branch marked.
    fn clean() -> Vec<TraceRow> {
        vec![
            row("1", 1, "A", "path", "A", None),
            row("1", 2, "A", "RendezvousShared", "7", None),
            row("1", 3, "A", "PoolRow", "3", Some(3)),
            row("1", 4, "A", "PoolRow", "5", Some(5)),
            row("1", 5, "A", "PoolRow", "3", Some(3)),
            row("1", 6, "A", "GrantLineageHead", "9", None),
            row("2", 1, "B", "path", "B", None),
            row("2", 2, "B", "LifecycleInstance", "11", Some(1)),
            row("2", 3, "B", "LifecycleInstance", "12", Some(2)),
            row("2", 4, "B", "step", "B branch", None),
            row("2", 5, "B", "SiteRow", "s1", None),
            row("2", 6, "B", "UsageRow", "3,fedwiki.active_sites", Some(3)),
        ]
    }

    #[test]
    fn a_trace_in_the_declared_orders_is_clean_and_counts_each_edge_and_path() {
        let o = check(&clean(), &[&A, &B], SPEC);
        assert!(o.failures().is_empty(), "{:?}", o.failures());
        assert_eq!(o.transactions, 2);
        assert_eq!(o.locks, 8, "the pool taken again is not a new acquisition");
        assert_eq!(o.paths_observed, vec![1, 2, 3]);
        assert!(
            o.observed_edges.iter().any(|e| e.from == "rendezvous" && e.to == "core.resource_pools" && e.count == 1)
        );
    }

    #[test]
    fn a_path_that_takes_two_locks_in_reverse_fails_with_an_undeclared_edge_and_a_cycle() {
        let mut t = clean();
        // B's transaction takes its usage row before its site row, against its declaration.
        t[10].lock = "UsageRow".into();
        t[10].key = Some("3,fedwiki.active_sites".into());
        t[11].lock = "SiteRow".into();
        t[11].key = Some("s1".into());
        // And another transaction of B in its declared order: the two close a cycle.
        t.extend(clean().into_iter().filter(|r| r.xact == "2").map(|mut r| {
            r.xact = "3".into();
            r
        }));
        let o = check(&t, &[&A, &B], SPEC);
        assert_eq!(o.undeclared_edges.len(), 1, "{:?}", o.undeclared_edges);
        let e = &o.undeclared_edges[0];
        assert_eq!(
            (e.from.as_str(), e.to.as_str(), e.path.as_str()),
            ("core.numeric_entitlement_usage", "fedwiki.sites", "B")
        );
        let c = o.cycle.expect("the reversed pair closes a cycle with the declared one");
        assert!(c.contains(&"fedwiki.sites".to_string()), "{c:?}");
    }

    #[test]
    fn pools_taken_out_of_ascending_order_fail_as_a_same_table_violation() {
        let mut t = clean();
        t[2].key = Some("5".into());
        t[2].ordinal = Some(5);
        t[3].key = Some("3".into());
        t[3].ordinal = Some(3);
        let o = check(&t, &[&A, &B], SPEC);
        assert_eq!(o.same_table_order_violations.len(), 1, "{:?}", o.same_table_order_violations);
        let v = &o.same_table_order_violations[0];
        assert_eq!((v.path.as_str(), v.lock.as_str(), v.first.as_str(), v.then.as_str()), ("A", "PoolRow", "5", "3"));
        // Instance locks out of recording order too.
        let mut t = clean();
        t[7].ordinal = Some(3);
        let o = check(&t, &[&A, &B], SPEC);
        assert_eq!(o.same_table_order_violations.len(), 1, "{:?}", o.same_table_order_violations);
        assert!(!o.failures().is_empty());
    }

    #[test]
    fn a_reversed_pair_under_the_exclusive_rendezvous_meets_no_shared_transaction() {
        static C: PathLocks = PathLocks {
            path: "C",
            function: "c",
            kind: "RuleChange",
            locks: &[Lock::RendezvousExclusive, Lock::PoolRow, Lock::ChangeObligationRow, Lock::PoolRow],
            why: "",
        };
        static D: PathLocks = PathLocks {
            path: "D",
            function: "d",
            kind: "Materializing",
            locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::ChangeObligationRow],
            why: "",
        };
        let t = vec![
            row("1", 1, "C", "RendezvousExclusive", "7", None),
            row("1", 2, "C", "PoolRow", "1", Some(1)),
            row("1", 3, "C", "ChangeObligationRow", "9,1", Some(1_000_000_009)),
            row("1", 4, "C", "PoolRow", "2", Some(2)),
            row("2", 1, "D", "RendezvousShared", "7", None),
            row("2", 2, "D", "PoolRow", "2", Some(2)),
            row("2", 3, "D", "ChangeObligationRow", "9,2", Some(2_000_000_009)),
        ];
        assert_eq!(check(&t, &[&C, &D], &[]).cycle, None, "the two never run at once");
        // A transaction with no rendezvous that takes the pair the other way is a cycle.
        let mut t = t;
        t[4].lock = "RuleChangeRow".into();
        t[5] = row("2", 2, "D", "ChangeObligationRow", "9,2", Some(2_000_000_009));
        t[6] = row("2", 3, "D", "PoolRow", "2", Some(2));
        assert!(check(&t, &[&C, &D], &[]).cycle.is_some());
    }

    #[test]
    fn a_spec_path_never_observed_fails_the_run() {
        let t: Vec<TraceRow> = clean().into_iter().filter(|r| r.key.as_deref() != Some("B branch")).collect();
        let o = check(&t, &[&A, &B], SPEC);
        assert_eq!(o.paths_unobserved, vec!["3 B's branch".to_string()]);
        assert!(o.failures().iter().any(|f| f.contains("never observed")), "{:?}", o.failures());
    }

    #[test]
    fn a_transaction_that_names_no_path_has_no_declared_edge() {
        let t: Vec<TraceRow> = clean()
            .into_iter()
            .filter(|r| r.xact == "1" && r.lock != "path")
            .map(|mut r| {
                r.path = None;
                r
            })
            .collect();
        let o = check(&t, &[&A, &B], SPEC);
        assert!(o.undeclared_edges.iter().all(|e| e.path == "(no path named)"));
        assert!(!o.undeclared_edges.is_empty());
    }
}
