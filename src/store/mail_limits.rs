//! The send limits of the mail a stranger can cause (`core.mail_send_limits`).

use std::time::Duration;

use sqlx::PgConnection;

/// Count one send against each key (in key byte order, one statement) over a fixed window of
/// `window`: the keys whose count is now over their limit, none when the send may go. A refused
/// send still counts, so a flood keeps itself refused until its window ends.
pub async fn reserve(conn: &mut PgConnection, limits: &[(String, i32)], window: Duration) -> sqlx::Result<Vec<String>> {
    let mut limits = limits.to_vec();
    limits.sort();
    limits.dedup_by(|a, b| a.0 == b.0);
    let (keys, maxes): (Vec<String>, Vec<i32>) = limits.into_iter().unzip();
    sqlx::query_scalar!(
        r#"WITH counted AS (
           INSERT INTO core.mail_send_limits AS l (limit_key, window_started_at, sends)
           SELECT k, now(), 1 FROM unnest($1::text[]) AS k ORDER BY k COLLATE "C"
           ON CONFLICT (limit_key) DO UPDATE SET
               window_started_at = CASE WHEN l.window_started_at <= now() - $2::bigint * interval '1 millisecond'
                                        THEN now() ELSE l.window_started_at END,
               sends = CASE WHEN l.window_started_at <= now() - $2::bigint * interval '1 millisecond'
                            THEN 1 ELSE l.sends + 1 END
           RETURNING limit_key, sends)
           SELECT c.limit_key AS "over!" FROM counted c
           JOIN unnest($1::text[], $3::int[]) AS m(k, max) ON m.k = c.limit_key
           WHERE c.sends > m.max"#,
        &keys,
        super::millis(window),
        &maxes
    )
    .fetch_all(conn)
    .await
}

/// Forget windows that ended long ago (the upkeep's sweep).
pub async fn forget_before(conn: &mut PgConnection, older_than: Duration) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM core.mail_send_limits WHERE window_started_at < now() - $1::bigint * interval '1 millisecond'",
        super::millis(older_than)
    )
    .execute(conn)
    .await?
    .rows_affected())
}
