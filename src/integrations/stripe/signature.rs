//! Stripe's webhook signature: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, each v1 an
//! HMAC-SHA256 of `<t>.<raw body>` under an endpoint's signing secret. Checked on the raw bytes
//! before anything else is read, against every configured secret (a rotation has two).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a signature's timestamp may be from now, either way (Stripe's libraries use 300 s).
pub const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the request has no Stripe-Signature header")]
    Missing,
    #[error("the Stripe-Signature header is not in Stripe's form (t=…,v1=…)")]
    Malformed,
    #[error("the signature's timestamp is outside the {TOLERANCE_SECS} s tolerance")]
    OutsideTolerance,
    #[error("no configured webhook secret made this signature")]
    NoMatch,
    #[error("no webhook secret is configured, so no event can be verified")]
    NoSecret,
}

/// Verify `header` over `body` at `now` (unix seconds) with any of `secrets`.
pub fn verify(header: Option<&str>, body: &[u8], secrets: &[String], now: i64) -> Result<(), SignatureError> {
    if secrets.is_empty() {
        return Err(SignatureError::NoSecret);
    }
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp: Option<i64> = None;
    let mut signatures: Vec<Vec<u8>> = Vec::new();
    for part in header.split(',') {
        let (k, v) = part.trim().split_once('=').ok_or(SignatureError::Malformed)?;
        match k {
            "t" => timestamp = Some(v.parse().map_err(|_| SignatureError::Malformed)?),
            "v1" => signatures.push(decode_hex(v).ok_or(SignatureError::Malformed)?),
            // v0 (test mode's old scheme) and future schemes are ignored, as Stripe's libraries do.
            _ => {}
        }
    }
    let t = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    if (now - t).abs() > TOLERANCE_SECS {
        return Err(SignatureError::OutsideTolerance);
    }
    for secret in secrets {
        for sig in &signatures {
            let mac = mac_for(secret, t, body);
            // verify_slice compares in constant time.
            if mac.verify_slice(sig).is_ok() {
                return Ok(());
            }
        }
    }
    Err(SignatureError::NoMatch)
}

/// The header Stripe would send for `body` at `t` under `secret` (tests and the bench sign with it).
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    let tag = mac_for(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", crate::config::encode_hex(&tag))
}

/// HMAC-SHA256 of `<t>.<body>` under `secret`: Stripe's scheme, which the farm's callbacks share.
pub(crate) fn mac_for(secret: &str, t: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    crate::config::decode_hex(s).filter(|b| b.len() == 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_signature_made_with_any_configured_secret_at_a_time_within_tolerance_is_accepted() {
        let body = br#"{"id":"evt_1"}"#;
        let secrets = vec!["whsec_old".to_string(), "whsec_new".to_string()];
        assert_eq!(verify(Some(&sign("whsec_new", NOW - 10, body)), body, &secrets, NOW), Ok(()));
        assert_eq!(verify(Some(&sign("whsec_old", NOW + 10, body)), body, &secrets, NOW), Ok(()));
        // A header with a stale v1 beside a good one (Stripe sends one per active secret).
        let two = format!("{},v1={}", sign("whsec_new", NOW, body), "00".repeat(32));
        assert_eq!(verify(Some(&two), body, &secrets, NOW), Ok(()));
    }

    #[test]
    fn a_missing_malformed_foreign_tampered_or_stale_signature_is_refused() {
        let body = br#"{"id":"evt_1"}"#;
        let secrets = vec!["whsec_ours".to_string()];
        assert_eq!(verify(None, body, &secrets, NOW), Err(SignatureError::Missing));
        assert_eq!(verify(Some("garbage"), body, &secrets, NOW), Err(SignatureError::Malformed));
        assert_eq!(verify(Some("t=abc,v1=00"), body, &secrets, NOW), Err(SignatureError::Malformed));
        assert_eq!(verify(Some(&format!("t={NOW}")), body, &secrets, NOW), Err(SignatureError::Malformed));
        assert_eq!(verify(Some(&sign("whsec_theirs", NOW, body)), body, &secrets, NOW), Err(SignatureError::NoMatch));
        assert_eq!(
            verify(Some(&sign("whsec_ours", NOW, body)), br#"{"id":"evt_2"}"#, &secrets, NOW),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify(Some(&sign("whsec_ours", NOW - TOLERANCE_SECS - 1, body)), body, &secrets, NOW),
            Err(SignatureError::OutsideTolerance)
        );
        assert_eq!(
            verify(Some(&sign("whsec_ours", NOW + TOLERANCE_SECS + 1, body)), body, &secrets, NOW),
            Err(SignatureError::OutsideTolerance)
        );
        assert_eq!(verify(Some(&sign("whsec_ours", NOW, body)), body, &[], NOW), Err(SignatureError::NoSecret));
    }
}
