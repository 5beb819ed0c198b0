//! What the receiver holds: per recipient its generation, content and the pushes applied, the
//! webhook ids it has processed, and the counters tests read. In memory only: a restarted
//! receiver holds nothing, which read-back then reports as drift.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Value, json};

/// How many applied pushes a recipient's history keeps (the newest).
pub const HISTORY: usize = 50;

/// How many processed webhook ids are remembered for dropping repeats (the newest); a repeat
/// arrives within minutes, so a long-running demo need not keep every id.
const SEEN_IDS: usize = 100_000;

/// One push as applied.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub generation: u64,
    pub content: Value,
}

/// What the receiver holds for one recipient.
#[derive(Debug, Clone)]
pub struct Recipient {
    pub kind: String,
    pub id: String,
    pub generation: u64,
    pub content: Value,
    pub updated_at: DateTime<Utc>,
    /// The pushes applied, oldest first, at most [`HISTORY`].
    pub history: VecDeque<Applied>,
}

impl Recipient {
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind,
            "id": self.id,
            "generation": self.generation,
            "content": self.content,
            "updated_at": self.updated_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "history": self.history,
        })
    }
}

/// The counters `GET /_receiver/state` reports.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counters {
    /// Signed POSTs whose signature and timestamp were accepted (updates and tests).
    pub pushes: u64,
    /// Pushes whose webhook-id had been processed before (answered, not applied again).
    pub duplicates: u64,
    /// Updates older than the generation held (answered with the held one, not applied).
    pub ignored_stale: u64,
    /// Updates of the generation already held (applied again: their content replaces the held).
    pub replays: u64,
    /// Requests refused for a missing or bad signature or timestamp.
    pub rejected: u64,
    /// `desired_state.test` events received.
    pub tests: u64,
    /// Signed read-back requests answered (200 or 404).
    pub read_backs: u64,
}

/// A `desired_state.updated` push, parsed.
#[derive(Debug, Clone)]
pub struct Push {
    pub kind: String,
    pub id: String,
    pub generation: u64,
    pub content: Value,
}

/// What became of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A newer generation: now held.
    Applied,
    /// The generation held: its content replaces the held one.
    Replayed,
    /// An older generation: ignored.
    Stale,
    /// A webhook id processed before: ignored.
    Duplicate,
}

impl Outcome {
    pub fn applied(self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Replayed)
    }
}

/// Everything held, behind one lock.
#[derive(Debug, Default)]
pub struct Held {
    recipients: BTreeMap<(String, String), Recipient>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
    pub counters: Counters,
    /// The body of the last `desired_state.test`.
    pub last_test: Option<Value>,
}

impl Held {
    /// Remember a processed webhook id; false (counting a duplicate) when it was seen before.
    fn first_sight(&mut self, webhook_id: &str) -> bool {
        if self.seen.contains(webhook_id) {
            self.counters.duplicates += 1;
            return false;
        }
        self.seen.insert(webhook_id.to_string());
        self.seen_order.push_back(webhook_id.to_string());
        while self.seen_order.len() > SEEN_IDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    /// Apply `push` unless its id is a repeat or its generation is older than the one held;
    /// answers what became of it and the generation held afterwards.
    pub fn apply(&mut self, webhook_id: &str, push: Push, now: DateTime<Utc>) -> (Outcome, Option<u64>) {
        let key = (push.kind, push.id);
        if !self.first_sight(webhook_id) {
            return (Outcome::Duplicate, self.recipients.get(&key).map(|r| r.generation));
        }
        let outcome = match self.recipients.get(&key) {
            Some(held) if push.generation < held.generation => {
                self.counters.ignored_stale += 1;
                return (Outcome::Stale, Some(held.generation));
            }
            Some(held) if push.generation == held.generation => {
                self.counters.replays += 1;
                Outcome::Replayed
            }
            _ => Outcome::Applied,
        };
        let (kind, id) = key.clone();
        let recipient = self.recipients.entry(key).or_insert_with(|| Recipient {
            kind,
            id,
            generation: push.generation,
            content: Value::Null,
            updated_at: now,
            history: VecDeque::new(),
        });
        recipient.generation = push.generation;
        recipient.content = push.content.clone();
        recipient.updated_at = now;
        recipient.history.push_back(Applied { generation: push.generation, content: push.content });
        while recipient.history.len() > HISTORY {
            recipient.history.pop_front();
        }
        (outcome, Some(recipient.generation))
    }

    /// Record a `desired_state.test`; false (not recorded again) when its id is a repeat.
    pub fn record_test(&mut self, webhook_id: &str, body: Value) -> bool {
        if !self.first_sight(webhook_id) {
            return false;
        }
        self.counters.tests += 1;
        self.last_test = Some(body);
        true
    }

    pub fn get(&self, kind: &str, id: &str) -> Option<&Recipient> {
        self.recipients.get(&(kind.to_string(), id.to_string()))
    }

    /// Replace what is held for a recipient without touching its generation (simulated drift).
    pub fn tamper(&mut self, kind: &str, id: &str, content: Value, now: DateTime<Utc>) -> Option<&Recipient> {
        let recipient = self.recipients.get_mut(&(kind.to_string(), id.to_string()))?;
        recipient.content = content;
        recipient.updated_at = now;
        Some(recipient)
    }

    /// Every recipient held, by kind then id.
    pub fn recipients(&self) -> impl Iterator<Item = &Recipient> {
        self.recipients.values()
    }

    /// The JSON of `GET /_receiver/state`.
    pub fn snapshot(&self, in_flight_max: usize) -> Value {
        let c = self.counters;
        json!({
            "recipients": self.recipients().map(Recipient::to_json).collect::<Vec<_>>(),
            "pushes": c.pushes,
            "duplicates": c.duplicates,
            "ignored_stale": c.ignored_stale,
            "replays": c.replays,
            "rejected": c.rejected,
            "tests": c.tests,
            "last_test": self.last_test,
            "read_backs": c.read_backs,
            "in_flight_max": in_flight_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(generation: u64, content: Value) -> Push {
        Push { kind: "organization".into(), id: "42".into(), generation, content }
    }

    #[test]
    fn newer_and_equal_generations_apply_older_ones_and_repeats_do_not() {
        let mut held = Held::default();
        let now = Utc::now();
        assert_eq!(held.apply("a", push(2, json!(2)), now), (Outcome::Applied, Some(2)));
        assert_eq!(held.apply("b", push(1, json!(1)), now), (Outcome::Stale, Some(2)));
        assert_eq!(held.apply("c", push(2, json!("again")), now), (Outcome::Replayed, Some(2)));
        assert_eq!(held.apply("c", push(3, json!(3)), now), (Outcome::Duplicate, Some(2)));
        let r = held.get("organization", "42").expect("held");
        assert_eq!(r.content, json!("again"));
        assert_eq!(r.history.len(), 2);
        let c = held.counters;
        assert_eq!((c.ignored_stale, c.replays, c.duplicates), (1, 1, 1));
    }

    #[test]
    fn the_history_keeps_the_newest_pushes_only() {
        let mut held = Held::default();
        for g in 1..=(HISTORY as u64 + 5) {
            held.apply(&format!("id{g}"), push(g, json!(g)), Utc::now());
        }
        let r = held.get("organization", "42").expect("held");
        assert_eq!(r.history.len(), HISTORY);
        assert_eq!(r.history.front().map(|a| a.generation), Some(6));
    }
}
