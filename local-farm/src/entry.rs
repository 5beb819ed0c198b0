//! A member's way in to edit a site (docs/farm-api.md, "Editing a site"): the console's entry
//! credential, and the farm's own edit-session cookie that a verified credential sets.
//!
//! Both are `<hex of a JSON payload>.<hex of HMAC-SHA256(key, hex payload)>`. The entry
//! credential's key is derived from the farm's API token, which the console holds too
//! ([`entry_key`]); the cookie's key is the farm's own (`farm-keys.json`), so only the farm makes
//! one.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// How long the console's credentials live; a credential claiming to live longer is refused.
pub const ENTRY_LIFETIME_SECS: i64 = 60;
/// How long the farm's edit session lasts at most, however often it is confirmed.
pub const SESSION_LIFETIME_SECS: i64 = 12 * 3600;
/// The farm's edit-session cookie.
pub const SESSION_COOKIE: &str = "farmEdit";
/// `wiki`'s own session cookie (client-sessions, `wiki-security-friends`).
pub const WIKI_COOKIE: &str = "wikiSession";

/// What the console's entry credential says: this account of this owner may edit this site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryClaims {
    pub domain: String,
    pub account_id: i64,
    /// The member, as the console names them (for the farm's log).
    pub name: String,
    /// The site's owner string, as the console created the site with it.
    pub owner: String,
    /// Unix seconds after which the credential is refused.
    pub exp: i64,
    /// Random; a credential is accepted once.
    pub nonce: String,
}

/// The farm's edit session for one site, in its cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditSession {
    pub domain: String,
    pub account_id: i64,
    pub owner: String,
    /// Unix seconds: when the console last said the account may edit the site.
    pub confirmed_at: i64,
    /// Unix seconds: when the member entered.
    pub issued_at: i64,
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], data: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

/// The entry credentials' key: HMAC-SHA256 under the farm's API token of the text
/// `member-console site entry v1`.
pub fn entry_key(token: &str) -> Vec<u8> {
    mac(token.as_bytes(), b"member-console site entry v1").finalize().into_bytes().to_vec()
}

fn seal<T: Serialize>(key: &[u8], payload: &T) -> String {
    let body = hex(&serde_json::to_vec(payload).unwrap_or_default());
    let tag = hex(&mac(key, body.as_bytes()).finalize().into_bytes());
    format!("{body}.{tag}")
}

fn open<T: for<'de> Deserialize<'de>>(key: &[u8], sealed: &str) -> Option<T> {
    let (body, tag) = sealed.trim().split_once('.')?;
    let tag = decode_hex(tag)?;
    // verify_slice compares in constant time.
    mac(key, body.as_bytes()).verify_slice(&tag).ok()?;
    serde_json::from_slice(&decode_hex(body)?).ok()
}

/// A credential as the console makes it (the reference for a console's implementation; the
/// farm's tests use it).
pub fn sign_entry(token: &str, claims: &EntryClaims) -> String {
    seal(&entry_key(token), claims)
}

/// Why an entry credential was refused, in words for the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Forged,
    Expired,
    ForeignSite,
    Reused,
}

impl Refused {
    pub fn sentence(self) -> &'static str {
        match self {
            Refused::Forged => "This link to edit the wiki was not made by the Member Console.",
            Refused::Expired => "This link to edit the wiki has expired. Open the wiki again from the Member Console.",
            Refused::ForeignSite => "This link to edit a wiki was made for another wiki.",
            Refused::Reused => {
                "This link to edit the wiki was used already. Open the wiki again from the Member Console."
            }
        }
    }
}

/// The credentials accepted so far, until they expire.
#[derive(Default)]
pub struct Nonces(Mutex<HashMap<String, i64>>);

impl Nonces {
    /// Whether `nonce` is new (and now remembered until `exp`).
    fn first_use(&self, nonce: &str, exp: i64, now: i64) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, until| *until >= now);
        if seen.contains_key(nonce) {
            return false;
        }
        seen.insert(nonce.to_string(), exp);
        true
    }
}

/// Check a credential for the site `domain` at `now`: made with the token's key, not expired, not
/// claiming to live longer than [`ENTRY_LIFETIME_SECS`], for this site, and not used before.
pub fn verify_entry(
    token: &str,
    credential: &str,
    domain: &str,
    now: i64,
    nonces: &Nonces,
) -> Result<EntryClaims, Refused> {
    let claims: EntryClaims = open(&entry_key(token), credential).ok_or(Refused::Forged)?;
    if claims.nonce.len() < 16 {
        return Err(Refused::Forged);
    }
    if claims.exp < now || claims.exp > now + ENTRY_LIFETIME_SECS + 5 {
        return Err(Refused::Expired);
    }
    if claims.domain != domain {
        return Err(Refused::ForeignSite);
    }
    if !nonces.first_use(&claims.nonce, claims.exp, now) {
        return Err(Refused::Reused);
    }
    Ok(claims)
}

