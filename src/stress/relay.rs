//! The run's connected systems: two receivers of its own (one answers slowly), a connection to
//! each, and after the run the relay settled (every notice relayed, every record pushed) and what
//! the receivers hold compared with the records.

use super::*;

use crate::{
    ids::ConnectionId,
    integrations::desired_state::Relay,
    services::desired_state::{self as ds, connections},
    store::desired_state as ds_store,
};

/// How long the relay gets to settle after the run.
const RELAY_SETTLE: Duration = Duration::from_secs(60);
/// The slow receiver's delay on every push.
const SLOW_MS: u64 = 30;

/// The receivers, and the connections to them (in the same order).
pub(super) struct Connected {
    pub(super) receivers: Vec<desired_state_receiver::Receiver>,
    pub(super) connections: Vec<ConnectionId>,
    pub(super) relay: Relay,
}

/// Start the receivers and add a connection to each: the first receives the active sites, the
/// second the custom domains too, and answers slowly.
pub(super) async fn connect(db: &Db) -> anyhow::Result<Connected> {
    let relay = Relay::new(Duration::from_secs(10)).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = Connected { receivers: vec![], connections: vec![], relay };
    for (i, keys) in ["fedwiki.active_sites", "fedwiki.active_sites, fedwiki.custom_domain"].into_iter().enumerate() {
        let receiver = desired_state_receiver::Receiver::start(desired_state_receiver::Config {
            secrets: vec![],
            ..desired_state_receiver::Config::default()
        })
        .await
        .context("starting a receiver")?;
        let form =
            connections::NewConnection::parse(&format!("Stress receiver {}", i + 1), &receiver.push_url(), keys, true)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        let id = connections::create_connection(db, &form).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let row = ds_store::connection(&db.pool, id).await?.context("the new connection")?;
        receiver.set_secrets(&[row.secret])?;
        if i == 1 {
            let c = reqwest::Client::new();
            c.post(format!("{}/_receiver/faults", receiver.url()))
                .json(&serde_json::json!({ "delay_ms": SLOW_MS }))
                .send()
                .await
                .context("slowing a receiver")?
                .error_for_status()?;
        }
        out.receivers.push(receiver);
        out.connections.push(id);
    }
    Ok(out)
}

/// After the run, with the workers stopped: Retry on every connection, then passes and dispatches
/// until no notice is pending and no record is behind (at most `RELAY_SETTLE`).
pub(super) async fn settle_relay(ctx: &Ctx) {
    let started = Instant::now();
    let mut rounds = 0;
    loop {
        rounds += 1;
        for c in &ctx.connections {
            if let Err(e) = connections::retry_connection(&ctx.db, *c).await {
                return ctx.tally_error(format!("Retry of connection {c} after the run: {e}"));
            }
        }
        if let Err(e) = ds::process_desired_state_outbox(&ctx.db, Duration::from_secs(10)).await {
            return ctx.tally_error(format!("the relay's pass after the run: {e}"));
        }
        for c in &ctx.connections {
            if let Err(e) = ds::dispatch_connection(&ctx.db, &ctx.relay, *c, Duration::from_secs(10)).await {
                return ctx.tally_error(format!("the dispatch of connection {c} after the run: {e}"));
            }
        }
        let left: Result<(i64, i64), sqlx::Error> = sqlx::query_as(
            "SELECT (SELECT count(*) FROM core.desired_state_outbox),
                    (SELECT count(*) FROM core.desired_state_records WHERE confirmed_generation < generation)",
        )
        .fetch_one(&ctx.admin)
        .await;
        match left {
            Ok((0, 0)) => {
                eprintln!("stress: the relay settled in {rounds} rounds");
                return;
            }
            Ok((notices, behind)) if started.elapsed() > RELAY_SETTLE => {
                eprintln!("stress: the relay did not settle: {notices} notices pending, {behind} records behind");
                return;
            }
            Ok(_) => {}
            Err(e) => return ctx.tally_error(format!("reading the relay's state after the run: {e}")),
        }
    }
}

/// What each receiver holds against the records of its connection: the same generation and
/// content for every recipient, and generations that only ever rose.
pub(super) async fn receiver_violations(ctx: &Ctx, connected: &Connected) -> Vec<Violation> {
    const HELD: &str = "(16) a connected system holds each record's generation and content once the relay settled";
    const RISING: &str = "(16) a connected system received each recipient's generations in rising order";
    let mut out = vec![];
    for (c, receiver) in connected.connections.iter().zip(&connected.receivers) {
        let records: Vec<(i64, i64, serde_json::Value)> = match sqlx::query_as(
            "SELECT recipient_id, generation, content FROM core.desired_state_records WHERE connection_id = $1",
        )
        .bind(c.0)
        .fetch_all(&ctx.admin)
        .await
        {
            Ok(r) => r,
            Err(e) => {
                ctx.tally_error(format!("reading connection {c}'s records: {e}"));
                continue;
            }
        };
        let snap = receiver.snapshot();
        let held: BTreeMap<String, &serde_json::Value> = snap["recipients"]
            .as_array()
            .map(|a| a.iter().filter_map(|r| Some((r["id"].as_str()?.to_string(), r))).collect())
            .unwrap_or_default();
        for (recipient, generation, content) in records {
            let h = held.get(&recipient.to_string());
            let (g, got) =
                h.map(|h| (h["generation"].as_i64(), &h["content"])).unwrap_or((None, &serde_json::Value::Null));
            if g != Some(generation) || *got != content {
                out.push(Violation {
                    invariant: HELD,
                    pool: None,
                    message: format!(
                        "{HELD}: connection {c} recipient {recipient}: the record is generation {generation}, the remote holds {g:?}"
                    ),
                });
            }
        }
        for (id, h) in &held {
            let gens: Vec<i64> = h["history"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["generation"].as_i64()).collect())
                .unwrap_or_default();
            if !gens.windows(2).all(|w| w[0] <= w[1]) {
                out.push(Violation {
                    invariant: RISING,
                    pool: None,
                    message: format!("{RISING}: connection {c} recipient {id} received generations {gens:?}"),
                });
            }
        }
    }
    out
}
