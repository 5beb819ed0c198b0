//! The farm's callback signature: `Farm-Timestamp: <unix seconds>` and
//! `Farm-Signature: v1=<hex>`, the HMAC-SHA256 of `<timestamp>.<raw body>` under
//! `FARM_CALLBACK_SECRET`. Checked on the raw bytes before anything else is read.

use hmac::Mac;

use crate::integrations::stripe::signature::mac_for;

/// How far a callback's timestamp may be from now, either way.
pub const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the callback has no Farm-Timestamp or Farm-Signature header")]
    Missing,
    #[error("the Farm-Timestamp or Farm-Signature header is not in the farm's form")]
    Malformed,
    #[error("the callback's timestamp is outside the {TOLERANCE_SECS} s tolerance")]
    OutsideTolerance,
    #[error("the callback's signature was not made with the configured secret")]
    NoMatch,
}

/// Verify a callback's two headers over `body` at `now` (unix seconds).
pub fn verify(
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    secret: &str,
    now: i64,
) -> Result<(), SignatureError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else { return Err(SignatureError::Missing) };
    let t: i64 = timestamp.trim().parse().map_err(|_| SignatureError::Malformed)?;
    let mut any = false;
    let mut matched = false;
    for part in signature.split(',') {
        let Some(hex) = part.trim().strip_prefix("v1=") else { continue };
        let sig = crate::config::decode_hex(hex).filter(|b| b.len() == 32).ok_or(SignatureError::Malformed)?;
        any = true;
        // verify_slice compares in constant time.
        matched |= mac_for(secret, t, body).verify_slice(&sig).is_ok();
    }
    if !any {
        return Err(SignatureError::Malformed);
    }
    if (now - t).abs() > TOLERANCE_SECS {
        return Err(SignatureError::OutsideTolerance);
    }
    if matched { Ok(()) } else { Err(SignatureError::NoMatch) }
}

/// The `Farm-Signature` header the farm sends for `body` at `t` (tests sign with it).
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    format!("v1={}", crate::config::encode_hex(&mac_for(secret, t, body).finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_callback_signed_with_the_secret_within_tolerance_is_accepted_and_nothing_else_is() {
        let body = br#"{"id":"cb_1"}"#;
        let t = (NOW - 5).to_string();
        let good = sign("s3cret", NOW - 5, body);
        assert_eq!(verify(Some(&t), Some(&good), body, "s3cret", NOW), Ok(()));
        assert_eq!(verify(Some(&t), Some(&good), b"{\"id\":\"cb_2\"}", "s3cret", NOW), Err(SignatureError::NoMatch));
        assert_eq!(verify(Some(&t), Some(&good), body, "other", NOW), Err(SignatureError::NoMatch));
        assert_eq!(verify(Some(&t), Some(&good), body, "s3cret", NOW + 400), Err(SignatureError::OutsideTolerance));
        assert_eq!(verify(None, Some(&good), body, "s3cret", NOW), Err(SignatureError::Missing));
        assert_eq!(verify(Some("soon"), Some(&good), body, "s3cret", NOW), Err(SignatureError::Malformed));
        assert_eq!(verify(Some(&t), Some("v1=zz"), body, "s3cret", NOW), Err(SignatureError::Malformed));
        assert_eq!(verify(Some(&t), Some("v0=abc"), body, "s3cret", NOW), Err(SignatureError::Malformed));
    }
}
