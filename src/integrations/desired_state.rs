//! The connected systems' side of the relay (docs/desired-state.md, "The wire protocol"): a
//! signed push of one record, a signed test, and a signed read-back, each bounded. Signatures
//! follow Standard Webhooks: HMAC-SHA256 over "<id>.<timestamp>.<body>", one `v1,` entry per
//! live secret; a read-back, which has no body, signs its request target (path and query) in the
//! body's place. No redirect is followed.

use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: the prefix and 24 random bytes in base64.
pub fn new_secret() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a secret: {e}"))?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes)))
}

/// The `webhook-signature` header for `body` under every secret given: `v1,<base64>` entries,
/// space-separated. A secret that is not `whsec_` and base64 is an error naming it by position.
pub fn signature_header(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> Result<String, String> {
    let mut entries = vec![];
    for (i, secret) in secrets.iter().enumerate() {
        let key = secret
            .strip_prefix(SECRET_PREFIX)
            .and_then(|k| STANDARD.decode(k).ok())
            .ok_or_else(|| format!("signing secret {} is not whsec_ and base64", i + 1))?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        entries.push(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())));
    }
    Ok(entries.join(" "))
}

/// What a push or a test came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx; the generation the remote says it holds, when it said.
    Accepted { status: u16, generation: Option<i64> },
    /// Anything else, in a sentence for the operators' page.
    Failed(String),
}

/// What a read-back found.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    Content {
        generation: i64,
        content: serde_json::Value,
    },
    Nothing,
    /// The remote could not be asked (no answer, a failure, a body that is not the protocol's).
    Unknown(String),
}

/// The client every push goes through; each call bounded by `timeout`.
#[derive(Clone)]
pub struct Relay {
    http: reqwest::Client,
    timeout: Duration,
}

/// How much of a failing answer's body the operators see.
const ANSWER_CHARS: usize = 300;

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

fn headers(secrets: &[&str], id: &str, body: &[u8]) -> Result<[(&'static str, String); 3], String> {
    let ts = now_secs();
    Ok([
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", signature_header(secrets, id, ts, body)?),
    ])
}

/// A failed call in words: the bound, the connection, or the answer.
fn transport_failure(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", timeout.as_secs_f64())
    } else if e.is_connect() {
        "could not connect".to_string()
    } else {
        format!("the call failed: {e}")
    }
}

/// The read-back address of one recipient: the connection's URL with the recipient's query
/// appended.
pub fn read_back_url(url: &str, kind: &str, recipient: i64) -> Result<reqwest::Url, String> {
    let mut u = reqwest::Url::parse(url).map_err(|e| format!("the connection's URL does not parse: {e}"))?;
    u.query_pairs_mut().append_pair("recipient_kind", kind).append_pair("recipient_id", &recipient.to_string());
    Ok(u)
}