/// The cookie's value for `session`.
pub fn seal_session(key: &str, session: &EditSession) -> String {
    seal(key.as_bytes(), session)
}

/// The session in a cookie's value, when the farm made it for this site and owner and it is not
/// older than [`SESSION_LIFETIME_SECS`].
pub fn open_session(key: &str, value: &str, domain: &str, owner: &str, now: i64) -> Option<EditSession> {
    let s: EditSession = open(key.as_bytes(), value)?;
    (s.domain == domain && s.owner == owner && now - s.issued_at <= SESSION_LIFETIME_SECS && s.issued_at <= now + 5)
        .then_some(s)
}

/// `Set-Cookie` for the edit session: this host only, not readable by scripts, not sent on
/// another site's requests.
pub fn session_cookie(value: &str) -> String {
    format!("{SESSION_COOKIE}={value}; Path=/; Max-Age={SESSION_LIFETIME_SECS}; HttpOnly; SameSite=Lax")
}

/// `Set-Cookie`s that end both the farm's and `wiki`'s sessions in the browser.
pub fn clearing_cookies() -> [String; 2] {
    [
        format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"),
        format!("{WIKI_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn claims(domain: &str, exp: i64, nonce: &str) -> EntryClaims {
        EntryClaims {
            domain: domain.into(),
            account_id: 7,
            name: "ann@example.org".into(),
            owner: "org_1".into(),
            exp,
            nonce: nonce.into(),
        }
    }

    #[test]
    fn a_credential_is_accepted_once_for_its_own_site_before_it_expires() {
        let nonces = Nonces::default();
        let c = sign_entry("tok", &claims("acme.wiki.localhost", NOW + 60, "0123456789abcdef"));
        assert_eq!(verify_entry("tok", &c, "other.wiki.localhost", NOW, &nonces), Err(Refused::ForeignSite));
        assert_eq!(verify_entry("other-token", &c, "acme.wiki.localhost", NOW, &nonces), Err(Refused::Forged));
        assert_eq!(verify_entry("tok", &c, "acme.wiki.localhost", NOW + 61, &nonces), Err(Refused::Expired));
        let ok = verify_entry("tok", &c, "acme.wiki.localhost", NOW, &nonces).expect("accepted");
        assert_eq!(ok.account_id, 7);
        assert_eq!(verify_entry("tok", &c, "acme.wiki.localhost", NOW + 1, &nonces), Err(Refused::Reused));
    }

    #[test]
    fn a_tampered_or_long_lived_credential_is_refused() {
        let nonces = Nonces::default();
        let c = sign_entry("tok", &claims("acme.wiki.localhost", NOW + 60, "0123456789abcdef"));
        let (body, tag) = c.split_once('.').unwrap();
        let other_body =
            hex(&serde_json::to_vec(&claims("evil.wiki.localhost", NOW + 60, "0123456789abcdef")).unwrap());
        for bad in [format!("{other_body}.{tag}"), format!("{body}.00"), body.to_string(), String::new()] {
            assert_eq!(verify_entry("tok", &bad, "acme.wiki.localhost", NOW, &nonces), Err(Refused::Forged), "{bad}");
        }
        let long = sign_entry("tok", &claims("acme.wiki.localhost", NOW + 3600, "0123456789abcdef"));
        assert_eq!(verify_entry("tok", &long, "acme.wiki.localhost", NOW, &nonces), Err(Refused::Expired));
    }

    #[test]
    fn a_session_opens_only_for_its_site_and_owner_and_while_young() {
        let s = EditSession {
            domain: "acme.wiki.localhost".into(),
            account_id: 7,
            owner: "org_1".into(),
            confirmed_at: NOW,
            issued_at: NOW,
        };
        let v = seal_session("k", &s);
        assert_eq!(open_session("k", &v, "acme.wiki.localhost", "org_1", NOW + 10), Some(s));
        assert_eq!(open_session("k2", &v, "acme.wiki.localhost", "org_1", NOW), None);
        assert_eq!(open_session("k", &v, "other.wiki.localhost", "org_1", NOW), None);
        assert_eq!(open_session("k", &v, "acme.wiki.localhost", "org_2", NOW), None);
        assert_eq!(open_session("k", &v, "acme.wiki.localhost", "org_1", NOW + SESSION_LIFETIME_SECS + 1), None);
    }
}
