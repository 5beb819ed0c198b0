//! Demo data, loaded idempotently by `member-console demo` and `serve --demo`.

use crate::{
    db::{Db, TxKind, begin},
    services::auth::{Email, NewPassword, ensure_account},
    store::accounts,
};

pub const OPERATOR_EMAIL: &str = "operator@example.com";
pub const OPERATOR_PASSWORD: &str = "demo-operator";
pub const MEMBER_EMAIL: &str = "member@example.com";
pub const MEMBER_PASSWORD: &str = "demo-member";
pub const DEMO_ORGANIZATION: &str = "Acme Wikis";

/// Create (or reset the passwords of) the demo accounts and the member's organization.
pub async fn load(db: &Db) -> anyhow::Result<()> {
    let parse = |e: &str, p: &str| -> anyhow::Result<(Email, NewPassword)> {
        Ok((Email::parse(e).map_err(anyhow::Error::msg)?, NewPassword::parse(p).map_err(anyhow::Error::msg)?))
    };
    let (op_email, op_pw) = parse(OPERATOR_EMAIL, OPERATOR_PASSWORD)?;
    let (m_email, m_pw) = parse(MEMBER_EMAIL, MEMBER_PASSWORD)?;
    ensure_account(db, &op_email, &op_pw, true).await?;
    let member = ensure_account(db, &m_email, &m_pw, false).await?;
    let mut tx = begin(db, TxKind::Plain).await?;
    let org = accounts::ensure_organization(tx.conn(), DEMO_ORGANIZATION).await?;
    accounts::ensure_membership(tx.conn(), org, member, "owner").await?;
    tx.commit().await?;
    Ok(())
}

pub fn describe() -> String {
    format!(
        "Demo accounts:\n  operator  {OPERATOR_EMAIL}  password {OPERATOR_PASSWORD}\n  member    {MEMBER_EMAIL}  password {MEMBER_PASSWORD}  ({DEMO_ORGANIZATION})"
    )
}
