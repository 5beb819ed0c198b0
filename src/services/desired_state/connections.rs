//! The operators' connections: add, edit, rotate the secret, delete, Retry, Send a test, check
//! now; and the reads of `/operator/connections`. Retry, a test and a deletion only write notices
//! (or mark the connection); records change only in the relay, under their address locks.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx,
    },
    ids::{ConnectionId, ResourceKey},
    integrations::desired_state::new_secret,
    jobs::Job,
    services::{ServiceError, refusal::Problems},
    store::{
        desired_state::{self as store, ConnectionFigures, ConnectionRow, RecordLine},
        paging::{Seek, page_of},
    },
};

use super::ReadBackDesiredState;

pub static EDIT_CONNECTION_LOCKS: PathLocks = PathLocks {
    path: "Edit a connection",
    function: "services::desired_state::connections::{update_connection, rotate_secret, delete_connection}",
    kind: "Plain",
    locks: &[Lock::ConnectionRow],
    why: "One UPDATE of the connection's row; its trigger writes a notice (an insert, no lock) when the keys \
          change or the connection is deleted. Nothing else is held.",
};

/// A connection's name: 1 to 100 characters, spaces around it dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionName(String);

impl ConnectionName {
    pub fn parse(raw: &str) -> Result<ConnectionName, String> {
        let name = raw.trim();
        if name.is_empty() {
            Err("Give the connection a name.".into())
        } else if name.chars().count() > 100 {
            Err("The name is longer than 100 characters.".into())
        } else {
            Ok(ConnectionName(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where a connection's pushes go: a full http(s) address with a host, without credentials (a
/// push is signed with the connection's secret) or a fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushUrl(String);

impl PushUrl {
    pub fn parse(raw: &str) -> Result<PushUrl, String> {
        let raw = raw.trim();
        let u = url::Url::parse(raw)
            .map_err(|_| "Give the address as a full URL, like https://chat.example.org/hooks.".to_string())?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err("The address must start with https:// (or http://).".into());
        }
        if u.host_str().is_none_or(|h| h.is_empty()) {
            return Err("The address needs a host name.".into());
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err("Leave credentials out of the address: pushes are signed with the connection's secret.".into());
        }
        if u.fragment().is_some() {
            return Err("The address cannot have a #fragment.".into());
        }
        if raw.len() > 2000 {
            return Err("The address is longer than 2000 characters.".into());
        }
        Ok(PushUrl(u.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The resource keys a connected system receives: at least one, each once, in order. Whether
/// each exists the catalog says, when the connection is saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionKeys(Vec<ResourceKey>);

impl ConnectionKeys {
    /// Keys separated by commas, spaces or new lines.
    pub fn parse(raw: &str) -> Result<ConnectionKeys, String> {
        let mut keys: Vec<ResourceKey> = raw
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|k| !k.is_empty())
            .map(ResourceKey::from)
            .collect();
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            return Err("Name at least one resource key the connected system receives.".into());
        }
        Ok(ConnectionKeys(keys))
    }

    pub fn as_slice(&self) -> &[ResourceKey] {
        &self.0
    }
}

/// A connection as it is added or saved: the command of the add and edit forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewConnection {
    pub name: ConnectionName,
    pub url: PushUrl,
    pub keys: ConnectionKeys,
    pub read_back: bool,
}

impl NewConnection {
    /// A connection from its texts (the demo's, the stress run's, the bench's), each by its
    /// type's parse, every problem told.
    pub fn parse(name: &str, url: &str, keys: &str, read_back: bool) -> Result<NewConnection, ServiceError> {
        let mut p = Problems::default();
        let name = p.field("name", ConnectionName::parse(name));
        let url = p.field("url", PushUrl::parse(url));
        let keys = p.field("keys", ConnectionKeys::parse(keys));
        let parsed = match (name, url, keys) {
            (Some(name), Some(url), Some(keys)) => Some(NewConnection { name, url, keys, read_back }),
            _ => None,
        };
        p.or(parsed)
    }
}

/// What is wrong with a connection's keys in the catalog's eyes: those it has no key called, in
/// words; None when every one exists.
pub async fn unknown_keys(db: &Db, keys: &ConnectionKeys) -> Result<Option<String>, ServiceError> {
    let known = store::existing_keys(&db.pool, keys.as_slice()).await?;
    let unknown: Vec<&str> = keys.as_slice().iter().filter(|k| !known.contains(k)).map(ResourceKey::as_str).collect();
    Ok((!unknown.is_empty()).then(|| format!("No resource key is called {}.", unknown.join(", "))))
}

/// Refused unless every key of the connection exists, naming those that do not.
async fn keys_exist(db: &Db, c: &NewConnection) -> Result<(), ServiceError> {
    let mut p = Problems::default();
    if let Some(why) = unknown_keys(db, &c.keys).await? {
        p.push("keys", why);
    }
    p.or(Some(()))
}

fn name_taken(e: sqlx::Error) -> ServiceError {
    ServiceError::from_constraint(e, |c| {
        (c == "desired_state_connections_name")
            .then(|| ("name", "Another connection has this name; choose another.".to_string()))
    })
}

/// Add a connection, with a new secret; its trigger asks the relay for every recipient.
#[tracing::instrument(name = "Add a connection", skip(db, c), fields(name = c.name.as_str()))]
pub async fn create_connection(db: &Db, c: &NewConnection) -> Result<ConnectionId, ServiceError> {
    keys_exist(db, c).await?;
    let secret = new_secret().map_err(|e| ServiceError::Remote { sentence: e, transient: true })?;
    tx::within(db, TxKind::Plain, async |t: &mut Tx| {
        let id = store::insert_connection(
            t.conn(),
            c.name.as_str(),
            c.url.as_str(),
            &secret,
            c.keys.as_slice(),
            c.read_back,
        )
        .await
        .map_err(name_taken)?;
        Ok(id)
    })
    .await
}

/// Edit a live connection. A change of its keys asks the relay for every recipient.
#[tracing::instrument(name = "Edit a connection", skip(db, c), fields(connection_id = %id))]
pub async fn update_connection(db: &Db, id: ConnectionId, c: &NewConnection) -> Result<(), ServiceError> {
    keys_exist(db, c).await?;
    tx::within_for(db, TxKind::Plain, &EDIT_CONNECTION_LOCKS, async |t: &mut Tx| {
        if !store::update_connection(t.conn(), id, c.name.as_str(), c.url.as_str(), c.keys.as_slice(), c.read_back)
            .await
            .map_err(name_taken)?
        {
            return Err(ServiceError::NotFound("connection"));
        }
        Ok(())
    })
    .await
}

/// The longest overlap a rotation may keep the previous secret signing.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a rotated-out secret keeps signing: a number of hours from 0 to a week (blank: a day).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overlap(Duration);

impl Overlap {
    pub fn parse(raw: &str) -> Result<Overlap, String> {
        let raw = raw.trim();
        let hours: f64 = if raw.is_empty() { 24.0 } else { raw.parse().unwrap_or(-1.0) };
        if !(0.0..=MAX_OVERLAP.as_secs_f64() / 3600.0).contains(&hours) {
            return Err("The overlap is a number of hours from 0 to 168.".into());
        }
        Ok(Overlap(Duration::from_secs_f64(hours * 3600.0)))
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

/// Rotate the signing secret: a new one signs from now on, the previous one too for `overlap`.
#[tracing::instrument(name = "Rotate a connection's secret", skip(db), fields(connection_id = %id))]
pub async fn rotate_secret(db: &Db, id: ConnectionId, overlap: Duration) -> Result<(), ServiceError> {
    let secret = new_secret().map_err(|e| ServiceError::Remote { sentence: e, transient: true })?;
    tx::within_for(db, TxKind::Plain, &EDIT_CONNECTION_LOCKS, async |t: &mut Tx| {
        if !store::rotate_secret(t.conn(), id, &secret, overlap.as_secs_f64()).await? {
            return Err(ServiceError::NotFound("connection"));
        }
        Ok(())
    })
    .await
}

/// Delete a connection: pushes stop at once; its trigger's notice has the relay delete its
/// records, each under its address lock.
#[tracing::instrument(name = "Delete a connection", skip(db), fields(connection_id = %id))]
pub async fn delete_connection(db: &Db, id: ConnectionId) -> Result<(), ServiceError> {
    tx::within_for(db, TxKind::Plain, &EDIT_CONNECTION_LOCKS, async |t: &mut Tx| {
        if !store::mark_deleted(t.conn(), id).await? {
            return Err(ServiceError::NotFound("connection"));
        }
        Ok(())
    })
    .await
}

async fn live(db: &Db, id: ConnectionId) -> Result<ConnectionRow, ServiceError> {
    match store::connection(&db.pool, id).await? {
        Some(c) if c.deleted_at.is_none() => Ok(c),
        _ => Err(ServiceError::NotFound("connection")),
    }
}

/// Retry: a notice that makes every failing record of the connection due now.
#[tracing::instrument(name = "Retry a connection", skip(db), fields(connection_id = %id))]
pub async fn retry_connection(db: &Db, id: ConnectionId) -> Result<(), ServiceError> {
    live(db, id).await?;
    store::insert_notice(&db.pool, Some(id), None, "retry").await?;
    Ok(())
}

/// Send a test: a notice the relay turns into a signed test push.
#[tracing::instrument(name = "Send a test", skip(db), fields(connection_id = %id))]
pub async fn send_test(db: &Db, id: ConnectionId) -> Result<(), ServiceError> {
    live(db, id).await?;
    store::insert_notice(&db.pool, Some(id), None, "test").await?;
    Ok(())
}

/// Check now: a read-back run of the connection (refused when it has read-back off).
#[tracing::instrument(name = "Read back now", skip(db), fields(connection_id = %id))]
pub async fn check_now(db: &Db, id: ConnectionId) -> Result<(), ServiceError> {
    let c = live(db, id).await?;
    if !c.read_back {
        return Err(ServiceError::Refused(
            "This connection does not support read-back; turn it on in its settings first.".into(),
        ));
    }
    ask_read_back(db, id).await
}

/// Enqueue a connection's read-back run, a no-op while one is open for it.
async fn ask_read_back(db: &Db, id: ConnectionId) -> Result<(), ServiceError> {
    let mut conn = db.pool.acquire().await?;
    ReadBackDesiredState { connection_id: id }.enqueue(&mut conn).await?;
    Ok(())
}

/// Ask every connection with read-back on for a run (the schedule's job).
pub async fn schedule_read_backs(db: &Db) -> Result<usize, ServiceError> {
    let mut n = 0;
    for c in store::live_connections(&db.pool).await?.into_iter().filter(|c| c.read_back) {
        ask_read_back(db, c.connection_id).await?;
        n += 1;
    }
    Ok(n)
}

/// One connection on the list.
#[derive(Debug, Clone)]
pub struct ConnectionSummary {
    pub connection: ConnectionRow,
    pub figures: ConnectionFigures,
}

/// The live connections with their figures, and the notices still pending.
pub async fn connections_overview(db: &Db) -> Result<(Vec<ConnectionSummary>, i64), ServiceError> {
    let connections = store::live_connections(&db.pool).await?;
    let ids: Vec<i64> = connections.iter().map(|c| c.connection_id.0).collect();
    let figures = store::connection_figures(&db.pool, &ids).await?;
    let pending = store::pending_notices(&db.pool).await?;
    let list = connections
        .into_iter()
        .zip(figures)
        .map(|(connection, figures)| ConnectionSummary { connection, figures })
        .collect();
    Ok((list, pending))
}

/// How many recipients one page of a connection lists.
pub const RECORDS_PER_PAGE: i64 = 50;

/// One connection's page: the connection, its figures, and a page of its records.
#[derive(Debug, Clone)]
pub struct ConnectionPage {
    pub summary: ConnectionSummary,
    pub records: Vec<RecordLine>,
    /// The recipient id the next page starts after, when there is one.
    pub next_after: Option<i64>,
    pub keys: Vec<String>,
}

/// A connection's page, its records filtered ("", "behind", "failing", "drift") from `after`.
pub async fn connection_page(
    db: &Db,
    id: ConnectionId,
    filter: &str,
    after: i64,
) -> Result<ConnectionPage, ServiceError> {
    let c = live(db, id).await?;
    let filter = match filter {
        "behind" | "failing" | "drift" => filter,
        _ => "",
    };
    let figures =
        store::connection_figures(&db.pool, &[id.0]).await?.pop().ok_or(ServiceError::NotFound("connection"))?;
    let fetched = store::record_lines(&db.pool, id, filter, after, RECORDS_PER_PAGE + 1).await?;
    let seek = if after == 0 { Seek::First } else { Seek::After(after) };
    let page = page_of(fetched, RECORDS_PER_PAGE, seek);
    let next_after = if page.has_after { page.rows.last().map(|r| r.recipient_id) } else { None };
    let keys = store::all_keys(&db.pool).await?;
    Ok(ConnectionPage { summary: ConnectionSummary { connection: c, figures }, records: page.rows, next_after, keys })
}

/// The lag of a connection: how long its oldest unconfirmed change has waited.
pub fn lag(oldest_behind: Option<DateTime<Utc>>) -> Option<Duration> {
    oldest_behind.map(|t| (Utc::now() - t).to_std().unwrap_or_default())
}

/// The resource keys an operator may pick from.
pub async fn resource_keys(db: &Db) -> Result<Vec<String>, ServiceError> {
    Ok(store::all_keys(&db.pool).await?)
}
