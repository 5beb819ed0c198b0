//! How the console's Stripe calls go out. async-stripe builds each request (path, query, form,
//! idempotency key) and reads each answer; this sends it over reqwest, because async-stripe's
//! own client takes no header per request, and every call must carry the id of the request it
//! is made for (`x-request-id` and a `traceparent`, as the farm's and the connected systems'
//! calls do) and name it in the log. Stripe accepts headers it does not know.

use std::time::Duration;

use actix_web::web::Bytes;
use stripe::StripeError;
use stripe_client_core::{CustomizedStripeRequest, StripeMethod};

/// Stripe's address and the account's key, over one HTTP client.
pub(crate) struct Transport {
    http: reqwest::Client,
    /// Ends with a slash: `https://api.stripe.com/`.
    api_base: String,
    authorization: String,
}

/// The User-Agent: async-stripe's, and who uses it.
const USER_AGENT: &str = "Stripe/v1 RustBindings/1.0.0-rc.10 member-console";

impl Transport {
    pub fn new(secret_key: &str, api_base: &str, timeout: Duration) -> Result<Transport, StripeError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| StripeError::ConfigError(format!("the HTTP client: {e}")))?;
        let api_base = if api_base.ends_with('/') { api_base.to_string() } else { format!("{api_base}/") };
        url::Url::parse(&api_base)
            .map_err(|e| StripeError::ConfigError(format!("user-provided Stripe url is invalid: {e}")))?;
        if secret_key.chars().any(|c| !c.is_ascii_graphic()) {
            return Err(StripeError::ClientError("`secret` can only include visible ASCII characters".into()));
        }
        Ok(Transport { http, api_base, authorization: format!("Bearer {secret_key}") })
    }

    /// Send one request once (the console's retries are its jobs'), with the request id.
    pub async fn execute(&self, operation: &'static str, req: CustomizedStripeRequest) -> Result<Bytes, StripeError> {
        let (req, config) = req.into_pieces();
        let mut url = format!("{}v1{}", self.api_base, req.path);
        if let Some(query) = &req.query {
            url.push('?');
            url.push_str(query);
        }
        let (method, mut call) = match req.method {
            StripeMethod::Get => ("GET", self.http.get(url)),
            StripeMethod::Post => ("POST", self.http.post(url)),
            StripeMethod::Delete => ("DELETE", self.http.delete(url)),
        };
        call = call
            .header("authorization", &self.authorization)
            .header("stripe-version", stripe_shared::version::VERSION.as_str());
        if let Some(key) = config.request_strategy.as_ref().and_then(|s| s.get_key()) {
            call = call.header("idempotency-key", key.as_str());
        }
        if let Some(timeout) = config.timeout {
            call = call.timeout(timeout);
        }
        if let Some(body) = req.body {
            call = call.header("content-type", "application/x-www-form-urlencoded").body(body);
        }
        tracing::info!(
            request_id = crate::trace_context::current().as_deref(),
            operation,
            method,
            path = %req.path,
            "a Stripe call"
        );
        let answer = crate::trace_context::outgoing(call).send().await.map_err(failed)?;
        let status = answer.status();
        let bytes = answer.bytes().await.map_err(failed)?;
        if status.is_success() {
            return Ok(bytes);
        }
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| StripeError::JSONDeserialize("Response was not valid UTF-8".into()))?;
        Err(miniserde::json::from_str::<stripe_shared::Error>(text)
            .map(|e| StripeError::Stripe(e.error, status.as_u16()))
            .unwrap_or_else(|_| StripeError::JSONDeserialize("error deserializing Stripe error".into())))
    }
}

fn failed(e: reqwest::Error) -> StripeError {
    if e.is_timeout() { StripeError::Timeout } else { StripeError::ClientError(e.to_string()) }
}