/// What a read-back's signature covers: the request target as the request line carries it, the
/// path and the query (`/desired-state?recipient_kind=organization&recipient_id=42`).
pub fn request_target(url: &reqwest::Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// A 3xx in words: the console follows no redirect, so the operator learns where the endpoint
/// points and can set the connection's URL there.
fn redirected(what: &str, resp: &reqwest::Response) -> Option<String> {
    let status = resp.status();
    if !status.is_redirection() {
        return None;
    }
    let to = match resp.headers().get(reqwest::header::LOCATION).map(|l| l.to_str()) {
        Some(Ok(l)) => format!("to {}", clipped(l)),
        Some(Err(_)) => "to a Location that is not text".to_string(),
        None => "without a Location".to_string(),
    };
    Some(format!(
        "{what} answered {} (a redirect) {to}; the console does not follow redirects, so nothing was \
         delivered: point the connection's URL at the endpoint itself",
        status.as_u16()
    ))
}

fn clipped(text: &str) -> String {
    let t: String = text.chars().take(ANSWER_CHARS).collect();
    if t.len() < text.len() { format!("{t}…") } else { t }
}

impl Relay {
    pub fn new(timeout: Duration) -> Result<Relay, String> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            // A redirect is not an answer from the endpoint: followed, a POST becomes a body-less
            // GET whose 200 would count as a confirmation of a push nobody received.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("the desired-state client could not start: {e}"))?;
        Ok(Relay { http, timeout })
    }

    /// Each call's bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// POST `body` to `url`, signed under `secrets` with the id `id`.
    pub async fn post(&self, url: &str, secrets: &[&str], id: &str, body: Vec<u8>) -> Answer {
        let call = self.post_unmeasured(url, secrets, id, body);
        crate::metrics::timed(crate::metrics::System::Connection, "push", call, |a| matches!(a, Answer::Failed(_)))
            .await
    }

    async fn post_unmeasured(&self, url: &str, secrets: &[&str], id: &str, body: Vec<u8>) -> Answer {
        let hs = match headers(secrets, id, &body) {
            Ok(h) => h,
            Err(e) => return Answer::Failed(e),
        };
        let mut rq = crate::trace_context::outgoing(self.http.post(url)).header("content-type", "application/json");
        for (k, v) in hs {
            rq = rq.header(k, v);
        }
        let resp = match rq.body(body).send().await {
            Ok(r) => r,
            Err(e) => return Answer::Failed(transport_failure(&e, self.timeout)),
        };
        if let Some(why) = redirected("the endpoint", &resp) {
            return Answer::Failed(why);
        }
        let status = resp.status().as_u16();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Answer::Failed(transport_failure(&e, self.timeout)),
        };
        if !(200..300).contains(&status) {
            let said = clipped(text.trim());
            return Answer::Failed(if said.is_empty() {
                format!("answered {status}")
            } else {
                format!("answered {status}: {said}")
            });
        }
        let generation = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("generation").and_then(|g| g.as_i64()));
        Answer::Accepted { status, generation }
    }

    /// GET what the remote at `url` holds for one recipient, signed over the request target (the
    /// path and the query), so neither the recipient nor the address can be changed under the
    /// signature.
    pub async fn read_back(&self, url: &str, secrets: &[&str], id: &str, kind: &str, recipient: i64) -> Held {
        let call = self.read_back_unmeasured(url, secrets, id, kind, recipient);
        crate::metrics::timed(crate::metrics::System::Connection, "read back", call, |h| matches!(h, Held::Unknown(_)))
            .await
    }

    async fn read_back_unmeasured(&self, url: &str, secrets: &[&str], id: &str, kind: &str, recipient: i64) -> Held {
        let url = match read_back_url(url, kind, recipient) {
            Ok(u) => u,
            Err(e) => return Held::Unknown(e),
        };
        let hs = match headers(secrets, id, request_target(&url).as_bytes()) {
            Ok(h) => h,
            Err(e) => return Held::Unknown(e),
        };
        let mut rq = crate::trace_context::outgoing(self.http.get(url));
        for (k, v) in hs {
            rq = rq.header(k, v);
        }
        let resp = match rq.send().await {
            Ok(r) => r,
            Err(e) => return Held::Unknown(transport_failure(&e, self.timeout)),
        };
        if let Some(why) = redirected("read-back", &resp) {
            return Held::Unknown(why);
        }
        let status = resp.status().as_u16();
        if status == 404 {
            return Held::Nothing;
        }
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Held::Unknown(transport_failure(&e, self.timeout)),
        };
        if status != 200 {
            return Held::Unknown(format!("read-back answered {status}: {}", clipped(text.trim())));
        }
        let v: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => return Held::Unknown("read-back answered 200 with a body that is not JSON".into()),
        };
        match (v.get("generation").and_then(|g| g.as_i64()), v.get("content")) {
            (Some(generation), Some(content)) => Held::Content { generation, content: content.clone() },
            _ => Held::Unknown("read-back answered without a generation and a content".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_the_standard_webhooks_hmac_one_entry_per_secret() {
        // The Standard Webhooks specification's own example.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let h = signature_header(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).unwrap();
        assert_eq!(h, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let two = signature_header(&[secret, secret], "x", 1, b"").unwrap();
        assert_eq!(two.split(' ').count(), 2);
        assert!(signature_header(&["nope"], "x", 1, b"").is_err());
        assert!(new_secret().unwrap().starts_with(SECRET_PREFIX));
    }

    #[test]
    fn a_read_back_signs_the_path_and_the_query_it_sends() {
        let u = read_back_url("http://127.0.0.1:9/hooks/ds?token=a b#top", "organization", 42).unwrap();
        assert_eq!(request_target(&u), "/hooks/ds?token=a%20b&recipient_kind=organization&recipient_id=42");
        assert!(read_back_url("not a url", "organization", 1).is_err());
    }
}
