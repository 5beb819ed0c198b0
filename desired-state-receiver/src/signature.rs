//! Standard Webhooks signatures (https://www.standardwebhooks.com/): the three headers, the
//! timestamp window and `v1,<base64 HMAC-SHA256>` over `"<id>.<timestamp>.<body>"`, keyed by the
//! base64 after `whsec_` in a secret.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::{DecodePaddingMode, general_purpose};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Every secret starts with this; the rest is the key in base64.
pub const SECRET_PREFIX: &str = "whsec_";

/// Base64 as senders write it: the standard alphabet, with or without padding.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A secret's key, decoded once when the secret is accepted (never printed).
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A `whsec_<base64>` secret, or a sentence saying what is wrong with it.
    pub fn parse(secret: &str) -> Result<Secret, String> {
        let Some(encoded) = secret.trim().strip_prefix(SECRET_PREFIX) else {
            return Err(format!(
                "A secret must look like {SECRET_PREFIX}<base64>; this one does not start with {SECRET_PREFIX}."
            ));
        };
        let key = LENIENT.decode(encoded).map_err(|e| {
            format!("The part of a secret after {SECRET_PREFIX} must be base64, and this one is not: {e}.")
        })?;
        if key.is_empty() {
            return Err(format!("A secret must carry a key after {SECRET_PREFIX}; this one is empty."));
        }
        Ok(Secret { key })
    }

    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).ok()?;
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        Some(mac)
    }

    /// `v1,<base64>` for this request.
    pub fn sign(&self, id: &str, timestamp: &str, body: &[u8]) -> Option<String> {
        let mac = self.mac(id, timestamp, body)?;
        Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
    }

    /// Whether `signature` (the base64 part of one `v1,` entry) signs this request (constant time).
    fn verifies(&self, id: &str, timestamp: &str, body: &[u8], signature: &[u8]) -> bool {
        self.mac(id, timestamp, body).is_some_and(|mac| mac.verify_slice(signature).is_ok())
    }
}

/// A fresh secret: `whsec_` and the base64 of 24 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 24];
    // A secret made from anything weaker than the OS's randomness would be worse than none.
    getrandom::fill(&mut key).expect("the operating system could not supply random bytes for a secret");
    format!("{SECRET_PREFIX}{}", general_purpose::STANDARD.encode(key))
}

/// The `webhook-signature` value for a request: one `v1,` entry per secret, space-separated (as
/// the console sends during a rotation). Fails with a sentence if a secret is malformed.
pub fn signature_header(secrets: &[&str], id: &str, timestamp: &str, body: &[u8]) -> Result<String, String> {
    let mut entries = Vec::with_capacity(secrets.len());
    for secret in secrets {
        let secret = Secret::parse(secret)?;
        entries.push(secret.sign(id, timestamp, body).ok_or("The secret's key could not key an HMAC.")?);
    }
    Ok(entries.join(" "))
}

/// Whether any `v1,` entry of `header` signs the request under any of `secrets`.
pub fn verify(secrets: &[Secret], id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    header
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|encoded| LENIENT.decode(encoded).ok())
        .any(|signature| secrets.iter().any(|s| s.verifies(id, timestamp, body, &signature)))
}

/// The three headers of a signed request, as received.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
}

/// Check a request's timestamp against `now` (Unix seconds) and its signature over `body`; the
/// error is the sentence a refused sender gets.
pub fn check(
    secrets: &[Secret],
    tolerance: Duration,
    now: i64,
    signed: Option<Signed<'_>>,
    body: &[u8],
) -> Result<(), String> {
    let Some(signed) = signed else {
        return Err("A request must carry the webhook-id, webhook-timestamp and webhook-signature headers \
                    (Standard Webhooks); this one lacks at least one."
            .into());
    };
    let Ok(timestamp) = signed.timestamp.trim().parse::<i64>() else {
        return Err(format!("The webhook-timestamp header must be Unix seconds, not {:?}.", signed.timestamp));
    };
    let off = now.saturating_sub(timestamp).unsigned_abs();
    if off > tolerance.as_secs() {
        return Err(format!(
            "The webhook-timestamp is {off} s away from the receiver's clock, more than the {} s it accepts; \
             sign every attempt afresh.",
            tolerance.as_secs()
        ));
    }
    if secrets.is_empty() {
        return Err("The receiver holds no secret, so it accepts no signature.".into());
    }
    if !verify(secrets, signed.id, signed.timestamp, body, signed.signature) {
        return Err("No v1 signature in webhook-signature matches this request under any secret the receiver \
                    accepts."
            .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn the_standard_webhooks_example_verifies() {
        // The example of the Standard Webhooks specification's reference libraries.
        let secrets = [Secret::parse(SECRET).expect("a valid secret")];
        let body = br#"{"test": 2432232314}"#;
        let header = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert!(verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, header));
        assert!(verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, &format!("v1,AAAA {header}")));
        assert!(!verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265331", body, header));
        assert!(!verify(&secrets, "msg_other", "1614265330", body, header));
        assert!(!verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", b"{}", header));
        assert!(!verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, "v2,g0hM9SsE"));
        assert!(!verify(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, ""));
    }

    #[test]
    fn a_signature_header_signs_with_every_secret_given() {
        let other = new_secret();
        let header = signature_header(&[SECRET, &other], "id", "1", b"body").expect("valid secrets");
        assert_eq!(header.split(' ').count(), 2);
        for secret in [SECRET, other.as_str()] {
            let secrets = [Secret::parse(secret).expect("a valid secret")];
            assert!(verify(&secrets, "id", "1", b"body", &header));
        }
    }

    #[test]
    fn malformed_secrets_are_refused_with_a_sentence() {
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(Secret::parse("whsec_").is_err());
        assert!(Secret::parse("whsec_not base64!").is_err());
        assert!(new_secret().starts_with(SECRET_PREFIX));
        assert_eq!(new_secret().len(), SECRET_PREFIX.len() + 32);
    }

    #[test]
    fn a_timestamp_outside_the_tolerance_is_refused() {
        let secrets = [Secret::parse(SECRET).expect("a valid secret")];
        let header = signature_header(&[SECRET], "id", "1000", b"").expect("valid secret");
        let signed = Signed { id: "id", timestamp: "1000", signature: &header };
        let tolerance = Duration::from_secs(300);
        assert!(check(&secrets, tolerance, 1300, Some(signed), b"").is_ok());
        assert!(check(&secrets, tolerance, 700, Some(signed), b"").is_ok());
        assert!(check(&secrets, tolerance, 1301, Some(signed), b"").is_err());
        assert!(check(&secrets, tolerance, 699, Some(signed), b"").is_err());
        assert!(check(&secrets, tolerance, 1000, None, b"").is_err());
        assert!(check(&[], tolerance, 1000, Some(signed), b"").is_err());
    }
}
