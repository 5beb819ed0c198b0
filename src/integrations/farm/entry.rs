//! The entry credential the console hands a member for one site (docs/farm-api.md, "Editing a
//! site"): `<hex of the JSON claims>.<hex of HMAC-SHA256(key, hex of the claims)>`, the key being
//! HMAC-SHA256 under `FARM_TOKEN` of the text `member-console site entry v1`. Short-lived, single
//! use at the farm, naming the site, the account, the member and the site's owner string.

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::ids::{SiteDomain, WorkspaceId};

/// How long a credential lives: long enough to follow a redirect, too short to be worth keeping.
pub const LIFETIME_SECS: i64 = 60;

/// What a credential says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryClaims {
    pub domain: SiteDomain,
    pub account_id: i64,
    /// The member, as the farm may log them.
    pub name: String,
    /// The site's owner string, as the console created the site with it.
    pub owner: WorkspaceId,
    /// Unix seconds after which the farm refuses it.
    pub exp: i64,
    /// Random: the farm accepts a credential once.
    pub nonce: String,
}

fn mac(key: &[u8], data: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac
}

/// The credential for `claims`, signed with the key derived from the farm's token.
pub fn sign(token: &str, claims: &EntryClaims) -> String {
    let key = mac(token.as_bytes(), b"member-console site entry v1").finalize().into_bytes();
    let body = crate::config::encode_hex(&serde_json::to_vec(claims).unwrap_or_default());
    let tag = crate::config::encode_hex(&mac(&key, body.as_bytes()).finalize().into_bytes());
    format!("{body}.{tag}")
}
