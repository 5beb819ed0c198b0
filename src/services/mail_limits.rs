//! The send limits of the mail a stranger can cause: sign-up, "send the link again", forgot
//! password and invitations. Counted per client address and per email, over a fixed window, in
//! a short transaction of its own before the act, as sign-in's attempts are
//! (docs/operations.md, "Mail limits"). A refused send is answered as the act would be, so a
//! limit tells nobody whether an email has an account.

use std::time::Duration;

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace,
        tx::within_for,
    },
    store::mail_limits,
};

/// The window the sends are counted over.
pub const WINDOW: Duration = Duration::from_secs(3600);
/// At most this many sends to one email in a window.
pub const PER_EMAIL: i32 = 5;
/// At most this many sends caused from one client address in a window.
pub const PER_ADDRESS: i32 = 30;

pub static RESERVE_MAIL_SEND_LOCKS: PathLocks = PathLocks {
    path: "Reserve a mail send",
    function: "services::mail_limits::reserve_send",
    kind: "Plain",
    locks: &[Lock::MailSendLimitRows],
    why: "One upsert counts the send against the address's and the email's rows, taken in key \
          byte order, so parallel sends each see the ones before them and two reservations \
          never wait on each other in a circle.",
};

/// Whether one more mail to `email`, caused from `address`, is within the limits. Counted
/// either way. `email` is lowered, so case does not make a new key.
#[tracing::instrument(name = "Reserve a mail send", skip_all, fields(address = %address))]
pub async fn reserve_send(db: &Db, address: &str, email: &str) -> Result<bool, DbError> {
    let [a, e] = limit_keys(address, email);
    let mut keys = [a.clone(), e.clone()];
    keys.sort();
    within_for(db, TxKind::Plain, &RESERVE_MAIL_SEND_LOCKS, async |tx: &mut Tx| {
        let over = mail_limits::reserve(tx.conn(), &[(a, PER_ADDRESS), (e, PER_EMAIL)], WINDOW).await?;
        trace::note_rows(tx.conn(), Lock::MailSendLimitRows, keys.iter().map(|k| (k, None))).await?;
        Ok::<_, DbError>(over.is_empty())
    })
    .await
}

/// The keys one send counts against: the address's first.
pub fn limit_keys(address: &str, email: &str) -> [String; 2] {
    [format!("address:{address}"), format!("email:{}", email.trim().to_lowercase())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_counts_against_its_address_and_its_lowered_email() {
        assert_eq!(limit_keys("192.0.2.1", " Ana@Example.TEST "), ["address:192.0.2.1", "email:ana@example.test"]);
    }
}
